package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The examples of this package need a server, so they have no Output and
// are only compiled; these tests run their code against the test server.

func TestExampleNew(t *testing.T) {
	srv := pgtest.Require(t)
	wf, err := startOrder(t.Context(), srv.DSN(), srv.Schema(t), "order-42")
	if err != nil {
		t.Fatal(err)
	}
	if wf.ID != "order-42" || wf.Status != durable.StatusPending || wf.Revision != 1 {
		t.Fatalf("startOrder = %+v, want order-42 pending at revision 1", wf)
	}
}

func TestExampleNew_database_sql(t *testing.T) {
	srv := pgtest.Require(t)
	schema := srv.Schema(t)
	for _, want := range []durable.ClaimKind{durable.ClaimNew, durable.ClaimCompleted} {
		kind, err := claimOnce(t.Context(), srv.DSN(), schema, "pay-123")
		if err != nil || kind != want {
			t.Fatalf("claimOnce = %v, %v; want %v", kind, err, want)
		}
	}
}

func TestExampleFenceTx(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	schema := srv.Schema(t)
	pool, err := pgxpool.New(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var (
		mu  sync.Mutex
		now = time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	store, err := postgres.New(ctx, pool, postgres.Options{Schema: schema, Clock: contract.ClockFunc(clock)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	table := schema + ".reports"
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (day date PRIMARY KEY, body text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	body := func() string {
		var b string
		if err := pool.QueryRow(ctx, `SELECT body FROM `+table+` WHERE day = '2026-12-03'`).Scan(&b); err != nil {
			t.Fatal(err)
		}
		return b
	}

	// The example's own path: RunWithLease, then publishReport.
	req := durable.LeaseRequest{Resource: "nightly-report", Owner: "worker-1", TTL: 30 * time.Second}
	var held durable.Lease
	err = store.RunWithLease(ctx, req, durable.LeaseOptions{}, func(ctx context.Context, l durable.Lease) error {
		held = l
		return publishReport(ctx, store, pool, table, l, "2026-12-03", "all good")
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := body(); got != "all good" {
		t.Fatalf("body = %q after the fenced write", got)
	}

	// A stale lease: worker-2 took over after expiry, so worker-1's write
	// is fenced and changes nothing.
	stale, err := store.AcquireLease(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(req.TTL + postgres.DefaultTolerance + time.Second)
	mu.Unlock()
	if _, err := store.AcquireLease(ctx, durable.LeaseRequest{Resource: "nightly-report", Owner: "worker-2", TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	err = publishReport(ctx, store, pool, table, stale, "2026-12-03", "stale")
	if !errors.Is(err, durable.ErrFenced) {
		t.Fatalf("publishReport with a stale lease = %v, want ErrFenced", err)
	}
	if got := body(); got != "all good" {
		t.Fatalf("body = %q after a fenced-off write", got)
	}
	if stale.Token <= held.Token {
		t.Fatalf("tokens did not grow: %d then %d", held.Token, stale.Token)
	}
}

func TestExampleCompleteKeyTx(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	schema := srv.Schema(t)
	pool, err := pgxpool.New(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := postgres.New(ctx, pool, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	table := schema + ".payments"
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (key text PRIMARY KEY, cents bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the call and its retry
		out, err := recordPayment(ctx, store, pool, table, "pay-123", 4200)
		if err != nil || out.Code != 201 || string(out.Body) != "paid" {
			t.Fatalf("call %d: recordPayment = %+v, %v", i, out, err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d payments (%v), want 1", n, err)
	}
}
