package postgres

import (
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestOwnClaimToken: a ClaimKey retried with the token the caller chose
// gets its own claim back (ClaimNew, a new lease, the same creation time),
// live or lapsed, as long as nobody reclaimed or completed it; tokens are
// compared byte for byte; another request with that token conflicts.
func TestOwnClaimToken(t *testing.T) {
	b, clock, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	const tok = "Caller-Token-0123456789abcdef"
	req := contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: "k"}, Fingerprint: "fp", WorkflowID: "wf", TTL: 10 * time.Second, Token: tok}
	first, err := b.ClaimKey(ctx, req)
	if err != nil || first.Kind != contract.ClaimNew || first.Token != tok {
		t.Fatalf("first claim = %+v, %v", first, err)
	}
	clock.advance(3 * time.Second)
	again, err := b.ClaimKey(ctx, req)
	if err != nil || again.Kind != contract.ClaimNew || again.Token != tok || !again.Record.CreatedAt.Equal(first.Record.CreatedAt) ||
		!again.Record.LeaseUntil.Equal(first.Record.LeaseUntil.Add(3*time.Second)) || again.Record.WorkflowID != "wf" {
		t.Errorf("the retried claim = %+v, %v; want the own claim with a new lease", again, err)
	}
	// The same request without a workflow ID matches too.
	noWF := req
	noWF.WorkflowID = ""
	if c, err := b.ClaimKey(ctx, noWF); err != nil || c.Kind != contract.ClaimNew || c.Record.WorkflowID != "wf" {
		t.Errorf("the retried claim without a workflow = %+v, %v", c, err)
	}
	// Byte for byte: another case is another token.
	other := req
	other.Token = "caller-token-0123456789abcdef"
	if c, err := b.ClaimKey(ctx, other); err != nil || c.Kind != contract.ClaimInFlight {
		t.Errorf("a claim with the token in another case = %+v, %v; want in flight", c, err)
	}
	other = req
	other.Fingerprint = "fp-2"
	if _, err := b.ClaimKey(ctx, other); contract.CodeOf(err) != contract.KeyConflict {
		t.Errorf("another request with the same token = %v, want KeyConflict", err)
	}
	// Lapsed, not reclaimed: still the caller's (not a reclaim).
	clock.advance(time.Minute)
	if c, err := b.ClaimKey(ctx, req); err != nil || c.Kind != contract.ClaimNew || c.Token != tok {
		t.Errorf("the own lapsed claim = %+v, %v; want it handed back", c, err)
	}
	// Reclaimed by another caller: no longer the old token's.
	clock.advance(time.Minute)
	rc, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: req.KeyRef, Fingerprint: "fp", TTL: 10 * time.Second})
	if err != nil || rc.Kind != contract.ClaimReclaimed {
		t.Fatalf("reclaim = %+v, %v", rc, err)
	}
	if c, err := b.ClaimKey(ctx, req); err != nil || c.Kind != contract.ClaimInFlight {
		t.Errorf("the old token after a reclaim = %+v, %v; want in flight", c, err)
	}
	// Completed: replayed, never handed back.
	if _, err := b.CompleteKey(ctx, contract.Completion{KeyRef: req.KeyRef, Token: rc.Token, Outcome: contract.Outcome{Code: 200}, Retain: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if c, err := b.ClaimKey(ctx, req); err != nil || c.Kind != contract.ClaimCompleted {
		t.Errorf("a claim of a completed key with a token = %+v, %v; want the replay", c, err)
	}
}

// TestTombstones: after Retain only a tombstone of the key is left until
// ForgetAt: reads report it expired with the status code alone, a claim
// of the same request is OutcomeExpired (another request: KeyConflict), a
// retried completion returns the tombstone, renewal and release do
// nothing; Cleanup drops the payload (Outcomes) and later deletes the
// tombstone (Keys), each bounded by Limit; then the key is free.
func TestTombstones(t *testing.T) {
	b, clock, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	q := quoteIdent(b.schema)
	req := contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: "k"}, Fingerprint: "fp", TTL: 10 * time.Second}
	cl, err := b.ClaimKey(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	c := contract.Completion{KeyRef: req.KeyRef, Token: cl.Token, Outcome: contract.Outcome{Code: 201, Header: map[string][]string{"A": {"b"}}, Body: []byte("body"), Ref: "r"},
		Retain: time.Hour, Tombstone: 3 * time.Hour}
	rec, err := b.CompleteKey(ctx, c)
	if err != nil || !rec.ExpiresAt.Equal(rec.CompletedAt.Add(time.Hour)) || !rec.ForgetAt.Equal(rec.CompletedAt.Add(3*time.Hour)) {
		t.Fatalf("CompleteKey = %+v, %v", rec, err)
	}
	if got, err := b.GetKey(ctx, req.KeyRef); err != nil || got.State != contract.KeyCompleted || string(got.Outcome.Body) != "body" || !got.ForgetAt.Equal(rec.ForgetAt) {
		t.Errorf("GetKey before ExpiresAt = %+v, %v", got, err)
	}
	// Another key, completed without a tombstone period: ForgetAt =
	// ExpiresAt.
	cl2, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: "k2"}, Fingerprint: "fp", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rec2, err := b.CompleteKey(ctx, contract.Completion{KeyRef: cl2.Record.KeyRef, Token: cl2.Token, Outcome: contract.Outcome{Code: 200}, Retain: time.Hour})
	if err != nil || !rec2.ForgetAt.Equal(rec2.ExpiresAt) {
		t.Errorf("CompleteKey without Tombstone = %+v, %v; want ForgetAt = ExpiresAt", rec2, err)
	}

	clock.advance(time.Hour) // at ExpiresAt: the tombstone
	expired := func(name string, got contract.KeyRecord, err error) {
		t.Helper()
		if err != nil || got.State != contract.KeyExpired || got.Outcome == nil || got.Outcome.Code != 201 ||
			got.Outcome.Body != nil || got.Outcome.Header != nil || got.Outcome.Ref != "" || !got.ForgetAt.Equal(rec.ForgetAt) {
			t.Errorf("%s = %+v (outcome %+v), %v; want the tombstone", name, got, got.Outcome, err)
		}
	}
	got, err := b.GetKey(ctx, req.KeyRef)
	expired("GetKey", got, err)
	if _, err := b.GetKey(ctx, cl2.Record.KeyRef); contract.CodeOf(err) != contract.NotFound {
		t.Errorf("GetKey of the key without a tombstone period = %v, want NotFound", err)
	}
	got, err = b.WaitKey(ctx, req.KeyRef)
	expired("WaitKey", got, err)
	ks, err := b.ListKeys(ctx, contract.KeyListQuery{Scope: "s"})
	if err != nil || len(ks) != 1 {
		t.Fatalf("ListKeys = %+v, %v", ks, err)
	}
	expired("ListKeys", ks[0], nil)
	if ks, err := b.ListKeys(ctx, contract.KeyListQuery{Scope: "s", State: contract.KeyExpired}); err != nil || len(ks) != 1 {
		t.Errorf("ListKeys(expired) = %+v, %v", ks, err)
	}
	if ks, err := b.ListKeys(ctx, contract.KeyListQuery{Scope: "s", State: contract.KeyCompleted}); err != nil || len(ks) != 0 {
		t.Errorf("ListKeys(completed) = %+v, %v; want none", ks, err)
	}
	if _, err := b.ClaimKey(ctx, req); contract.CodeOf(err) != contract.OutcomeExpired {
		t.Errorf("ClaimKey of the same request = %v, want OutcomeExpired", err)
	}
	other := req
	other.Fingerprint = "fp-2"
	if _, err := b.ClaimKey(ctx, other); contract.CodeOf(err) != contract.KeyConflict {
		t.Errorf("ClaimKey of another request = %v, want KeyConflict", err)
	}
	got, err = b.CompleteKey(ctx, c)
	expired("CompleteKey retried", got, err)
	if _, err := b.RenewKey(ctx, req.KeyRef, cl.Token, time.Minute); contract.CodeOf(err) != contract.Fenced {
		t.Errorf("RenewKey of the tombstone = %v, want Fenced", err)
	}
	if ok, err := b.ReleaseKey(ctx, req.KeyRef, cl.Token); ok || err != nil {
		t.Errorf("ReleaseKey of the tombstone = %v, %v; want false", ok, err)
	}

	// Cleanup drops the payload, bounded by Limit; the tombstone stays.
	for i := range 2 {
		cl, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: "x" + string(rune('a'+i))}, Fingerprint: "fp", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.CompleteKey(ctx, contract.Completion{KeyRef: cl.Record.KeyRef, Token: cl.Token, Outcome: contract.Outcome{Code: 200, Body: []byte("x")},
			Retain: time.Minute, Tombstone: 3 * time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	clock.advance(time.Minute)
	if n, err := b.CountCleanup(ctx, contract.CleanupRequest{Limit: 2}); err != nil || n.Outcomes != 2 || n.Keys != 1 || !n.More {
		t.Errorf("CountCleanup = %+v, %v; want 2 outcomes (of 3), 1 key (k2), more", n, err)
	}
	res, err := b.Cleanup(ctx, contract.CleanupRequest{Limit: 2})
	if err != nil || res.Outcomes != 2 || res.Keys != 1 || !res.More {
		t.Errorf("Cleanup = %+v, %v; want 2 outcomes, 1 key, more", res, err)
	}
	res, err = b.Cleanup(ctx, contract.CleanupRequest{Limit: 2})
	if err != nil || res.Outcomes != 1 || res.Keys != 0 || res.More {
		t.Errorf("second Cleanup = %+v, %v; want 1 outcome, no more", res, err)
	}
	if res, err := b.Cleanup(ctx, contract.CleanupRequest{Limit: 2}); err != nil || res != (contract.CleanupResult{}) {
		t.Errorf("third Cleanup = %+v, %v; want nothing", res, err)
	}
	var body, ref any
	var code int
	if err := b.Pool().QueryRow(ctx, `SELECT outcome_code, outcome_body, outcome_ref FROM `+q+`.idempotency_keys WHERE scope = 's' AND key = 'k'`).Scan(&code, &body, &ref); err != nil ||
		code != 201 || body != nil || ref != nil {
		t.Errorf("the stored tombstone: code %d, body %v, ref %v, %v", code, body, ref, err)
	}
	got, err = b.GetKey(ctx, req.KeyRef)
	expired("GetKey after Cleanup", got, err)
	if _, err := b.ClaimKey(ctx, req); contract.CodeOf(err) != contract.OutcomeExpired {
		t.Errorf("ClaimKey after Cleanup = %v, want OutcomeExpired", err)
	}

	// Past ForgetAt: Cleanup deletes the tombstones and the key is free.
	clock.advance(2 * time.Hour)
	if _, err := b.GetKey(ctx, req.KeyRef); contract.CodeOf(err) != contract.NotFound {
		t.Errorf("GetKey past ForgetAt = %v, want NotFound", err)
	}
	if res, err := b.Cleanup(ctx, contract.CleanupRequest{Limit: 10}); err != nil || res.Keys != 1 || res.Outcomes != 0 {
		t.Errorf("Cleanup past ForgetAt = %+v, %v; want k's tombstone deleted (the others end an hour later)", res, err)
	}
	if c, err := b.ClaimKey(ctx, req); err != nil || c.Kind != contract.ClaimNew {
		t.Errorf("ClaimKey past ForgetAt = %+v, %v; want a new claim", c, err)
	}
}

// TestMigrationFillsForgetAt: a key completed before migration 5 gets
// forget_at = expires_at (no tombstone period), and reads so.
func TestMigrationFillsForgetAt(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	schema := srv.Schema(t)
	migrateTo(t, pool, schema, 4)
	b, err := NewBackend(ctx, pool, Options{Schema: schema, Migrate: MigrateOff})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q := quoteIdent(schema)
	exp := time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `INSERT INTO `+q+`.idempotency_keys (scope, key, fingerprint, state, token, created_at, completed_at, expires_at, outcome_code, outcome_ref)
		VALUES ('s', 'old', 'fp', 'completed', 'tok', $1, $1, $2, 200, '')`, exp.Add(-time.Hour), exp); err != nil {
		t.Fatal(err)
	}
	if err := b.Migrate(ctx, Up); err != nil {
		t.Fatal(err)
	}
	got, err := b.GetKey(ctx, contract.KeyRef{Scope: "s", Key: "old"})
	if err != nil || !got.ForgetAt.Equal(exp) || got.State != contract.KeyCompleted {
		t.Errorf("GetKey of a key completed before migration 5 = %+v, %v; want ForgetAt = ExpiresAt", got, err)
	}
}
