package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

// The conformance suite through a real PgBouncer in transaction mode: on
// pgx with the default DSN (the pooler is detected), and on lib/pq with
// pooler=transaction (lib/pq cannot detect it).

func TestConformanceThroughPgBouncerPgx(t *testing.T) {
	t.Parallel()
	conformance.Run(t, func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
		return newBouncerHarness(ctx, t, tcPgx, PoolerAuto)
	})
}

func TestConformanceThroughPgBouncerLibPQ(t *testing.T) {
	t.Parallel()
	conformance.Run(t, func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
		return newBouncerHarness(ctx, t, tcPQ, PoolerTransaction)
	})
}

// bouncerHarness is a harness whose backends connect through the test
// PgBouncer and must run as behind a transaction pooler.
type bouncerHarness struct{ *harness }

func newBouncerHarness(ctx context.Context, t *testing.T, c testClient, p Pooler) (conformance.Harness, error) {
	bouncer := pgtest.RequireBouncer(t)
	h, err := newHarnessWith(ctx, t, c, "", ListenOn)
	if err != nil {
		return nil, err
	}
	h.through, h.pooler = bouncer, p
	return bouncerHarness{h}, nil
}

func (h bouncerHarness) Open(ctx context.Context) (contract.Backend, error) {
	cb, err := h.harness.Open(ctx)
	if err != nil {
		return nil, err
	}
	if b := cb.(*Backend); !b.transactionPooled() || b.listen {
		_ = b.Close()
		return nil, errors.New("the backend does not run as behind a transaction pooler")
	}
	return cb, nil
}

// exercise runs n rounds of workflow, key and lease writes and reads on b
// from 8 goroutines at once, and returns the errors.
func exercise(ctx context.Context, b *Backend, prefix string, n int) []error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range n {
				id := fmt.Sprintf("%s-%d-%d", prefix, g, i)
				_, err := b.CreateWorkflow(ctx, contract.Workflow{ID: id, Status: "running"})
				if err == nil {
					_, err = b.GetWorkflow(ctx, "", id)
				}
				if err == nil {
					_, err = b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Key: id}, Fingerprint: "fp", TTL: time.Minute})
				}
				if err == nil {
					_, err = b.AcquireLease(ctx, contract.LeaseRequest{Resource: id, Owner: "o", TTL: time.Minute})
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// TestDefaultDSNWorksThroughPgBouncer: the DSN a new user writes, pointed
// at PgBouncer in transaction mode, works on every client library: pgx and
// pgx's stdlib detect the pooler; lib/pq sends unnamed statements anyway
// (binary_parameters=yes) and, not knowing, keeps LISTEN, which only
// costs WaitKey its prompt wake-up.
func TestDefaultDSNWorksThroughPgBouncer(t *testing.T) {
	bouncer := pgtest.RequireBouncer(t)
	srv := bouncer.Server()
	for _, drv := range []string{"pgx", "pgx-stdlib", "pq"} {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			schema := srv.Schema(t)
			admin := newPool(t, srv.DSN())
			if err := migratePool(ctx, admin, schema, Up); err != nil {
				t.Fatal(err)
			}
			b, err := openDSN(ctx, bouncer.DSN()+"&schema="+schema+"&driver="+drv)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if want := drv != "pq"; b.transactionPooled() != want || b.listen == want {
				t.Errorf("transactionPooled = %v, listen = %v; want the pooler detected: %v", b.transactionPooled(), b.listen, want)
			}
			if errs := exercise(ctx, b, "w", 25); len(errs) > 0 {
				t.Fatalf("%d operations failed through the pooler, first: %v", len(errs), errs[0])
			}
		})
	}
}

// TestPoolerNoneThroughPgBouncerNamesTheFix: with pooler=none (no
// detection) pgx's prepared statements meet a transaction pooler and fail;
// the failure says what to set instead of "unknown: database error".
func TestPoolerNoneThroughPgBouncerNamesTheFix(t *testing.T) {
	bouncer, schema := migratedBehindBouncer(t)
	ctx := t.Context()
	b, err := openDSN(ctx, bouncer.DSN()+"&schema="+schema+"&pooler=none&pool_max_conns=8")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var errs []error
	for round := 0; round < 10 && len(errs) == 0; round++ {
		errs = exercise(ctx, b, fmt.Sprint("r", round), 20)
	}
	if len(errs) == 0 {
		t.Fatal("named prepared statements never met another server session through the pooler")
	}
	for _, err := range errs {
		if contract.CodeOf(err) != contract.Misconfigured || !strings.Contains(err.Error(), "pooler=transaction") {
			t.Fatalf("error %q (code %v), want Misconfigured naming pooler=transaction", err, contract.CodeOf(err))
		}
		if strings.Contains(err.Error(), "SELECT") || strings.Contains(err.Error(), "stmtcache") {
			t.Fatalf("error quotes SQL or statement names: %q", err)
		}
	}
}

