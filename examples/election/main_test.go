package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/redistest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// checkTrace checks that every candidate was elected, resigned and had its
// late write rejected, and that the observer reported leaders and, at the
// end, no leader. (run itself checks that the terms' writes did not
// interleave.)
func checkTrace(t *testing.T, out string, n int) {
	t.Helper()
	for _, want := range []string{
		"elected (token ",
		"resigned",
		"was rejected (fenced)",
	} {
		if c := strings.Count(out, want); c != n {
			t.Errorf("trace has %q %d times, want %d:\n%s", want, c, n, out)
		}
	}
	for _, want := range []string{
		"observer  leader is node-",
		"one leader at a time",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var lastObserved string
	for _, l := range lines {
		if strings.Contains(l, "observer  ") {
			lastObserved = l
		}
	}
	if !strings.HasSuffix(lastObserved, "observer  no leader") {
		t.Errorf("the observer's last report is %q, want no leader", lastObserved)
	}
}

func runTrace(t *testing.T, dsn string, n int) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(context.Background(), &out, dsn, n); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	checkTrace(t, out.String(), n)
	return out.String()
}

// checkValues checks that the observer printed the leaders' addresses (the
// lease's value).
func checkValues(t *testing.T, out string) {
	t.Helper()
	for l := range strings.Lines(out) {
		if strings.Contains(l, "observer  leader is node-") && !strings.Contains(l, " at 10.0.0.") {
			t.Errorf("the observer printed no address: %q", l)
		}
	}
}

func TestElectionMemory(t *testing.T) { checkValues(t, runTrace(t, "memory://election-test", 3)) }

func TestElectionSQLite(t *testing.T) {
	checkValues(t, runTrace(t, "sqlite://"+filepath.Join(t.TempDir(), "election.db"), 3))
}

func TestElectionPostgres(t *testing.T) {
	srv := pgtest.Require(t)
	checkValues(t, runTrace(t, srv.DSN()+"&schema="+srv.Schema(t), 3))
}

func TestElectionRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	checkValues(t, runTrace(t, "redis://"+srv.Addr()+"/0", 3))
}
