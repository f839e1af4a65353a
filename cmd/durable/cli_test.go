package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/durable-go/durable"
)

// TestFlagsAnywhere: flags work before, between and after the positional
// arguments, for every command that takes any; "--" ends the flags.
func TestFlagsAnywhere(t *testing.T) {
	const dsn = "memory://cli-flags-anywhere"
	s := seedMemory(t, dsn)
	ctx := context.Background()
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{Scope: durable.TenantScope("acme"), ID: "order-42"}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"inspect", "workflow", "order-42", "--tenant", "acme", "--json", "--dsn", dsn},
		{"inspect", "--dsn", dsn, "workflow", "--tenant", "acme", "order-42", "--json"},
		{"inspect", "--json", "--tenant=acme", "--dsn=" + dsn, "workflow", "order-42"},
		{"-v", "inspect", "workflow", "order-42", "-v", "--tenant", "acme", "--dsn", dsn, "--json"},
	} {
		code, out, errOut := invoke(t, args...)
		var w workflowOut
		if code != 0 || json.Unmarshal([]byte(out), &w) != nil || w.ID != "order-42" {
			t.Errorf("%v: exit %d, %q %q", args, code, out, errOut)
		}
	}
	// After "--", everything is an argument.
	code, out, errOut := invoke(t, "inspect", "--dsn", dsn, "--json", "--tenant", "acme", "--", "workflow", "order-42")
	var w workflowOut
	if code != 0 || json.Unmarshal([]byte(out), &w) != nil || w.ID != "order-42" {
		t.Errorf("--: exit %d, %q %q", code, out, errOut)
	}
	if code, _, errOut := invoke(t, "inspect", "--dsn", dsn, "--", "workflow", "order-42", "--json"); code != exitUsage {
		t.Errorf("a flag after --: exit %d, want %d (three arguments) %q", code, exitUsage, errOut)
	}
	// Flags after the arguments of cleanup and delete.
	if code, out, errOut := invoke(t, "cleanup", "--dry-run", "--dsn", dsn); code != 0 || !strings.Contains(out, "would delete") {
		t.Errorf("cleanup: exit %d, %q %q", code, out, errOut)
	}
	if code, out, errOut := invoke(t, "delete", "workflow", "order-42", "--tenant", "acme", "--yes", "--dsn", dsn); code != 0 || !strings.Contains(out, "deleted workflow") {
		t.Errorf("delete: exit %d, %q %q", code, out, errOut)
	}
	// An unknown flag after the arguments is still a usage error.
	if code, _, _ := invoke(t, "inspect", "workflow", "x", "--nosuch", "--dsn", dsn); code != exitUsage {
		t.Errorf("unknown flag after the arguments: exit %d", code)
	}
	// --help anywhere.
	if code, out, _ := invoke(t, "inspect", "workflow", "--help"); code != 0 || !strings.Contains(out, "usage: durable inspect") {
		t.Errorf("--help after an argument: %d %q", code, out)
	}
}

