package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
)

// invoke runs the CLI in-process and returns its exit code and output.
func invoke(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelpOnEveryCommand(t *testing.T) {
	if code, out, _ := invoke(t, "--help"); code != 0 || !strings.Contains(out, "bench") {
		t.Fatalf("durable --help: %d %q", code, out)
	}
	for _, c := range commands() {
		code, out, _ := invoke(t, c.name, "--help")
		if code != 0 || !strings.Contains(out, "usage: durable "+c.name) || !strings.Contains(out, "-dsn") {
			t.Errorf("%s --help: code %d, output %q", c.name, code, out)
		}
	}
	if code, _, errOut := invoke(t, "frobnicate"); code != 2 || !strings.Contains(errOut, "unknown command") {
		t.Fatalf("unknown command: %d %q", code, errOut)
	}
	if code, _, _ := invoke(t); code != 2 {
		t.Fatalf("no command: %d", code)
	}
}

func TestMissingDSN(t *testing.T) {
	t.Setenv("DURABLE_DSN", "")
	code, _, errOut := invoke(t, "inspect", "workflow", "w")
	if code != 2 || !strings.Contains(errOut, "DURABLE_DSN") {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
}

func TestErrorsNeverPrintPassword(t *testing.T) {
	code, out, errOut := invoke(t, "inspect", "--dsn", "nosuch://admin:hunter2@db.internal/x", "workflow", "w")
	if code != 1 || strings.Contains(out+errOut, "hunter2") || strings.Contains(out+errOut, "db.internal") {
		t.Fatalf("code %d, output %q %q", code, out, errOut)
	}
	if !strings.Contains(errOut, "hint:") {
		t.Fatalf("no hint in %q", errOut)
	}
}

func seedMemory(t *testing.T, dsn string) *durable.Store {
	t.Helper()
	ctx := context.Background()
	s, err := durable.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestInspectMemory(t *testing.T) {
	const dsn = "memory://cli-inspect"
	s := seedMemory(t, dsn)
	ctx := context.Background()
	tenant := durable.TenantScope("acme")
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{Scope: tenant, ID: "order-1", Snapshot: []byte(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k1"}, Fingerprint: "sha256:x", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: c.Record.KeyRef, Token: c.Token,
		Outcome: durable.Outcome{Code: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte{0xff, 0x00}}}); err != nil {
		t.Fatal(err)
	}
	l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "w1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	code, out, errOut := invoke(t, "inspect", "--dsn", dsn, "--tenant", "acme", "workflow", "order-1")
	if code != 0 || !strings.Contains(out, "revision:") || !strings.Contains(out, `"{\"a\":1}"`) || !strings.Contains(out, "status:") {
		t.Fatalf("workflow: %d %q %q", code, out, errOut)
	}
	code, out, _ = invoke(t, "inspect", "--dsn", dsn, "--json", "key", "k1")
	var k keyOut
	if code != 0 || json.Unmarshal([]byte(out), &k) != nil || k.State != "completed" || k.Outcome.Code != 201 ||
		!bytes.Equal(k.Outcome.Body, []byte{0xff, 0x00}) || k.Outcome.Header["Content-Type"][0] != "application/json" {
		t.Fatalf("key json: %d %q", code, out)
	}
	code, out, _ = invoke(t, "inspect", "--dsn", dsn, "key", "k1")
	if code != 0 || !strings.Contains(out, "(2 bytes)") || !strings.Contains(out, "header Content-Type:") {
		t.Fatalf("key text: %q", out)
	}
	code, out, _ = invoke(t, "inspect", "--dsn", dsn, "--json", "lease", "job")
	var lo leaseOut
	if code != 0 || json.Unmarshal([]byte(out), &lo) != nil || lo.Token != l.Token || lo.Owner != "w1" {
		t.Fatalf("lease json: %d %q", code, out)
	}
	// Not found in the unscoped namespace: exit 1 with a hint.
	code, _, errOut = invoke(t, "inspect", "--dsn", dsn, "workflow", "order-1")
	if code != 1 || !strings.Contains(errOut, "not found") || !strings.Contains(errOut, "--tenant") {
		t.Fatalf("scoped miss: %d %q", code, errOut)
	}
	for _, args := range [][]string{
		{"inspect", "--dsn", dsn, "thing", "x"},
		{"inspect", "--dsn", dsn, "workflow"},
		{"inspect", "--dsn", dsn, "--scope", "a", "--tenant", "b", "workflow", "x"},
	} {
		if code, _, _ := invoke(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestCleanupMemory(t *testing.T) {
	const dsn = "memory://cli-cleanup"
	s := seedMemory(t, dsn)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "done-" + string(rune('a'+i)), Status: durable.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "live", Status: durable.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	code, out, _ := invoke(t, "cleanup", "--dsn", dsn, "--terminal-age", "0s", "--dry-run")
	if code != 0 || !strings.Contains(out, "would delete: 5 workflows") {
		t.Fatalf("dry run: %d %q", code, out)
	}
	if list, _ := s.ListWorkflows(ctx, durable.ListQuery{}); len(list) != 6 {
		t.Fatalf("dry run deleted records: %d left", len(list))
	}
	// Records younger than --terminal-age stay.
	code, out, _ = invoke(t, "cleanup", "--dsn", dsn, "--terminal-age", "1h")
	if code != 0 || !strings.Contains(out, "deleted: 0 workflows") {
		t.Fatalf("young: %d %q", code, out)
	}
	code, out, errOut := invoke(t, "cleanup", "--dsn", dsn, "--terminal-age", "0s", "--batch", "2", "--progress", "0")
	if code != 0 || !strings.Contains(out, "deleted: 5 workflows") || !strings.Contains(errOut, "batch 3:") {
		t.Fatalf("cleanup: %d %q %q", code, out, errOut)
	}
	if list, _ := s.ListWorkflows(ctx, durable.ListQuery{}); len(list) != 1 || list[0].ID != "live" {
		t.Fatalf("left: %+v", list)
	}
	if code, _, _ := invoke(t, "cleanup", "--dsn", dsn, "--batch", "0"); code != 2 {
		t.Fatalf("bad batch: exit %d", code)
	}
}

func TestBenchMemory(t *testing.T) {
	code, out, errOut := invoke(t, "bench", "--dsn", "memory://", "--concurrency", "2", "--duration", "300ms", "--progress", "100ms")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	for _, op := range benchOps {
		if !strings.Contains(out, op) {
			t.Errorf("report lacks %s:\n%s", op, out)
		}
	}
	if !strings.Contains(out, "p99") || !strings.Contains(errOut, "ops/s") {
		t.Fatalf("report %q progress %q", out, errOut)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.95, 950 * time.Microsecond}, {0.99, 990 * time.Microsecond}} {
		got := h.quantile(c.q)
		if got > c.want || float64(got) < float64(c.want)*0.96 {
			t.Errorf("q%.2f = %v, want within 4%% below %v", c.q, got, c.want)
		}
	}
	for v := uint64(0); v < 1<<20; v += 97 {
		if lo := bucketLow(bucketOf(v)); lo > v || bucketOf(lo) != bucketOf(v) {
			t.Fatalf("bucket of %d has low %d", v, lo)
		}
	}
}
