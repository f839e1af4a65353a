package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/contract"
)

// txEnv is a database file with a backend, a second backend on it (another
// process, as far as SQLite's locks go), the caller's own *sql.DB on it
// with a payments table, and one manual clock.
type txEnv struct {
	ctx    context.Context
	path   string
	clock  *contract.ManualClock
	b, b2  *sqlite.Backend
	userDB *sql.DB
}

func newTxEnv(t *testing.T) *txEnv {
	t.Helper()
	ctx := context.Background()
	e := &txEnv{ctx: ctx, path: filepath.Join(t.TempDir(), "tx.db"), clock: contract.NewManualClock(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC))}
	opts := sqlite.Options{Path: e.path, Clock: e.clock, Tolerance: time.Second, BusyTimeout: 20 * time.Second, Synchronous: "normal"}
	var err error
	if e.b, err = sqlite.NewBackend(ctx, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.b.Close() })
	if e.b2, err = sqlite.NewBackend(ctx, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.b2.Close() })
	// The caller's own database handle on the same file: modernc's driver,
	// a busy timeout, and transactions that take the write lock at BEGIN.
	if e.userDB, err = sql.Open("sqlite", e.path+"?_pragma=busy_timeout(20000)&_txlock=immediate"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.userDB.Close() })
	if _, err := e.userDB.ExecContext(ctx, `CREATE TABLE payments (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *txEnv) claim(t *testing.T, key, token string) contract.Claim {
	t.Helper()
	c, err := e.b.ClaimKey(e.ctx, e.req(key, token))
	if err != nil || c.Kind != contract.ClaimNew {
		t.Fatalf("claim %s: %+v, %v", key, c, err)
	}
	return c
}

func (e *txEnv) req(key, token string) contract.ClaimRequest {
	return contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "tx", Key: key}, Fingerprint: "fp-" + key, TTL: 2 * time.Second, Token: token}
}

func (e *txEnv) payments(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := e.userDB.QueryRowContext(e.ctx, `SELECT count(*) FROM payments WHERE id = ?`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func completion(c contract.Claim, code int) contract.Completion {
	return contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: contract.Outcome{Code: code, Body: []byte("paid")},
		Retain: time.Hour, Tombstone: 2 * time.Hour}
}

// reclaimWaits starts a reclaim of c's key by another request token
// through b, after the claim expired, checks that it has not returned
// while the transaction is open, and returns a function that, after the
// transaction ended, returns what the reclaim got.
func (e *txEnv) reclaimWaits(t *testing.T, b *sqlite.Backend, key string) func() (contract.Claim, error) {
	t.Helper()
	type result struct {
		c   contract.Claim
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := b.ClaimKey(e.ctx, e.req(key, "another-token-0123456789abcdef"))
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		t.Fatalf("a reclaim during the open transaction returned: %+v, %v", r.c, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	return func() (contract.Claim, error) {
		select {
		case r := <-ch:
			return r.c, r.err
		case <-time.After(15 * time.Second):
			t.Fatal("the reclaim did not return after the transaction ended")
		}
		panic("unreachable")
	}
}

func TestTxCommitStoresEffectAndOutcome(t *testing.T) {
	e := newTxEnv(t)
	c := e.claim(t, "k1", "")
	tx, err := e.b.BeginTx(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(e.ctx)
	raw, ok := tx.Raw().(*sql.Tx)
	if !ok {
		t.Fatalf("Raw is %T, want *sql.Tx", tx.Raw())
	}
	if _, err := raw.ExecContext(e.ctx, `INSERT INTO payments (id) VALUES ('p1')`); err != nil {
		t.Fatal(err)
	}
	rec, err := e.b.CompleteKeyTx(e.ctx, tx, completion(c, 201))
	if err != nil || rec.State != contract.KeyCompleted || rec.Outcome == nil || rec.Outcome.Code != 201 || rec.ForgetAt.Sub(rec.CompletedAt) != 2*time.Hour {
		t.Fatalf("CompleteKeyTx: %+v, %v", rec, err)
	}
	// The claim expires meanwhile: reclaims, by this backend and by
	// another one on the file, wait for the transaction.
	e.clock.Advance(10 * time.Second)
	same := e.reclaimWaits(t, e.b, "k1")
	other := e.reclaimWaits(t, e.b2, "k1")
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]func() (contract.Claim, error){"this backend": same, "another backend": other} {
		c2, err := got()
		if err != nil || c2.Kind != contract.ClaimCompleted || c2.Record.Outcome == nil || c2.Record.Outcome.Code != 201 {
			t.Errorf("reclaim by %s after the commit: %+v, %v; want ClaimCompleted", name, c2, err)
		}
	}
	if n := e.payments(t, "p1"); n != 1 {
		t.Errorf("the effect: %d rows, want 1", n)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Errorf("Rollback after Commit: %v, want nil", err)
	}
	// A retried CompleteKeyTx with the token, in a new transaction, gets
	// the stored record.
	tx2, err := e.b.BeginTx(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.b.CompleteKeyTx(e.ctx, tx2.Raw(), completion(c, 500))
	if err != nil || again.State != contract.KeyCompleted || again.Outcome.Code != 201 {
		t.Fatalf("retried CompleteKeyTx: %+v, %v; want the stored record", again, err)
	}
	if err := tx2.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
}

func TestTxRollbackLeavesTheClaim(t *testing.T) {
	e := newTxEnv(t)
	c := e.claim(t, "k2", "own-token-0123456789abcdef")
	tx, err := e.b.BeginTx(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Raw().(*sql.Tx).ExecContext(e.ctx, `INSERT INTO payments (id) VALUES ('p2')`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.CompleteKeyTx(e.ctx, tx, completion(c, 201)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	g, err := e.b.GetKey(e.ctx, c.Record.KeyRef)
	if err != nil || g.State != contract.KeyClaimed || !g.LeaseUntil.Equal(c.Record.LeaseUntil) || g.Outcome != nil {
		t.Fatalf("after a rollback: %+v, %v; want the claim as it was", g, err)
	}
	if n := e.payments(t, "p2"); n != 0 {
		t.Errorf("the effect after a rollback: %d rows, want 0", n)
	}
	if err := tx.Commit(e.ctx); err == nil {
		t.Error("Commit after Rollback succeeded")
	}
	// The claim is still the caller's: the plain path completes it.
	if rec, err := e.b.CompleteKey(e.ctx, completion(c, 202)); err != nil || rec.Outcome.Code != 202 {
		t.Fatalf("CompleteKey after the rollback: %+v, %v", rec, err)
	}
}

func TestTxCallersOwnTransaction(t *testing.T) {
	e := newTxEnv(t)
	c := e.claim(t, "k3", "")
	utx, err := e.userDB.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := utx.ExecContext(e.ctx, `INSERT INTO payments (id) VALUES ('p3')`); err != nil {
		t.Fatal(err)
	}
	if rec, err := e.b.CompleteKeyTx(e.ctx, utx, completion(c, 201)); err != nil || rec.State != contract.KeyCompleted {
		t.Fatalf("CompleteKeyTx in the caller's transaction: %+v, %v", rec, err)
	}
	e.clock.Advance(10 * time.Second)
	got := e.reclaimWaits(t, e.b, "k3")
	if err := utx.Commit(); err != nil {
		t.Fatal(err)
	}
	if c2, err := got(); err != nil || c2.Kind != contract.ClaimCompleted || c2.Record.Outcome.Code != 201 {
		t.Fatalf("reclaim after the caller's commit: %+v, %v; want ClaimCompleted", c2, err)
	}
	if n := e.payments(t, "p3"); n != 1 {
		t.Errorf("the effect: %d rows, want 1", n)
	}

	// Rolled back: the claim stays.
	c4 := e.claim(t, "k4", "")
	utx, err = e.userDB.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := utx.ExecContext(e.ctx, `INSERT INTO payments (id) VALUES ('p4')`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.CompleteKeyTx(e.ctx, utx, completion(c4, 201)); err != nil {
		t.Fatal(err)
	}
	if err := utx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if g, err := e.b.GetKey(e.ctx, c4.Record.KeyRef); err != nil || g.State != contract.KeyClaimed {
		t.Fatalf("after the caller's rollback: %+v, %v; want claimed", g, err)
	}
	if n := e.payments(t, "p4"); n != 0 {
		t.Errorf("the effect after a rollback: %d rows, want 0", n)
	}
}

func TestTxCompleteKeyTxRefuses(t *testing.T) {
	e := newTxEnv(t)
	c := e.claim(t, "k5", "")
	tx, err := e.b.BeginTx(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	stale := completion(c, 201)
	stale.Token = "not-the-token-0123456789abcdef"
	if _, err := e.b.CompleteKeyTx(e.ctx, tx, stale); !errors.Is(err, contract.ErrFenced) {
		t.Errorf("a stale token: %v, want Fenced", err)
	}
	fenced := completion(c, 201)
	fenced.Fence = &contract.Fence{Resource: "r", Owner: "o", Token: 1}
	if _, err := e.b.CompleteKeyTx(e.ctx, tx, fenced); !errors.Is(err, contract.ErrFenced) {
		t.Errorf("an invalid fence: %v, want Fenced", err)
	}
	if _, err := e.b.CompleteKeyTx(e.ctx, "a transaction", completion(c, 201)); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Errorf("not a transaction: %v, want InvalidArgument", err)
	}
	if _, err := e.b2.CompleteKeyTx(e.ctx, tx, completion(c, 201)); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Errorf("another backend's Tx: %v, want InvalidArgument", err)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	// A transaction on another file.
	otherDB, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "other.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer otherDB.Close()
	otx, err := otherDB.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer otx.Rollback()
	_, err = e.b.CompleteKeyTx(e.ctx, otx, completion(c, 201))
	if !errors.Is(err, contract.ErrInvalidArgument) {
		t.Errorf("a transaction on another file: %v, want InvalidArgument", err)
	}
	if err != nil && strings.Contains(err.Error(), filepath.Dir(e.path)) {
		t.Errorf("the error names the path: %v", err)
	}
	// An ended transaction.
	utx, err := e.userDB.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = utx.Rollback()
	if _, err := e.b.CompleteKeyTx(e.ctx, utx, completion(c, 201)); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Errorf("an ended transaction: %v, want InvalidArgument", err)
	}
	// The claim is untouched by all of it.
	if g, err := e.b.GetKey(e.ctx, c.Record.KeyRef); err != nil || g.State != contract.KeyClaimed {
		t.Fatalf("after the refusals: %+v, %v", g, err)
	}
}

// TestTxWaitersAreBounded: while a BeginTx transaction is open, the
// backend's other writes (a keeper's RenewKey, say) wait for it, never
// longer than their context; Close rolls an open transaction back.
func TestTxWaitersAreBounded(t *testing.T) {
	e := newTxEnv(t)
	c := e.claim(t, "k6", "")
	tx, err := e.b.BeginTx(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	start := time.Now()
	_, err = e.b.RenewKey(ctx, c.Record.KeyRef, c.Token, time.Minute)
	cancel()
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("RenewKey during the transaction: %v after %v; want an error at its deadline", err, time.Since(start))
	}
	// Another backend on the file (another process) waits for SQLite's
	// lock: also bounded by its context.
	ctx, cancel = context.WithTimeout(e.ctx, 200*time.Millisecond)
	_, err = e.b2.RenewKey(ctx, c.Record.KeyRef, c.Token, time.Minute)
	cancel()
	if err == nil {
		t.Fatal("RenewKey of another backend during the transaction succeeded")
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.RenewKey(e.ctx, c.Record.KeyRef, c.Token, time.Minute); err != nil {
		t.Fatalf("RenewKey after the rollback: %v", err)
	}

	// Close with an open transaction rolls it back and returns.
	tx, err = e.b.BeginTx(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Raw().(*sql.Tx).ExecContext(e.ctx, `INSERT INTO payments (id) VALUES ('p6')`); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		e.b.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs on an open transaction")
	}
	if err := tx.Commit(e.ctx); err == nil {
		t.Error("Commit after Close succeeded")
	}
	if n := e.payments(t, "p6"); n != 0 {
		t.Errorf("the effect of the transaction Close rolled back: %d rows", n)
	}
	// BeginTx's context bounds the beginning only: a timeout around it
	// (the Store's operation timeout) does not end the transaction.
	bctx, bcancel := context.WithTimeout(e.ctx, time.Minute)
	tx, err = e.b2.BeginTx(bctx)
	if err != nil {
		t.Fatal(err)
	}
	bcancel()
	time.Sleep(50 * time.Millisecond)
	if _, err := tx.Raw().(*sql.Tx).ExecContext(e.ctx, `INSERT INTO payments (id) VALUES ('p7')`); err != nil {
		t.Fatalf("a statement after BeginTx's context ended: %v", err)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatalf("Commit after BeginTx's context ended: %v", err)
	}
	if n := e.payments(t, "p7"); n != 1 {
		t.Errorf("the effect: %d rows, want 1", n)
	}
	// A context that ended before BeginTx: nothing begins, nothing held.
	dead, dcancel := context.WithCancel(e.ctx)
	dcancel()
	if _, err := e.b2.BeginTx(dead); !errors.Is(err, contract.ErrCanceled) {
		t.Fatalf("BeginTx with an ended context: %v, want Canceled", err)
	}
	if _, err := e.b2.RenewKey(e.ctx, c.Record.KeyRef, c.Token, time.Minute); err != nil {
		t.Fatalf("RenewKey after a BeginTx that failed: %v", err)
	}
}

func TestTxInMemory(t *testing.T) {
	ctx := context.Background()
	b, err := sqlite.NewBackend(ctx, sqlite.Options{Path: sqlite.MemoryPath})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Key: "m"}, Fingerprint: "fp", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := b.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CompleteKeyTx(ctx, tx, completion(c, 200)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if g, err := b.GetKey(ctx, c.Record.KeyRef); err != nil || g.State != contract.KeyCompleted {
		t.Fatalf("after the commit: %+v, %v", g, err)
	}
	// A caller's own *sql.Tx cannot be on a private in-memory database.
	db, err := sql.Open("sqlite", sqlite.MemoryPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	utx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer utx.Rollback()
	if _, err := b.CompleteKeyTx(ctx, utx, completion(c, 200)); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Fatalf("a caller's transaction on an in-memory backend: %v, want InvalidArgument", err)
	}
}

// TestMigrationFillsForgetAt: a key completed under migration 1 keeps its
// key exactly as long as before (ForgetAt = ExpiresAt) after migration 2.
func TestMigrationFillsForgetAt(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	init1, err := fs.ReadFile(sqlite.MigrationFiles(), "migrations/000001_init.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, stmt := range []string{
		string(init1),
		`CREATE TABLE ` + sqlite.MigrationsTable + ` (version INTEGER NOT NULL PRIMARY KEY, dirty INTEGER NOT NULL)`,
		`INSERT INTO ` + sqlite.MigrationsTable + ` (version, dirty) VALUES (1, 0)`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	expires := now.Add(time.Hour)
	if _, err := db.ExecContext(ctx, `INSERT INTO idempotency_keys (scope, key, fingerprint, state, token, created_at, completed_at, expires_at, outcome_code, outcome_ref)
VALUES ('', 'old', 'fp', 'completed', 'tok', ?, ?, ?, 200, '')`, now.UnixMicro(), now.UnixMicro(), expires.UnixMicro()); err != nil {
		t.Fatal(err)
	}
	clock := contract.NewManualClock(now.Add(time.Minute))
	b, err := sqlite.NewBackend(ctx, sqlite.Options{Path: path, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	g, err := b.GetKey(ctx, contract.KeyRef{Key: "old"})
	if err != nil || g.State != contract.KeyCompleted || !g.ForgetAt.Equal(expires) || !g.ExpiresAt.Equal(expires) {
		t.Fatalf("an old completed key after migration 2: %+v, %v; want ForgetAt = ExpiresAt", g, err)
	}
	clock.Advance(time.Hour)
	if _, err := b.GetKey(ctx, contract.KeyRef{Key: "old"}); !errors.Is(err, contract.ErrNotFound) {
		t.Fatalf("an old key past ExpiresAt: %v; want NotFound (no tombstone)", err)
	}
	res, err := b.Cleanup(ctx, contract.CleanupRequest{Limit: 10, TerminalAge: time.Hour})
	if err != nil || res.Keys != 1 || res.Outcomes != 0 {
		t.Fatalf("Cleanup: %+v, %v; want Keys 1", res, err)
	}
}
