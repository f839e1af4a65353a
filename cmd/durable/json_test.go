package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
)

// jsonDoc runs the CLI with --json and decodes its stdout, which must be
// exactly one JSON document, into a map.
func jsonDoc(t *testing.T, wantCode int, args ...string) map[string]any {
	t.Helper()
	code, out, errOut := invoke(t, append(args, "--json")...)
	if code != wantCode {
		t.Fatalf("durable %s --json: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, out, errOut)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("durable %s --json: stdout is not JSON: %v\n%s", strings.Join(args, " "), err, out)
	}
	if dec.More() {
		t.Fatalf("durable %s --json: more than one document:\n%s", strings.Join(args, " "), out)
	}
	return m
}

func hasFields(t *testing.T, m map[string]any, fields ...string) {
	t.Helper()
	for _, f := range fields {
		if _, ok := m[f]; !ok {
			t.Errorf("JSON lacks %q: %v", f, m)
		}
	}
}

// TestJSONOnEveryCommand: every command takes --json (memory backend;
// migrate is tested on Postgres).
func TestJSONOnEveryCommand(t *testing.T) {
	const dsn = "memory://cli-json"
	s := seedMemory(t, dsn)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id, Status: durable.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	hasFields(t, jsonDoc(t, 0, "version"), "module", "version", "go_version")
	m := jsonDoc(t, 0, "doctor", "--dsn", dsn)
	hasFields(t, m, "ok", "checks")
	if m["ok"] != true {
		t.Errorf("doctor: %v", m)
	}
	m = jsonDoc(t, 0, "inspect", "workflow", "a", "--dsn", dsn)
	hasFields(t, m, "scope", "id", "status", "revision", "snapshot")
	m = jsonDoc(t, 0, "cleanup", "--dry-run", "--terminal-age", "0s", "--dsn", dsn)
	hasFields(t, m, "dry_run", "workflows", "keys", "leases", "total")
	if m["workflows"] != 3.0 {
		t.Errorf("dry run: %v", m)
	}
	// Progress goes to stderr, never into the JSON document.
	m = jsonDoc(t, 0, "cleanup", "--terminal-age", "0s", "--batch", "1", "--progress", "0", "--dsn", dsn)
	hasFields(t, m, "workflows", "keys", "leases", "total", "batches", "seconds", "records_per_second")
	if m["total"] != 3.0 || m["batches"] != 3.0 {
		t.Errorf("cleanup: %v", m)
	}
	m = jsonDoc(t, 0, "delete", "workflow", "nope", "--yes", "--dsn", dsn)
	hasFields(t, m, "kind", "scope", "id", "deleted")
	if m["deleted"] != false {
		t.Errorf("delete: %v", m)
	}
	m = jsonDoc(t, 0, "bench", "--dsn", dsn, "--concurrency", "1", "--duration", "500ms", "--progress", "100ms")
	hasFields(t, m, "workers", "seconds", "operations", "total_ops", "ops_per_sec")
	if ops, _ := m["operations"].([]any); len(ops) != len(benchOps) {
		t.Errorf("bench: %v", m)
	}
}

// TestCleanupProgress: plain progress lines on a non-terminal, none with
// --quiet, and always the summary with total, duration and rate.
func TestCleanupProgress(t *testing.T) {
	const dsn = "memory://cli-cleanup-progress"
	s := seedMemory(t, dsn)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c", "d"} {
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id, Status: durable.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := invoke(t, "cleanup", "--dsn", dsn, "--terminal-age", "0s", "--batch", "1", "--progress", "0")
	if code != 0 || !strings.Contains(errOut, "batch 2: deleted 2 workflows") || !strings.Contains(errOut, "records/s, 50% of 4, ETA") {
		t.Fatalf("progress: %d %q", code, errOut)
	}
	if !strings.Contains(out, "deleted: 4 workflows, 0 keys, 0 leases (4 records) in ") || !strings.Contains(out, "records/s") {
		t.Fatalf("summary: %q", out)
	}
	for _, id := range []string{"e", "f"} {
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id, Status: durable.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut = invoke(t, "cleanup", "--dsn", dsn, "--terminal-age", "0s", "--batch", "1", "--progress", "0", "--quiet")
	if code != 0 || errOut != "" || !strings.Contains(out, "deleted: 2 workflows") {
		t.Fatalf("quiet: %d %q %q", code, out, errOut)
	}
}

func TestInspectListsWorkflows(t *testing.T) {
	const dsn = "memory://cli-inspect-list"
	s := seedMemory(t, dsn)
	ctx := context.Background()
	acme := durable.TenantScope("acme")
	for i, id := range []string{"w1", "w2", "w3", "w4", "w5"} {
		st := durable.StatusRunning
		if i%2 == 0 {
			st = durable.StatusSucceeded
		}
		snap := []byte(`{"n":1}`)
		if id == "w2" {
			snap = []byte{0xff, 0xfe}
		}
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{Scope: acme, ID: id, Status: st, Snapshot: snap}); err != nil {
			t.Fatal(err)
		}
	}
	var page workflowListOut
	code, out, errOut := invoke(t, "inspect", "workflows", "--tenant", "acme", "--limit", "2", "--json", "--dsn", dsn)
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Workflows) != 2 || page.Next != "w2" {
		t.Fatalf("page 1: %d %q %q", code, out, errOut)
	}
	if page.Workflows[0].Text == nil || *page.Workflows[0].Text != `{"n":1}` || page.Workflows[1].Text != nil || len(page.Workflows[1].Snapshot) != 2 {
		t.Fatalf("snapshot text: %q", out)
	}
	var ids []string
	for after := ""; ; {
		args := []string{"inspect", "workflows", "--tenant", "acme", "--limit", "2", "--json", "--dsn", dsn}
		if after != "" {
			args = append(args, "--after", after)
		}
		var p workflowListOut
		if code, out, _ := invoke(t, args...); code != 0 || json.Unmarshal([]byte(out), &p) != nil {
			t.Fatalf("paging: %d %q", code, out)
		}
		for _, w := range p.Workflows {
			ids = append(ids, w.ID)
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if strings.Join(ids, ",") != "w1,w2,w3,w4,w5" {
		t.Fatalf("pages: %v", ids)
	}
	code, out, _ = invoke(t, "inspect", "workflows", "--tenant", "acme", "--status", "running", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "w2") || strings.Contains(out, "w1 ") || !strings.Contains(out, "base64 //4=") {
		t.Fatalf("text list: %d %q", code, out)
	}
	code, out, _ = invoke(t, "inspect", "workflows", "--tenant", "acme", "--limit", "3", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "next page: --after w3") {
		t.Fatalf("text next: %d %q", code, out)
	}
	for _, args := range [][]string{
		{"inspect", "keys", "x", "--dsn", dsn},
		{"inspect", "leases", "--state", "claimed", "--dsn", dsn},
		{"inspect", "keys", "--state", "done", "--dsn", dsn},
		{"inspect", "keys", "--held", "--dsn", dsn},
		{"inspect", "workflows", "--held", "--dsn", dsn},
		{"inspect", "workflows", "x", "--dsn", dsn},
		{"inspect", "workflows", "--limit", "0", "--dsn", dsn},
		{"inspect", "leases", "--limit", "1001", "--dsn", dsn},
	} {
		if code, _, _ := invoke(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	// One record: the snapshot as text in JSON too.
	m := jsonDoc(t, 0, "inspect", "workflow", "w1", "--tenant", "acme", "--dsn", dsn)
	if m["snapshot_text"] != `{"n":1}` {
		t.Fatalf("snapshot_text: %v", m)
	}
}

// TestInspectListsKeysAndLeases: keys in flight and completed, leases
// held and expired, paged, in text and JSON.
func TestInspectListsKeysAndLeases(t *testing.T) {
	const dsn = "memory://cli-inspect-keys"
	s := seedMemory(t, dsn)
	ctx := context.Background()
	acme := durable.TenantScope("acme")
	for i, k := range []string{"k1", "k2", "k3", "k4"} {
		c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Scope: acme, Key: k}, Fingerprint: "fp", WorkflowID: "wf-" + k})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			body := []byte("paid")
			if k == "k4" {
				body = []byte{0xff, 0x00}
			}
			if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: durable.Outcome{Code: 201, Body: body}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, r := range []string{"r1", "r2", "r3"} {
		if _, err := s.AcquireLease(ctx, durable.LeaseRequest{Scope: acme, Resource: r, Owner: "worker-" + r}); err != nil {
			t.Fatal(err)
		}
	}

	var keys keyListOut
	code, out, errOut := invoke(t, "inspect", "keys", "--tenant", "acme", "--state", "claimed", "--json", "--dsn", dsn)
	if code != 0 || json.Unmarshal([]byte(out), &keys) != nil || len(keys.Keys) != 2 || keys.Keys[0].Key != "k1" || keys.Keys[1].Key != "k3" || keys.Next != "" || keys.State != "claimed" {
		t.Fatalf("claimed keys: %d %q %q", code, out, errOut)
	}
	code, out, _ = invoke(t, "inspect", "keys", "--tenant", "acme", "--state", "completed", "--limit", "1", "--json", "--dsn", dsn)
	if code != 0 || json.Unmarshal([]byte(out), &keys) != nil || len(keys.Keys) != 1 || keys.Keys[0].Key != "k2" || keys.Next != "k2" {
		t.Fatalf("completed keys, page 1: %d %q", code, out)
	}
	if o := keys.Keys[0].Outcome; o == nil || o.Code != 201 || o.Text == nil || *o.Text != "paid" {
		t.Fatalf("outcome: %q", out)
	}
	code, out, _ = invoke(t, "inspect", "keys", "--tenant", "acme", "--state", "completed", "--limit", "1", "--after", "k2", "--json", "--dsn", dsn)
	keys = keyListOut{} // a fresh document: Unmarshal keeps fields the new one lacks
	if code != 0 || json.Unmarshal([]byte(out), &keys) != nil || len(keys.Keys) != 1 || keys.Keys[0].Key != "k4" || keys.Keys[0].Outcome.Text != nil || keys.Next != "" {
		t.Fatalf("completed keys, page 2: %d %q", code, out)
	}
	code, out, _ = invoke(t, "inspect", "keys", "--tenant", "acme", "--dsn", dsn)
	for _, want := range []string{"k1", "claimed", "wf-k1", `"paid"`, "base64 /wA=", "201"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("text keys lack %q: %d %q", want, code, out)
		}
	}

	var leases leaseListOut
	code, out, _ = invoke(t, "inspect", "leases", "--tenant", "acme", "--held", "--limit", "2", "--json", "--dsn", dsn)
	if code != 0 || json.Unmarshal([]byte(out), &leases) != nil || len(leases.Leases) != 2 || leases.Next != "r2" || !leases.Held || leases.Leases[1].Owner != "worker-r2" || leases.Leases[0].Token <= 0 {
		t.Fatalf("leases: %d %q", code, out)
	}
	code, out, _ = invoke(t, "inspect", "leases", "--tenant", "acme", "--after", "r2", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "worker-r3") || strings.Contains(out, "worker-r2") || strings.Contains(out, "next page") {
		t.Fatalf("text leases: %d %q", code, out)
	}
	// Another scope lists nothing.
	m := jsonDoc(t, 0, "inspect", "leases", "--dsn", dsn)
	if l, _ := m["leases"].([]any); len(l) != 0 {
		t.Fatalf("unscoped leases: %v", m)
	}
}

// TestCleanupProgressOnATerminal: on a terminal the progress is one line
// rewritten in place, with an ETA when the count was exact, ended by a
// newline.
func TestCleanupProgressOnATerminal(t *testing.T) {
	var b strings.Builder
	p := &cleanupProgress{w: &b, tty: true, start: time.Now().Add(-time.Second), expected: 100, exact: true}
	p.update(1, durable.CleanupResult{Workflows: 40, Keys: 10}, true)
	p.update(2, durable.CleanupResult{Workflows: 41, Keys: 10}, true) // within 100ms: skipped
	p.update(3, durable.CleanupResult{Workflows: 80, Keys: 20}, false)
	p.done()
	got := b.String()
	if strings.Count(got, "\r\x1b[K") != 2 || !strings.Contains(got, "batch 1: deleted 40 workflows, 10 keys, 0 leases") ||
		!strings.Contains(got, "50% of 100, ETA") || strings.Contains(got, "batch 2") || !strings.HasSuffix(got, "\n") {
		t.Fatalf("terminal progress: %q", got)
	}
}

// TestJSONOnFailure: a failed command run with --json still prints one
// JSON document on stdout, with the message, the code and the exit code,
// and never the DSN's password.
func TestJSONOnFailure(t *testing.T) {
	m := jsonDoc(t, exitFail, "inspect", "workflow", "none", "--dsn", "memory://cli-json-failure")
	if m["code"] != "not found" || m["exit_code"] != 1.0 || m["error"] == "" {
		t.Fatalf("not found: %v", m)
	}
	m = jsonDoc(t, exitUsage, "inspect", "workflow", "--dsn", "memory://")
	if m["code"] != "usage" || m["exit_code"] != 2.0 {
		t.Fatalf("usage: %v", m)
	}
	code, out, errOut := invoke(t, "cleanup", "--dsn", "nosuch://admin:hunter2@db.internal/x", "--json")
	if code != exitFail || strings.Contains(out+errOut, "hunter2") || json.Unmarshal([]byte(out), new(errorOut)) != nil {
		t.Fatalf("cleanup: %d %q %q", code, out, errOut)
	}
}
