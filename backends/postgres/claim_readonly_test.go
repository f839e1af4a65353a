package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

// TestClaimKeyAnswersWithoutLocking: the answers of ClaimKey that change
// nothing (the replay of a completed key, a live claim in flight, a key
// bound to another request, expired or not) are read-only: they take no
// row lock, so they return at once while another transaction holds the
// row locked, and they leave the row's version untouched. (Before, every
// one of them went through ON CONFLICT DO UPDATE, which locks the row: they
// queued behind the lock and committed a write.)
func TestClaimKeyAnswersWithoutLocking(t *testing.T) {
	b, clock, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	ref := func(k string) contract.KeyRef { return contract.KeyRef{Scope: "s", Key: k} }
	done := claimFor(t, b, "done")
	complete(t, b, done)
	claimFor(t, b, "abandoned")
	clock.advance(time.Minute) // "abandoned" (30 s) is now reclaimable by its own request
	claimFor(t, b, "busy")

	for _, c := range []struct {
		key, fp  string
		want     contract.ClaimKind
		conflict bool // want KeyConflict
	}{
		{"done", "fp", contract.ClaimCompleted, false},
		{"busy", "fp", contract.ClaimInFlight, false},
		{"done", "other", 0, true},
		{"busy", "other", 0, true},
		{"abandoned", "other", 0, true},
	} {
		// Another transaction holds the row locked.
		tx, err := b.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var before string
		if err := tx.QueryRow(ctx, `SELECT xmin::text || '/' || xmax::text FROM `+quoteIdent(b.schema)+`.idempotency_keys WHERE scope = 's' AND key = $1 FOR UPDATE`, c.key).Scan(&before); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		start := time.Now()
		got, err := b.ClaimKey(cctx, contract.ClaimRequest{KeyRef: ref(c.key), Fingerprint: c.fp, TTL: 30 * time.Second})
		cancel()
		switch {
		case c.conflict && contract.CodeOf(err) != contract.KeyConflict,
			!c.conflict && (err != nil || got.Kind != c.want):
			t.Errorf("ClaimKey(%s, %s) with the row locked elsewhere = %+v, %v after %v; want %v (conflict %v) at once",
				c.key, c.fp, got.Kind, err, time.Since(start), c.want, c.conflict)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		// Unlocked, the answer leaves the row as it was: no lock, no write.
		var xmin1, xmax1, xmin2, xmax2 string
		read := func(xmin, xmax *string) {
			if err := b.Pool().QueryRow(ctx, `SELECT xmin::text, xmax::text FROM `+quoteIdent(b.schema)+`.idempotency_keys WHERE scope = 's' AND key = $1`, c.key).Scan(xmin, xmax); err != nil {
				t.Fatal(err)
			}
		}
		read(&xmin1, &xmax1)
		if _, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref(c.key), Fingerprint: c.fp, TTL: 30 * time.Second}); !c.conflict && err != nil {
			t.Fatal(err)
		}
		read(&xmin2, &xmax2)
		if xmin1 != xmin2 || xmax1 != xmax2 {
			t.Errorf("ClaimKey(%s, %s) changed the row's xmin/xmax from %s/%s to %s/%s: it locked or wrote it",
				c.key, c.fp, xmin1, xmax1, xmin2, xmax2)
		}
	}

	// The reclaim of the abandoned claim by its own request still takes it.
	got, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref("abandoned"), Fingerprint: "fp", TTL: 30 * time.Second})
	if err != nil || got.Kind != contract.ClaimReclaimed {
		t.Errorf("reclaim = %+v, %v; want Reclaimed", got, err)
	}
}