// TestSessionSettingsAndPooler: a session setting in the DSN is refused by
// PgBouncer at connect (the error names the fix), and refused up front with
// pooler=transaction; listen=on cannot go with pooler=transaction.
func TestSessionSettingsAndPooler(t *testing.T) {
	bouncer := pgtest.RequireBouncer(t)
	ctx := t.Context()
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		_, err := openDSN(ctx, bouncer.DSN()+"&statement_timeout=5s&migrate=off&driver="+drv)
		if contract.CodeOf(err) != contract.Misconfigured || !strings.Contains(err.Error(), "ALTER ROLE") ||
			!strings.Contains(err.Error(), "pooler=transaction") {
			t.Errorf("%s: statement_timeout through PgBouncer: %v (code %v), want Misconfigured naming the fix", drv, err, contract.CodeOf(err))
		}
	}
	for _, k := range pgclient.SessionParams() {
		_, err := parseDSN("postgres://u:secret@h/db?pooler=transaction&" + k + "=5000")
		if contract.CodeOf(err) != contract.InvalidArgument || !strings.Contains(err.Error(), k) ||
			!strings.Contains(err.Error(), "ALTER ROLE") || strings.Contains(err.Error(), "5000") || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s with pooler=transaction: %v", k, err)
		}
	}
	if _, err := parseDSN("postgres://h/db?pooler=transaction&listen=on"); contract.CodeOf(err) != contract.InvalidArgument ||
		!strings.Contains(err.Error(), "listen=on") {
		t.Errorf("listen=on with pooler=transaction: %v", err)
	}
	if _, err := parseDSN("postgres://h/db?pooler=bouncy"); contract.CodeOf(err) != contract.InvalidArgument ||
		!strings.Contains(err.Error(), "pooler must be") {
		t.Errorf("pooler=bouncy: %v", err)
	}
	for name, want := range poolerNames {
		cfg, err := parseDSN("postgres://h/db?pooler=" + name)
		if err != nil || cfg.opts.Pooler != want || want.String() != name {
			t.Errorf("pooler=%s: %v, %v", name, cfg.opts.Pooler, err)
		}
	}
	if _, err := configure(client{}, Options{Pooler: PoolerTransaction + 1}); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("an unknown Pooler: %v", err)
	}
}