// TestExitCodes checks the documented exit codes of every command on the
// memory backend (the schema code 3 is tested on Postgres).
func TestExitCodes(t *testing.T) {
	t.Setenv("DURABLE_DSN", "")
	const dsn = "memory://cli-exit-codes"
	seedMemory(t, dsn)
	for _, c := range []struct {
		want int
		args []string
	}{
		{exitOK, []string{"version"}},
		{exitOK, []string{"doctor", "--dsn", dsn}},
		{exitOK, []string{"cleanup", "--dsn", dsn}},
		{exitOK, []string{"delete", "workflow", "none", "--yes", "--dsn", dsn}},
		{exitOK, []string{"bench", "--dsn", dsn, "--concurrency", "1", "--duration", "500ms", "--progress", "0"}},
		{exitFail, []string{"inspect", "workflow", "none", "--dsn", dsn}},
		{exitFail, []string{"doctor", "--dsn", "nosuch://x"}},
		{exitFail, []string{"cleanup", "--dsn", "nosuch://x"}},
		{exitFail, []string{"delete", "key", "k", "--yes", "--dsn", "nosuch://x"}},
		{exitFail, []string{"bench", "--dsn", "nosuch://x", "--duration", "50ms"}},
		{exitFail, []string{"migrate", "status", "--dsn", "nosuch://x"}},
		{exitUsage, []string{}},
		{exitUsage, []string{"frobnicate"}},
		{exitUsage, []string{"version", "extra"}},
		{exitUsage, []string{"inspect", "workflow"}},
		{exitUsage, []string{"inspect", "workflow", "x"}}, // no DSN
		{exitUsage, []string{"delete", "workflow", "x", "--dsn", dsn}},
		{exitUsage, []string{"cleanup", "--batch", "0", "--dsn", dsn}},
		{exitUsage, []string{"doctor", "extra", "--dsn", dsn}},
		{exitUsage, []string{"bench", "--concurrency", "0", "--dsn", dsn}},
		{exitUsage, []string{"migrate", "--dsn", dsn}},
		{exitUsage, []string{"migrate", "up", "--dsn", dsn}}, // memory has no schema
	} {
		if code, out, errOut := invoke(t, c.args...); code != c.want {
			t.Errorf("durable %s: exit %d, want %d\n%s%s", strings.Join(c.args, " "), code, c.want, out, errOut)
		}
	}
	// The codes are documented in the top-level --help and in each command's.
	for _, args := range [][]string{{"--help"}, {"migrate", "--help"}, {"version", "--help"}} {
		_, out, _ := invoke(t, args...)
		if !strings.Contains(out, "exit codes:") || !strings.Contains(out, "3  the schema needs attention") {
			t.Errorf("%v lacks the exit codes:\n%s", args, out)
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := invoke(t, "version")
	if code != 0 || !strings.HasPrefix(out, "durable ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: %d %q", code, out)
	}
	code, out, _ = invoke(t, "version", "--json")
	var v versionOut
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Version == "" || !strings.HasPrefix(v.GoVersion, "go1.") || v.Module != modulePath {
		t.Fatalf("version --json: %d %q", code, out)
	}
}

func TestMigrateSQLWithoutDSN(t *testing.T) {
	t.Setenv("DURABLE_DSN", "")
	out := mustRun(t, "migrate", "sql", "--schema", "app")
	if !strings.Contains(out, "-- durable migration 1 (init), up, schema app") || !strings.Contains(out, `CREATE TABLE "app".workflows`) || strings.Contains(out, "{schema}") {
		t.Fatalf("sql up: %q", out)
	}
	if i, j := strings.Index(out, "migration 1 "), strings.Index(out, "migration 2 "); i < 0 || j < i {
		t.Fatalf("up files out of order: %q", out)
	}
	out = mustRun(t, "migrate", "sql", "down", "--schema", "app")
	if i, j := strings.Index(out, "migration 1 "), strings.Index(out, "migration 2 "); j < 0 || i < j {
		t.Fatalf("down files out of order: %q", out)
	}
	m := jsonDoc(t, 0, "migrate", "sql", "up", "--version", "1", "--schema", "app")
	hasFields(t, m, "schema", "direction", "migrations_table", "migrations")
	if ms, _ := m["migrations"].([]any); len(ms) != 1 {
		t.Fatalf("--version 1: %v", m)
	}
	for _, args := range [][]string{
		{"migrate", "sql", "sideways", "--schema", "app"},
		{"migrate", "sql", "up", "extra", "--schema", "app"},
		{"migrate", "sql", "--version", "999", "--schema", "app"},
		{"migrate", "sql"}, // no schema, no DSN
	} {
		if code, _, _ := invoke(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, _, _ := invoke(t, "migrate", "sql", "--schema", "Bad-Name"); code != exitFail {
		t.Errorf("invalid schema: exit %d, want %d", code, exitFail)
	}
}
