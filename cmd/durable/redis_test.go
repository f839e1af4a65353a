package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/redistest"
)

// The CLI against private redis-server nodes (internal/redistest): each
// test starts its own node on a free loopback port, so the settings doctor
// checks are the node's start-up configuration, as in production.

// redisDSN starts a node with opts and returns a DSN of it.
func redisDSN(t *testing.T, opts redistest.Options, params string) string {
	t.Helper()
	srv := redistest.Start(t, opts)
	return "redis://" + srv.Addr() + "/0" + params
}

// TestDoctorRedis: doctor passes on a safe node (appendfsync always, and
// everysec with its note) and fails, exit status 1, on each unsafe
// setting the issue names.
func TestDoctorRedis(t *testing.T) {
	t.Run("Always", func(t *testing.T) {
		dsn := redisDSN(t, redistest.Options{}, "")
		out := mustRun(t, "doctor", "--dsn", dsn)
		for _, want := range []string{"ok    connect      Redis 7", "one node", "ok    eviction     maxmemory-policy noeviction",
			"ok    persistence  appendonly yes, appendfsync always"} {
			if !strings.Contains(out, want) {
				t.Errorf("doctor output lacks %q:\n%s", want, out)
			}
		}
		m := jsonDoc(t, 0, "doctor", "--json", "--dsn", dsn)
		if m["ok"] != true {
			t.Fatalf("doctor --json: %v", m)
		}
	})
	t.Run("Everysec", func(t *testing.T) {
		dsn := redisDSN(t, redistest.Options{AppendFsync: "everysec"}, "")
		out := mustRun(t, "doctor", "--dsn", dsn)
		if !strings.Contains(out, "ok    persistence  appendonly yes, appendfsync everysec") || !strings.Contains(out, "up to a second") {
			t.Fatalf("doctor on everysec:\n%s", out)
		}
	})
	for _, c := range []struct {
		name  string
		opts  redistest.Options
		check string // the failing check
		says  string
	}{
		// Open itself refuses an evicting server, so the connect check fails.
		{"AllkeysLRU", redistest.Options{MaxmemoryPolicy: "allkeys-lru"}, "connect", `maxmemory-policy is "allkeys-lru"`},
		{"VolatileTTL", redistest.Options{MaxmemoryPolicy: "volatile-ttl"}, "connect", `maxmemory-policy is "volatile-ttl"`},
		{"AppendonlyNo", redistest.Options{AppendOnly: "no"}, "persistence", "appendonly no"},
		{"AppendfsyncNo", redistest.Options{AppendFsync: "no"}, "persistence", "appendfsync no"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn := redisDSN(t, c.opts, "")
			code, out, errOut := invoke(t, "doctor", "--dsn", dsn)
			if code != 1 || !strings.Contains(out, "FAIL  "+c.check) || !strings.Contains(out, c.says) || !strings.Contains(out, "hint:") {
				t.Fatalf("doctor: exit %d, want 1 with FAIL %s (%q)\nstdout: %s\nstderr: %s", code, c.check, c.says, out, errOut)
			}
			m := jsonDoc(t, 1, "doctor", "--json", "--dsn", dsn)
			if m["ok"] != false {
				t.Fatalf("doctor --json: %v", m)
			}
		})
	}
}

// TestDoctorRedisNeverPrintsPassword: a wrong password and a refused port
// fail doctor without the password or the DSN in the output.
func TestDoctorRedisNeverPrintsPassword(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: "right-secret"})
	for _, dsn := range []string{
		"redis://:wrong-hunter2@" + srv.Addr() + "/0",
		"redis://admin:hunter2-secret@127.0.0.1:1/0?dial_timeout=2s",
	} {
		code, out, errOut := invoke(t, "doctor", "--dsn", dsn)
		all := out + errOut
		if code != 1 || strings.Contains(all, "hunter2") || strings.Contains(all, "redis://") || strings.Contains(all, "secret") {
			t.Fatalf("doctor: exit %d, output:\n%s", code, all)
		}
		if !strings.Contains(all, "hint:") {
			t.Fatalf("no hint:\n%s", all)
		}
	}
	// The right password passes.
	out := mustRun(t, "doctor", "--dsn", srv.URL()+"/0")
	if !strings.Contains(out, "ok    persistence") {
		t.Fatalf("doctor with the password:\n%s", out)
	}
}