// TestDoctorThroughPgBouncer: Doctor tells the truth about a pooler: it
// flags a backend that relies on session state behind one (the pooler, the
// query mode, and a NOTIFY that never arrives), and approves the same DSN
// with pooler=transaction.
func TestDoctorThroughPgBouncer(t *testing.T) {
	bouncer, schema := migratedBehindBouncer(t)
	ctx := t.Context()
	base := bouncer.DSN() + "&schema=" + schema

	t.Run("pgx pooler=none", func(t *testing.T) {
		// migrate=off: opening would verify the schema with named
		// prepared statements, which this pooler may already refuse.
		b, err := openDSN(ctx, base+"&pooler=none&migrate=off")
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		c := checksByName(t, b.Doctor(ctx))
		if p := c["pooler"]; p.OK || !strings.Contains(p.Detail, "a connection pooler is in front") || !strings.Contains(p.Hint, "pooler=transaction") {
			t.Errorf("pooler = %+v", p)
		}
		if q := c["query-mode"]; q.OK || !strings.Contains(q.Detail, "cache_statement") || !strings.Contains(q.Hint, "pooler=transaction") {
			t.Errorf("query-mode = %+v", q)
		}
		if l := c["listen"]; l.OK || !strings.Contains(l.Detail, "did not arrive") || !strings.Contains(l.Hint, "pooler=transaction") {
			t.Errorf("listen = %+v", l)
		}
	})
	t.Run("pq default", func(t *testing.T) {
		b, err := openDSN(ctx, base+"&driver=pq")
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		c := checksByName(t, b.Doctor(ctx))
		if p := c["pooler"]; !p.OK || !strings.Contains(p.Detail, "lib/pq does not reveal") {
			t.Errorf("pooler = %+v", p)
		}
		// lib/pq cannot see the pooler, but the NOTIFY probe can.
		if l := c["listen"]; l.OK || !strings.Contains(l.Detail, "did not arrive") {
			t.Errorf("listen = %+v", l)
		}
	})
	for _, drv := range []string{"pgx", "pq", "pgx-stdlib"} {
		t.Run(drv+" pooler=transaction", func(t *testing.T) {
			b, err := openDSN(ctx, base+"&pooler=transaction&driver="+drv)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			for _, ch := range b.Doctor(ctx) {
				if !ch.OK || ch.Err != nil {
					t.Errorf("%+v", ch)
				}
			}
		})
	}
	t.Run("pgx detected", func(t *testing.T) {
		b, err := openDSN(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		c := checksByName(t, b.Doctor(ctx))
		if p := c["pooler"]; !p.OK || !strings.Contains(p.Detail, "detected at open") {
			t.Errorf("pooler = %+v", p)
		}
		if q := c["query-mode"]; !q.OK || !strings.Contains(q.Detail, "exec mode") {
			t.Errorf("query-mode = %+v", q)
		}
		if l := c["listen"]; !l.OK || !strings.Contains(l.Detail, "poll") {
			t.Errorf("listen = %+v", l)
		}
	})
}

// TestWaitKeyThroughPgBouncer: behind the pooler WaitKey polls, and a
// completion still wakes the waiter (within the polling ceiling).
func TestWaitKeyThroughPgBouncer(t *testing.T) {
	bouncer, schema := migratedBehindBouncer(t)
	ctx := t.Context()
	b, err := openDSN(ctx, bouncer.DSN()+"&schema="+schema+"&pooler=transaction")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	k := contract.KeyRef{Key: "wait-me"}
	cl, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: k, Fingerprint: "fp", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		rec, err := b.WaitKey(wctx, k)
		if err == nil && rec.State != contract.KeyCompleted {
			err = fmt.Errorf("state %v", rec.State)
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := b.CompleteKey(ctx, contract.Completion{KeyRef: k, Token: cl.Token, Outcome: contract.Outcome{Code: 200}, Retain: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestPoolerTransactionKeepsAnExplicitQueryMode: behind a pooler that keeps
// prepared statements (PgBouncer 1.21+ with max_prepared_statements) the
// user sets default_query_exec_mode=cache_statement, and pooler=transaction
// keeps it (LISTEN stays off); doctor says what it needs of the pooler.
func TestPoolerTransactionKeepsAnExplicitQueryMode(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	schema := srv.Schema(t)
	for _, drv := range []string{"pgx", "pgx-stdlib"} {
		b, err := openDSN(ctx, srv.DSN()+"&schema="+schema+"&pooler=transaction&default_query_exec_mode=cache_statement&driver="+drv)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if pgclient.ModeOf(b.q).Exec {
			t.Errorf("%s: the DSN's query mode was overridden", drv)
		}
		if b.listen || !b.transactionPooled() {
			t.Errorf("%s: listen %v, transactionPooled %v", drv, b.listen, b.transactionPooled())
		}
		if errs := exercise(ctx, b, drv, 3); len(errs) > 0 {
			t.Fatal(errs[0])
		}
		if q := checksByName(t, b.Doctor(ctx))["query-mode"]; !q.OK || !strings.Contains(q.Detail, "max_prepared_statements") {
			t.Errorf("%s: query-mode = %+v", drv, q)
		}
	}
	// Without the parameter, pooler=transaction picks exec mode.
	b, err := openDSN(ctx, srv.DSN()+"&schema="+schema+"&pooler=transaction")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if m := pgclient.ModeOf(b.q); !m.Pgx || !m.Exec {
		t.Errorf("pooler=transaction without a query mode: %#v", b.q)
	}
}

// migratedBehindBouncer returns the test PgBouncer and a fresh schema,
// migrated directly on the server behind it.
func migratedBehindBouncer(t *testing.T) (*pgtest.Bouncer, string) {
	t.Helper()
	bouncer := pgtest.RequireBouncer(t)
	srv := bouncer.Server()
	schema := srv.Schema(t)
	if err := migratePool(t.Context(), newPool(t, srv.DSN()), schema, Up); err != nil {
		t.Fatal(err)
	}
	return bouncer, schema
}
