package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
)

// TestDeleteRemovesACorruptKeyPostgres is the operator's path for a record
// that cannot be decoded: inspect fails with a hint naming the delete
// command, delete refuses without --yes, and with it the key is gone.
func TestDeleteRemovesACorruptKeyPostgres(t *testing.T) {
	dsn, srv, schema := pgDSN(t)
	ctx := context.Background()
	s, err := durable.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	scope := durable.TenantScope("acme")
	ref := durable.KeyRef{Scope: scope, Key: "k1"}
	c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: ref, Token: c.Token, Outcome: durable.Outcome{Code: 201, Header: map[string][]string{"A": {"b"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Exec(ctx, `UPDATE "`+schema+`".idempotency_keys SET outcome_header = '\x07'::bytea`); err != nil {
		t.Fatal(err)
	}

	code, _, errOut := invoke(t, "inspect", "--dsn", dsn, "--tenant", "acme", "key", "k1")
	if code != 1 || !strings.Contains(errOut, "corrupt record") || !strings.Contains(errOut, "durable delete") {
		t.Fatalf("inspect of a corrupt key: exit %d, stderr %q", code, errOut)
	}
	// Listing fails on the page that holds it, and the hint names it.
	code, _, errOut = invoke(t, "inspect", "--dsn", dsn, "--tenant", "acme", "keys")
	if want := "durable delete key k1 --scope " + string(scope) + " --yes"; code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("inspect keys with a corrupt key: exit %d, stderr %q; want the hint %q", code, errOut, want)
	}
	if code, _, errOut := invoke(t, "delete", "--dsn", dsn, "--tenant", "acme", "key", "k1"); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Fatalf("delete without --yes: exit %d, stderr %q", code, errOut)
	}
	out := mustRun(t, "delete", "--dsn", dsn, "--tenant", "acme", "--yes", "key", "k1")
	if !strings.Contains(out, `deleted key "k1"`) {
		t.Fatalf("delete: %q", out)
	}
	if _, err := s.GetKey(ctx, ref); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("GetKey after delete: %v", err)
	}
	if out := mustRun(t, "delete", "--dsn", dsn, "--tenant", "acme", "--yes", "key", "k1"); !strings.Contains(out, "nothing deleted") {
		t.Fatalf("second delete: %q", out)
	}
	if code, _, _ := invoke(t, "delete", "--dsn", dsn, "--yes", "table", "k1"); code != 2 {
		t.Fatalf("delete of an unknown kind: exit %d, want 2", code)
	}
}
