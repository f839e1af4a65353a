package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
)

// TestQuickstartTrace runs the quickstart and checks that each primitive
// shows the behaviour the README promises.
func TestQuickstartTrace(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	runErr := run(context.Background())
	os.Stdout = stdout
	w.Close()
	var buf bytes.Buffer
	io.Copy(&buf, r)
	if runErr != nil {
		t.Fatalf("run: %v\n%s", runErr, buf.String())
	}
	out := buf.String()
	for _, want := range []string{
		"worker B: rejected, nothing overwritten: durable: UpdateWorkflow: conflict",
		"retry:          201 {\"charge\":\"ch_1\",\"amount\":500} (replayed=true)",
		"same key, other payload: rejected: durable: ClaimKey: key conflict",
		"worker-b takes over, token 2 > 1",
		"worker-a wakes: stale write rejected: durable: UpdateWorkflow: fenced",
		"final state: status=succeeded revision=4",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q\n%s", want, out)
		}
	}
}