// TestCleanupInspectBenchRedis: inspect (workflow, key, lease, lists),
// cleanup (dry run, then real) and a short bench on one node.
func TestCleanupInspectBenchRedis(t *testing.T) {
	// tolerance=0s: a lease of 1 s is expired beyond the tolerance a moment
	// after it ends, so cleanup has one to delete.
	dsn := redisDSN(t, redistest.Options{}, "?prefix=cli&tolerance=0s")
	ctx := context.Background()
	s, err := durable.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"done-1", "done-2", "done-3"} {
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id, Status: durable.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	tenant := durable.TenantScope("acme")
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{Scope: tenant, ID: "order-1", Status: durable.StatusRunning, Snapshot: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k1"}, Fingerprint: "sha256:x", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: c.Record.KeyRef, Token: c.Token,
		Outcome: durable.Outcome{Code: 202, Body: []byte("ok"), Ref: "pay_1"}}); err != nil {
		t.Fatal(err)
	}
	l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "w1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "short", Owner: "w2", TTL: s.MinTTL()}); err != nil {
		t.Fatal(err)
	}

	out := mustRun(t, "inspect", "--dsn", dsn, "--tenant", "acme", "workflow", "order-1")
	if !strings.Contains(out, `"hello"`) || !strings.Contains(out, "running") {
		t.Fatalf("inspect workflow: %q", out)
	}
	var wo workflowOut
	if err := json.Unmarshal([]byte(mustRun(t, "inspect", "--dsn", dsn, "--json", "workflow", "done-2")), &wo); err != nil ||
		wo.ID != "done-2" || wo.Status != "succeeded" || !wo.Terminal || wo.Revision != 1 {
		t.Fatalf("inspect workflow --json: %+v %v", wo, err)
	}
	var k keyOut
	if err := json.Unmarshal([]byte(mustRun(t, "inspect", "--dsn", dsn, "--json", "key", "k1")), &k); err != nil ||
		k.State != "completed" || k.Outcome == nil || k.Outcome.Code != 202 || k.Outcome.Ref != "pay_1" || string(k.Outcome.Body) != "ok" {
		t.Fatalf("inspect key: %+v %v", k, err)
	}
	var lo leaseOut
	if err := json.Unmarshal([]byte(mustRun(t, "inspect", "--dsn", dsn, "--json", "lease", "job")), &lo); err != nil ||
		lo.Token != l.Token || lo.Owner != "w1" {
		t.Fatalf("inspect lease: %+v %v", lo, err)
	}
	if code, _, errOut := invoke(t, "inspect", "--dsn", dsn, "workflow", "nosuch"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Fatalf("inspect of a missing workflow: exit %d, %q", code, errOut)
	}

	var page workflowListOut
	if err := json.Unmarshal([]byte(mustRun(t, "inspect", "workflows", "--limit", "2", "--json", "--dsn", dsn)), &page); err != nil ||
		len(page.Workflows) != 2 || page.Next != "done-2" {
		t.Fatalf("inspect workflows: %+v %v", page, err)
	}
	var page2 workflowListOut
	if err := json.Unmarshal([]byte(mustRun(t, "inspect", "workflows", "--after", page.Next, "--json", "--dsn", dsn)), &page2); err != nil ||
		len(page2.Workflows) != 1 || page2.Workflows[0].ID != "done-3" || page2.Next != "" {
		t.Fatalf("inspect workflows, page 2: %+v %v", page2, err)
	}
	out = mustRun(t, "inspect", "leases", "--held", "--dsn", dsn)
	if !strings.Contains(out, "job") {
		t.Fatalf("inspect leases --held: %q", out)
	}

	// Wait (bounded) until the short lease is expired beyond the tolerance
	// on the server's clock, as cleanup judges it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := s.CountCleanup(ctx, durable.CleanupRequest{TerminalAge: 0, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if res.Leases == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the short lease never became collectable: %+v", res)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out = mustRun(t, "cleanup", "--dsn", dsn, "--terminal-age", "0s", "--dry-run")
	if !strings.Contains(out, "would delete: 3 workflows, 0 keys, 1 leases") {
		t.Fatalf("dry run: %q", out)
	}
	// The dry run deleted nothing.
	if _, err := s.GetWorkflow(ctx, "", "done-1"); err != nil {
		t.Fatalf("the dry run deleted a workflow: %v", err)
	}
	code, out, errOut := invoke(t, "cleanup", "--dsn", dsn, "--terminal-age", "0s", "--batch", "2", "--progress", "0")
	if code != 0 || !strings.Contains(out, "deleted: 3 workflows, 0 keys, 1 leases") || !strings.Contains(errOut, "batch 2:") {
		t.Fatalf("cleanup: %d %q %q", code, out, errOut)
	}
	if _, err := s.GetWorkflow(ctx, "", "done-1"); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("cleanup left a terminal workflow: %v", err)
	}
	if _, err := s.GetWorkflow(ctx, tenant, "order-1"); err != nil {
		t.Fatalf("cleanup removed a running workflow: %v", err)
	}
	if _, err := s.GetLease(ctx, "", "job"); err != nil {
		t.Fatalf("cleanup removed a held lease: %v", err)
	}
	if _, err := s.GetKey(ctx, durable.KeyRef{Key: "k1"}); err != nil {
		t.Fatalf("cleanup removed a retained key: %v", err)
	}
	out = mustRun(t, "cleanup", "--dsn", dsn, "--terminal-age", "0s", "--dry-run")
	if !strings.Contains(out, "would delete: 0 workflows, 0 keys, 0 leases") {
		t.Fatalf("dry run after cleanup: %q", out)
	}

	code, out, errOut = invoke(t, "bench", "--dsn", dsn, "--concurrency", "2", "--duration", "500ms", "--progress", "200ms")
	if code != 0 || !strings.Contains(out, "AcquireLease+ReleaseLease") || !strings.Contains(out, "p99") {
		t.Fatalf("bench: %d %q %q", code, out, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 7 && f[0] != "operation" && f[len(f)-1] != "0" {
			t.Errorf("bench reported errors: %q", line)
		}
	}
}

// TestBenchRedisDefaultDSN: `durable bench --dsn redis://HOST:PORT` (no
// path, no parameters) works, and --json reports every operation without
// errors.
func TestBenchRedisDefaultDSN(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	code, out, errOut := invoke(t, "bench", "--json", "--dsn", "redis://"+srv.Addr(), "--concurrency", "4", "--duration", "300ms", "--progress", "0")
	var rep benchOut
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("bench --json: %d %q %q", code, out, errOut)
	}
	if rep.Workers != 4 || len(rep.Operations) != len(benchOps) || rep.TotalOps == 0 {
		t.Fatalf("bench --json: %+v", rep)
	}
	for _, op := range rep.Operations {
		if op.Ops == 0 || op.Errors != 0 {
			t.Errorf("bench: %+v", op)
		}
	}
}