// TestClaimKeyAnswersTakeNoTableWriteLock: ClaimKey's answers that change
// nothing do not even set up an insert. Another transaction holds the table
// in SHARE mode, which conflicts with the ROW EXCLUSIVE lock every INSERT
// takes on its table (also one that inserts nothing): the replay, InFlight
// and KeyConflict answers return at once, while a new claim, which does
// insert, waits for the lock (so the test can tell the two apart).
func TestClaimKeyAnswersTakeNoTableWriteLock(t *testing.T) {
	b, _, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	ref := func(k string) contract.KeyRef { return contract.KeyRef{Scope: "s", Key: k} }
	complete(t, b, claimFor(t, b, "done"))
	claimFor(t, b, "busy")

	tx, err := b.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE `+quoteIdent(b.schema)+`.idempotency_keys IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key, fp  string
		want     contract.ClaimKind
		conflict bool
	}{
		{"done", "fp", contract.ClaimCompleted, false},
		{"busy", "fp", contract.ClaimInFlight, false},
		{"done", "other", 0, true},
	} {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		got, err := b.ClaimKey(cctx, contract.ClaimRequest{KeyRef: ref(c.key), Fingerprint: c.fp, TTL: 30 * time.Second})
		cancel()
		switch {
		case c.conflict && contract.CodeOf(err) != contract.KeyConflict,
			!c.conflict && (err != nil || got.Kind != c.want):
			t.Errorf("ClaimKey(%s, %s) with the table locked in SHARE mode = %+v, %v; want %v (conflict %v)", c.key, c.fp, got.Kind, err, c.want, c.conflict)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if got, err := b.ClaimKey(cctx, contract.ClaimRequest{KeyRef: ref("new"), Fingerprint: "fp", TTL: 30 * time.Second}); err == nil {
		t.Errorf("a new claim with the table locked in SHARE mode = %+v; want it to wait for the lock until its deadline", got)
	}
}

// TestClaimKeyFunctionTakesOnlyWhatItMay calls durable_claim_key, the
// write half of ClaimKey, directly: it takes a free key or a completed key
// past its retention as a new claim (1), reclaims an expired claim of the
// same request only when the caller's snapshot saw that very claim (its
// token; 2), and otherwise takes nothing and changes nothing (0): a live
// claim, another request's claim, an expired claim whose token the caller
// did not see (it was reclaimed after the caller's snapshot), a live
// completed key.
func TestClaimKeyFunctionTakesOnlyWhatItMay(t *testing.T) {
	b, clock, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	q := quoteIdent(b.schema)
	abandoned := claimFor(t, b, "abandoned")
	complete(t, b, claimFor(t, b, "done")) // retained one hour
	now := clock.now()
	call := func(at time.Time, key, fp, token string, seen *string) int {
		t.Helper()
		var got int
		if err := b.Pool().QueryRow(ctx, `SELECT `+q+`.durable_claim_key($1, 1, 's', $2, $3, '', $4, 30, $5)`, at, key, fp, token, seen).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	row := func(key string) (token string, created time.Time) {
		t.Helper()
		if err := b.Pool().QueryRow(ctx, `SELECT token, created_at FROM `+q+`.idempotency_keys WHERE scope = 's' AND key = $1`, key).Scan(&token, &created); err != nil {
			t.Fatal(err)
		}
		return token, created
	}
	wrong := "a token nobody saw"
	if got := call(now, "abandoned", "fp", "t1", &abandoned.Token); got != 0 {
		t.Errorf("a live claim: %d, want 0", got)
	}
	later := now.Add(time.Minute) // the abandoned claim (30 s) expired more than the tolerance ago
	if got := call(later, "abandoned", "other", "t2", &abandoned.Token); got != 0 {
		t.Errorf("another request's expired claim: %d, want 0", got)
	}
	if got := call(later, "abandoned", "fp", "t3", &wrong); got != 0 {
		t.Errorf("an expired claim the caller did not see: %d, want 0", got)
	}
	if got := call(later, "abandoned", "fp", "t4", nil); got != 0 {
		t.Errorf("an expired claim when the caller saw no row: %d, want 0", got)
	}
	if tok, _ := row("abandoned"); tok != abandoned.Token {
		t.Fatalf("the refused calls changed the claim's token to %q", tok)
	}
	if got := call(later, "abandoned", "fp", "t5", &abandoned.Token); got != 2 {
		t.Errorf("an expired claim the caller saw: %d, want 2 (reclaimed)", got)
	}
	if tok, created := row("abandoned"); tok != "t5" || !created.Equal(abandoned.Record.CreatedAt) {
		t.Errorf("after the reclaim: token %q, created %v; want t5, %v (kept)", tok, created, abandoned.Record.CreatedAt)
	}
	if got := call(later, "free", "fp", "t6", nil); got != 1 {
		t.Errorf("a free key: %d, want 1 (new)", got)
	}
	if got := call(later, "done", "fp", "t7", nil); got != 0 {
		t.Errorf("a completed key within its retention: %d, want 0", got)
	}
	if got := call(now.Add(2*time.Hour), "done", "other", "t8", nil); got != 1 {
		t.Errorf("a completed key past its retention: %d, want 1 (new)", got)
	}
	if tok, created := row("done"); tok != "t8" || !created.Equal(now.Add(2*time.Hour).Truncate(time.Microsecond)) {
		t.Errorf("after the new claim over the expired record: token %q, created %v", tok, created)
	}
}

// TestClaimKeyFunctionDroppedAndRecreated: with durable_claim_key dropped,
// ClaimKey fails with SchemaMismatch (a replay too: its statement names the
// function, though it does not call it); migrate=verify and doctor report
// it; migrate up, Open with migrate=auto, and forcing the version back to 3
// then migrating up each create it again (CREATE OR REPLACE), and the
// records are kept, as the package documentation says.
func TestClaimKeyFunctionDroppedAndRecreated(t *testing.T) {
	b, _, srv := newTestBackend(t, Options{})
	ctx := t.Context()
	ref := func(k string) contract.KeyRef { return contract.KeyRef{Scope: "s", Key: k} }
	complete(t, b, claimFor(t, b, "done"))
	drop := func() {
		t.Helper()
		if _, err := b.Pool().Exec(ctx, `DROP FUNCTION `+quoteIdent(b.schema)+`.durable_claim_key`); err != nil {
			t.Fatal(err)
		}
	}
	drop()
	if _, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref("new"), Fingerprint: "fp", TTL: 30 * time.Second}); contract.CodeOf(err) != contract.SchemaMismatch {
		t.Fatalf("a new claim without the function = %v, want SchemaMismatch", err)
	}
	if _, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref("done"), Fingerprint: "fp", TTL: 30 * time.Second}); contract.CodeOf(err) != contract.SchemaMismatch {
		t.Fatalf("a replay without the function = %v, want SchemaMismatch", err)
	}

	// migrate=verify and doctor see it, and say what to do.
	err := b.prepareSchema(ctx, MigrateVerify)
	if contract.CodeOf(err) != contract.SchemaMismatch || !errors.Is(err, errObjectsMissing) {
		t.Fatalf("verify without the function = %v, want SchemaMismatch (objects missing)", err)
	}
	for _, want := range []string{"lacks function durable_claim_key", "every claim fails", "durable migrate up", "touches no data"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("verify's message lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "drop the remaining") {
		t.Errorf("verify's message advises dropping tables for a missing function: %v", err)
	}
	var schema *Check
	checks := b.Doctor(ctx)
	for i := range checks {
		if checks[i].Name == "schema" {
			schema = &checks[i]
		}
	}
	if schema == nil || schema.OK || !strings.Contains(schema.Detail, "durable_claim_key") {
		t.Fatalf("doctor's schema check without the function = %+v", schema)
	}

	// migrate up alone applies the function's migration again (and the
	// later ones, which run again harmlessly); the data stays.
	if err := b.Migrate(ctx, Up); err != nil {
		t.Fatal(err)
	}
	if st, err := b.MigrationStatus(ctx); err != nil || !st.Current() {
		t.Fatalf("status after up = %+v, %v", st, err)
	}
	if err := b.prepareSchema(ctx, MigrateVerify); err != nil {
		t.Fatalf("verify after up = %v", err)
	}
	claimFor(t, b, "new")
	if c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref("done"), Fingerprint: "fp", TTL: 30 * time.Second}); err != nil || c.Kind != contract.ClaimCompleted {
		t.Fatalf("the record kept across up = %v, %v", c.Kind, err)
	}

	// So does opening with migrate=auto.
	drop()
	auto, err := openDSN(ctx, srv.DSN()+"&schema="+b.schema+"&migrate=auto")
	if err != nil {
		t.Fatalf("Open(migrate=auto) without the function = %v", err)
	}
	auto.Close()
	claimFor(t, b, "auto")

	// So does the older recovery, force 3 then up.
	drop()
	if err := b.Force(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := b.Migrate(ctx, Up); err != nil {
		t.Fatal(err)
	}
	claimFor(t, b, "newer")
	if c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref("done"), Fingerprint: "fp", TTL: 30 * time.Second}); err != nil || c.Kind != contract.ClaimCompleted {
		t.Fatalf("the record kept across force and up = %v, %v", c.Kind, err)
	}
}
