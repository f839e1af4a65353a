package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/coalesce"
	"github.com/durable-go/durable/internal/pgtest"
)

// The tests of coalesced writes (coalesce.go) run on a real server.

// coalescingClients are the client libraries that coalesce.
var coalescingClients = []testClient{tcPgx, tcStdlib}

// coalescingVariant is a client library that coalesces, in a query mode.
type coalescingVariant struct {
	name   string
	client testClient
	params string
}

// coalescingVariants are pgx and pgx's stdlib, and pgx in each of its
// query modes, in which it sends a batch too.
func coalescingVariants() []coalescingVariant {
	vs := []coalescingVariant{{"pgx", tcPgx, ""}, {"pgx-stdlib", tcStdlib, ""}}
	for _, m := range []string{"simple_protocol", "exec", "describe_exec", "cache_describe"} {
		vs = append(vs, coalescingVariant{"pgx-" + m, tcPgx, "&default_query_exec_mode=" + m})
	}
	return vs
}

// openCoalescing opens a backend on c, on a fresh schema, with one batch
// in flight at a time (so that hold gathers the writes sent meanwhile into
// the next batch), and records the size of every batch of more than one
// write.
func openCoalescing(t *testing.T, c testClient, dsnParams string, opts Options) (*Backend, *batchSizes, *pgtest.Server) {
	t.Helper()
	srv := pgtest.Require(t)
	opts.Schema = srv.Schema(t)
	if opts.Clock == nil {
		opts.Clock = newTestClock()
	}
	if opts.CoalesceInFlight == 0 {
		opts.CoalesceInFlight = 1
	}
	b, err := c.open(t.Context(), srv.DSN()+dsnParams, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if !b.Coalescing() {
		t.Fatalf("%s: the backend does not coalesce", c.name)
	}
	sizes := &batchSizes{}
	b.batchHook = sizes.add
	b.rowsHook = sizes.addRows
	return b, sizes, srv
}

type batchSizes struct {
	mu    sync.Mutex
	sizes []int
	rows  map[string]int // writes per many-rows statement
	sent  chan struct{}  // if set, signaled for every batch sent
}

func (s *batchSizes) addRows(name string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rows == nil {
		s.rows = map[string]int{}
	}
	s.rows[name] += n
}

func (s *batchSizes) merged(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows[name]
}

func (s *batchSizes) add(n int) {
	s.mu.Lock()
	s.sizes = append(s.sizes, n)
	ch := s.sent
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (s *batchSizes) largest() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Max(append([]int{0}, s.sizes...))
}

// hold occupies b's only batch slot with a statement that sleeps for d, so
// that the writes sent meanwhile gather into the next batch. It returns
// once the hold is in flight; wait waits for its end.
func hold(t *testing.T, b *Backend, d time.Duration) (wait func()) {
	t.Helper()
	before := b.batcher.Stats().Batches
	done := make(chan error, 1)
	go func() {
		var ok bool
		_, err := b.batcher.Do(context.Background(), batchItem{
			text: `SELECT true FROM pg_sleep($1::float8) /* coalesce_test hold */`,
			args: []any{d.Seconds()}, dest: []any{&ok}, lock: lockKey{table: lockLast}})
		done <- err
	}()
	for b.batcher.Stats().Batches == before {
		time.Sleep(time.Millisecond)
	}
	return func() {
		t.Helper()
		if err := <-done; err != nil {
			t.Errorf("hold: %v", err)
		}
	}
}

func createWorkflow(t *testing.T, b *Backend, id string) contract.Workflow {
	t.Helper()
	w, err := b.CreateWorkflow(t.Context(), contract.Workflow{ID: id, Status: "s"})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func acquire(t *testing.T, b *Backend, resource string) contract.Lease {
	t.Helper()
	l, err := b.AcquireLease(t.Context(), contract.LeaseRequest{Resource: resource, Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func claim(t *testing.T, b *Backend, key string) contract.Claim {
	t.Helper()
	c, err := b.ClaimKey(t.Context(), contract.ClaimRequest{KeyRef: contract.KeyRef{Key: key}, Fingerprint: "f", TTL: time.Minute})
	if err != nil || c.Kind != contract.ClaimNew {
		t.Fatalf("ClaimKey(%s) = %+v, %v", key, c, err)
	}
	return c
}

// (a) A write alone is not delayed and not wrapped: with coalescing on,
// it is exactly one statement, the same as without, sent at once.
func TestCoalescedWriteAloneIsOneStatement(t *testing.T) {
	for _, c := range coalescingClients {
		t.Run(c.name, func(t *testing.T) {
			srv := pgtest.Require(t)
			schema := srv.Schema(t)
			admin := newPool(t, srv.DSN())
			if err := migratePool(t.Context(), admin, schema, Up); err != nil {
				t.Fatal(err)
			}
			proxy := srv.NewProxy(t)
			b, err := c.open(t.Context(), proxy.DSN(srv.DSN())+"&pool_max_conns=1", Options{
				Schema: schema, Clock: newTestClock(), Migrate: MigrateOff, Listen: ListenOff,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if !b.Coalescing() {
				t.Fatal("coalescing is off by default")
			}
			var ws []contract.Workflow
			var cls []contract.Claim
			for i := range 2 {
				ws = append(ws, createWorkflow(t, b, fmt.Sprint("w", i)))
				cls = append(cls, claim(t, b, fmt.Sprint("k", i)))
			}
			rec := &recordingQuerier{querier: b.q}
			b.q = rec
			ops := []struct {
				name string
				stmt *statement
				op   func(i int) error
			}{
				{"UpdateWorkflow", qUpdateWorkflow.statement, func(i int) error {
					_, err := b.UpdateWorkflow(t.Context(), contract.Update{ID: ws[i].ID, ExpectStatus: "s", ExpectRevision: 1, Status: "s"})
					return err
				}},
				{"CompleteKey", qCompleteKey.statement, func(i int) error {
					_, err := b.CompleteKey(t.Context(), contract.Completion{KeyRef: cls[i].Record.KeyRef, Token: cls[i].Token, Outcome: contract.Outcome{Code: 200}, Retain: time.Hour})
					return err
				}},
			}
			for _, o := range ops {
				// The first run prepares the statement on the connection
				// (a round trip of its own); the second is counted.
				if err := o.op(0); err != nil {
					t.Fatalf("%s: %v", o.name, err)
				}
				before := b.CoalesceStats()
				proxy.ResetMessages()
				rec.take()
				if err := o.op(1); err != nil {
					t.Fatalf("%s: %v", o.name, err)
				}
				sent := rec.take()
				if len(sent) != 1 || sent[0] != o.stmt.sql(b.st) {
					t.Errorf("%s sent %d statements through the querier, want its one statement alone", o.name, len(sent))
				}
				msgs := proxy.Messages()
				if n := proxy.RoundTrips(); n != 1 || msgs['Q'] != 0 {
					t.Errorf("%s: %d round trips (messages %v), want 1 and no simple query (BEGIN, COMMIT)", o.name, n, msgs)
				}
				after := b.CoalesceStats()
				if after.Batches != before.Batches+1 || after.Calls != before.Calls+1 || after.Largest != 1 {
					t.Errorf("%s: stats %+v then %+v, want one more batch of one", o.name, before, after)
				}
			}
		})
	}
}

// (b) Many goroutines on one backend: writes gather into batches, and
// every caller gets its own result, as the contract's rules say, with
// conditional failures in the same batches as successes.
func TestCoalescedWritesGetTheirOwnResults(t *testing.T) {
	for _, c := range coalescingVariants() {
		t.Run(c.name, func(t *testing.T) {
			b, sizes, _ := openCoalescing(t, c.client, c.params, Options{Listen: ListenOff})
			ctx := t.Context()
			const (
				rounds   = 4
				racers   = 6 // stale-version updates of one workflow per round
				keys     = 5
				leases   = 5
				distinct = 4 // updates of distinct workflows
			)
			w := createWorkflow(t, b, "contended")
			var ws []contract.Workflow
			for i := range distinct {
				ws = append(ws, createWorkflow(t, b, fmt.Sprintf("w%d", i)))
			}
			var ls []contract.Lease
			for i := range leases {
				ls = append(ls, acquire(t, b, fmt.Sprintf("r%d", i)))
			}
			lapsed := acquire(t, b, "lapsed")
			if ok, err := b.ReleaseLease(ctx, lapsed); !ok || err != nil {
				t.Fatalf("ReleaseLease = %v, %v", ok, err)
			}
			var done []contract.Claim // the previous round's completed claims
			for round := range rounds {
				var cls []contract.Claim
				for i := range keys {
					cls = append(cls, claim(t, b, fmt.Sprintf("k%d-%d", round, i)))
				}
				wait := hold(t, b, 300*time.Millisecond)
				var wg sync.WaitGroup
				var winners atomic.Int64
				rev := int64(round + 1)
				for i := range racers {
					wg.Go(func() {
						got, err := b.UpdateWorkflow(ctx, contract.Update{ID: w.ID, ExpectStatus: "s", ExpectRevision: rev, Status: "s", RequestID: fmt.Sprint(i)})
						switch {
						case err == nil:
							winners.Add(1)
							if got.Revision != rev+1 || got.RequestID != fmt.Sprint(i) {
								t.Errorf("round %d: winner %d got %+v", round, i, got)
							}
						case contract.CodeOf(err) != contract.Conflict:
							t.Errorf("round %d: loser %d: %v, want Conflict", round, i, err)
						}
					})
				}
				for i, cl := range cls {
					wg.Go(func() {
						_, err := b.CompleteKey(ctx, contract.Completion{KeyRef: cl.Record.KeyRef, Token: "wrong-token-0123456789", Outcome: contract.Outcome{Code: 500}})
						if contract.CodeOf(err) != contract.Fenced {
							t.Errorf("CompleteKey with a wrong token: %v, want Fenced", err)
						}
					})
					wg.Go(func() {
						rec, err := b.CompleteKey(ctx, contract.Completion{KeyRef: cl.Record.KeyRef, Token: cl.Token, Outcome: contract.Outcome{Code: 200 + i, Ref: cl.Record.Key}, Retain: time.Hour})
						if err != nil || rec.State != contract.KeyCompleted || rec.Outcome.Code != 200+i || rec.Outcome.Ref != cl.Record.Key || rec.Key != cl.Record.Key {
							t.Errorf("CompleteKey(%s) = %+v, %v", cl.Record.Key, rec, err)
						}
					})
				}
				for i, l := range ls {
					wg.Go(func() {
						ttl := time.Duration(60+i) * time.Second
						got, err := b.RenewLease(ctx, l, ttl)
						want := b.clock.Now().Add(ttl)
						if err != nil || got.Token != l.Token || got.Resource != l.Resource || got.ExpiresAt.Sub(want).Abs() > time.Microsecond {
							t.Errorf("RenewLease(%s) = %+v, %v", l.Resource, got, err)
						}
					})
				}
				wg.Go(func() {
					if _, err := b.RenewLease(ctx, lapsed, time.Minute); contract.CodeOf(err) != contract.Fenced {
						t.Errorf("RenewLease of a released lease: %v, want Fenced", err)
					}
				})
				wg.Go(func() {
					// No record: its row is missing from the statement's result.
					if _, err := b.CompleteKey(ctx, contract.Completion{KeyRef: contract.KeyRef{Key: fmt.Sprint("never-claimed-", round)}, Token: "some-token-0123456789", Outcome: contract.Outcome{Code: 200}}); contract.CodeOf(err) != contract.Fenced {
						t.Errorf("CompleteKey of a key never claimed: %v, want Fenced", err)
					}
				})
				for _, cl := range done {
					wg.Go(func() {
						// A retry after a lost reply: the completed record, not applied again.
						rec, err := b.CompleteKey(ctx, contract.Completion{KeyRef: cl.Record.KeyRef, Token: cl.Token, Outcome: contract.Outcome{Code: 599}, Retain: time.Hour})
						if err != nil || rec.State != contract.KeyCompleted || rec.Outcome.Code == 599 || rec.Outcome.Ref != cl.Record.Key {
							t.Errorf("retried CompleteKey(%s) = %+v, %v; want the first completion", cl.Record.Key, rec, err)
						}
					})
				}
				for i, x := range ws {
					wg.Go(func() {
						got, err := b.UpdateWorkflow(ctx, contract.Update{ID: x.ID, ExpectStatus: "s", ExpectRevision: rev, Status: "s", Snapshot: []byte{byte(round), byte(i)}})
						if err != nil || got.Revision != rev+1 || string(got.Snapshot) != string([]byte{byte(round), byte(i)}) {
							t.Errorf("UpdateWorkflow(%s) = %+v, %v", x.ID, got, err)
						}
					})
				}
				wg.Wait()
				wait()
				done = cls
				if n := winners.Load(); n != 1 {
					t.Fatalf("round %d: %d of %d racing updates won, want exactly 1", round, n, racers)
				}
			}
			got, err := b.GetWorkflow(ctx, "", w.ID)
			if err != nil || got.Revision != rounds+1 {
				t.Errorf("contended workflow = %+v, %v; want revision %d", got, err, rounds+1)
			}
			for _, x := range ws {
				if got, err := b.GetWorkflow(ctx, "", x.ID); err != nil || got.Revision != rounds+1 {
					t.Errorf("%s = %+v, %v; want revision %d", x.ID, got, err, rounds+1)
				}
			}
			s := b.CoalesceStats()
			if s.Largest < 2 || sizes.largest() < 2 {
				t.Fatalf("stats %+v, batch sizes %v: no batch of more than one write", s, sizes.sizes)
			}
			// Each round's renewals (distinct leases, one lapsed) and its
			// updates of distinct workflows go as many-rows statements.
			if s.Merged < rounds*(leases+1+distinct) {
				t.Errorf("stats %+v: want at least %d writes merged into many-rows statements", s, rounds*(leases+1+distinct))
			}
			for _, name := range []string{"RenewLeaseRows", "UpdateWorkflowRows"} {
				if sizes.merged(name) < 2*rounds {
					t.Errorf("%s held %d writes in all, want at least %d", name, sizes.merged(name), 2*rounds)
				}
			}
			// No write here fails with an error of the server (conditional
			// failures are rows): a batch rolled back means a statement, a
			// many-rows form say, is broken and every write ran twice.
			if s.RolledBack != 0 {
				t.Errorf("stats %+v: %d batches rolled back, want none", s, s.RolledBack)
			}
			t.Logf("stats %+v, largest batch sent %d", s, sizes.largest())
		})
	}
}

// (c) A statement that fails inside a batch rolls the batch back: the
// other writes run again alone and get their own results, applied once;
// the failing one gets its own error.
func TestCoalescedBatchWithAFailingStatement(t *testing.T) {
	for _, c := range coalescingVariants() {
		t.Run(c.name, func(t *testing.T) {
			b, sizes, _ := openCoalescing(t, c.client, c.params, Options{Listen: ListenOff})
			ctx := t.Context()
			w := createWorkflow(t, b, "w")
			l := acquire(t, b, "r")
			wait := hold(t, b, time.Second)
			var wg sync.WaitGroup
			wg.Go(func() {
				got, err := b.UpdateWorkflow(ctx, contract.Update{ID: w.ID, ExpectStatus: "s", ExpectRevision: 1, Status: "t"})
				if err != nil || got.Revision != 2 || got.Status != "t" {
					t.Errorf("UpdateWorkflow = %+v, %v", got, err)
				}
			})
			wg.Go(func() {
				if _, err := b.UpdateWorkflow(ctx, contract.Update{ID: w.ID, ExpectStatus: "s", ExpectRevision: 7, Status: "t"}); contract.CodeOf(err) != contract.Conflict {
					t.Errorf("stale UpdateWorkflow: %v, want Conflict", err)
				}
			})
			wg.Go(func() {
				if got, err := b.RenewLease(ctx, l, 2*time.Minute); err != nil || got.Token != l.Token {
					t.Errorf("RenewLease = %+v, %v", got, err)
				}
			})
			wg.Go(func() {
				// Sorted after every real write: they have run when it
				// fails, and are rolled back with it.
				var r countRow
				_, err := qReleaseKey.runCoalesced(ctx, b, `SELECT 1/$1::int`, []any{0}, lockKey{table: lockLast}, &r)
				if code, _ := sqlState(err); code != "22012" || contract.CodeOf(err) != contract.Unknown {
					t.Errorf("failing statement: %v (SQLSTATE %q), want its own division-by-zero error", err, code)
				}
			})
			wg.Wait()
			wait()
			if sizes.largest() != 4 {
				t.Fatalf("batch sizes %v, want the four writes in one batch", sizes.sizes)
			}
			if s := b.CoalesceStats(); s.RolledBack != 1 {
				t.Errorf("stats %+v: want the one batch rolled back counted", s)
			}
			if got, err := b.GetWorkflow(ctx, "", w.ID); err != nil || got.Revision != 2 {
				t.Errorf("workflow = %+v, %v; want revision 2 (applied once)", got, err)
			}
		})
	}
}

// (d) A batch whose connection is killed while it runs: every member gets
// OutcomeUnknown, and the batch was applied all or nothing (here nothing:
// it died before its commit).
func TestCoalescedBatchWhoseConnectionDies(t *testing.T) {
	for _, c := range coalescingClients {
		t.Run(c.name, func(t *testing.T) {
			b, sizes, srv := openCoalescing(t, c, "", Options{Listen: ListenOff})
			ctx := t.Context()
			admin := newPool(t, srv.DSN())
			w := createWorkflow(t, b, "w")
			l := acquire(t, b, "r")
			cl := claim(t, b, "k")
			wait := hold(t, b, time.Second)
			var wg sync.WaitGroup
			unknown := func(what string, err error) {
				if !errors.Is(err, contract.ErrOutcomeUnknown) {
					t.Errorf("%s: %v, want OutcomeUnknown", what, err)
				}
			}
			wg.Go(func() {
				_, err := b.UpdateWorkflow(ctx, contract.Update{ID: w.ID, ExpectStatus: "s", ExpectRevision: 1, Status: "t"})
				unknown("UpdateWorkflow", err)
			})
			wg.Go(func() {
				_, err := b.RenewLease(ctx, l, 10*time.Minute)
				unknown("RenewLease", err)
			})
			wg.Go(func() {
				_, err := b.CompleteKey(ctx, contract.Completion{KeyRef: cl.Record.KeyRef, Token: cl.Token, Outcome: contract.Outcome{Code: 200}})
				unknown("CompleteKey", err)
			})
			wg.Go(func() {
				var r countRow
				_, err := qReleaseKey.runCoalesced(ctx, b, `SELECT count(*) FROM pg_sleep($1::float8) /* coalesce_test victim */`, []any{30.0}, lockKey{table: lockLast}, &r)
				unknown("sleeper", err)
			})
			// Kill the batch's connection while its last statement sleeps.
			wg.Go(func() {
				for ctx.Err() == nil {
					var n int
					err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
						WHERE query LIKE '%coalesce_test victim%' AND pid <> pg_backend_pid()`).Scan(&n)
					if err != nil {
						t.Error(err)
						return
					}
					if n > 0 {
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
			wg.Wait()
			wait()
			if sizes.largest() != 4 {
				t.Fatalf("batch sizes %v, want the four writes in one batch", sizes.sizes)
			}
			if got, err := b.GetWorkflow(ctx, "", w.ID); err != nil || got.Revision != 1 {
				t.Errorf("workflow = %+v, %v; want revision 1 (nothing applied)", got, err)
			}
			if got, err := b.GetLease(ctx, "", l.Resource); err != nil || !got.ExpiresAt.Equal(l.ExpiresAt) {
				t.Errorf("lease = %+v, %v; want it unrenewed (expires %v)", got, err, l.ExpiresAt)
			}
			if got, err := b.GetKey(ctx, cl.Record.KeyRef); err != nil || got.State != contract.KeyClaimed {
				t.Errorf("key = %+v, %v; want it still claimed", got, err)
			}
			// The backend goes on.
			if _, err := b.UpdateWorkflow(ctx, contract.Update{ID: w.ID, ExpectStatus: "s", ExpectRevision: 1, Status: "t"}); err != nil {
				t.Errorf("UpdateWorkflow afterwards: %v", err)
			}
		})
	}
}

// (e) A write whose context ends while it waits for its batch is not sent
// (Canceled, not applied); one whose context ends while its batch is in
// flight is OutcomeUnknown (here the batch commits: it was applied).
func TestCoalescedWriteCanceled(t *testing.T) {
	b, sizes, _ := openCoalescing(t, tcPgx, "", Options{Listen: ListenOff})
	ctx := t.Context()
	w := createWorkflow(t, b, "w")

	t.Run("WhileQueued", func(t *testing.T) {
		before := b.CoalesceStats()
		wait := hold(t, b, 500*time.Millisecond)
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := b.UpdateWorkflow(cctx, contract.Update{ID: w.ID, ExpectStatus: "s", ExpectRevision: 1, Status: "t"})
		if contract.CodeOf(err) != contract.Canceled {
			t.Errorf("UpdateWorkflow canceled while queued: %v, want Canceled", err)
		}
		wait()
		if s := b.CoalesceStats(); s.Calls != before.Calls+1 {
			t.Errorf("stats %+v then %+v: the canceled write was sent", before, s)
		}
		if got, err := b.GetWorkflow(ctx, "", w.ID); err != nil || got.Revision != 1 {
			t.Errorf("workflow = %+v, %v; want revision 1 (not applied)", got, err)
		}
	})

	t.Run("InFlight", func(t *testing.T) {
		sizes.mu.Lock()
		sizes.sent = make(chan struct{}, 1)
		sizes.mu.Unlock()
		wait := hold(t, b, time.Second)
		var wg sync.WaitGroup
		wg.Go(func() {
			var r countRow
			if _, err := qReleaseKey.runCoalesced(ctx, b, `SELECT count(*) FROM pg_sleep($1::float8)`, []any{0.5}, lockKey{table: lockLast}, &r); err != nil {
				t.Errorf("sleeper: %v", err)
			}
		})
		cctx, cancel := context.WithCancel(ctx)
		wg.Go(func() {
			_, err := b.UpdateWorkflow(cctx, contract.Update{ID: w.ID, ExpectStatus: "s", ExpectRevision: 1, Status: "t"})
			if !errors.Is(err, contract.ErrOutcomeUnknown) {
				t.Errorf("UpdateWorkflow canceled in flight: %v, want OutcomeUnknown", err)
			}
		})
		select { // the batch of the two is sent
		case <-sizes.sent:
		case <-time.After(30 * time.Second):
			t.Fatal("the two writes were not sent in one batch")
		}
		time.Sleep(50 * time.Millisecond)
		cancel()
		wg.Wait()
		wait()
		if got, err := b.GetWorkflow(ctx, "", w.ID); err != nil || got.Revision != 2 || got.Status != "t" {
			t.Errorf("workflow = %+v, %v; want the update applied by its batch", got, err)
		}
	})
}

// (f) coalesce=off, lib/pq and a transaction pooler run every write alone
// (no batcher).
func TestCoalesceOff(t *testing.T) {
	srv := pgtest.Require(t)
	for _, c := range []struct {
		name   string
		client testClient
		params string
		opts   Options
		want   bool
	}{
		{"pgx", tcPgx, "", Options{}, true},
		{"pgx-stdlib", tcStdlib, "", Options{}, true},
		{"pgx-off", tcPgx, "", Options{Coalesce: CoalesceOff}, false},
		{"pgx-stdlib-off", tcStdlib, "", Options{Coalesce: CoalesceOff}, false},
		{"pq", tcPQ, "", Options{}, false},
		{"pq-sql.DB", tcPQDB, "", Options{}, false},
		{"pgx-transaction-pooler", tcPgx, "", Options{Pooler: PoolerTransaction}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Schema = srv.Schema(t)
			b, err := c.client.open(t.Context(), srv.DSN()+c.params, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if b.Coalescing() != c.want {
				t.Fatalf("Coalescing() = %v, want %v", b.Coalescing(), c.want)
			}
			w := createWorkflow(t, b, "w")
			if _, err := b.UpdateWorkflow(t.Context(), contract.Update{ID: w.ID, ExpectStatus: "s", Status: "t"}); err != nil {
				t.Fatal(err)
			}
			s := b.CoalesceStats()
			if c.want != (s.Calls == 1) {
				t.Errorf("stats %+v", s)
			}
		})
	}
	t.Run("DSN", func(t *testing.T) {
		for _, v := range []string{"on", "off"} {
			b, err := openDSN(t.Context(), srv.DSN()+"&coalesce="+v+"&schema="+srv.Schema(t))
			if err != nil {
				t.Fatal(err)
			}
			if b.Coalescing() != (v == "on") {
				t.Errorf("coalesce=%s: Coalescing() = %v", v, b.Coalescing())
			}
			_ = b.Close()
		}
		if _, err := openDSN(t.Context(), srv.DSN()+"&coalesce=maybe"); contract.CodeOf(err) != contract.InvalidArgument || strings.Contains(err.Error(), "maybe") {
			t.Errorf("coalesce=maybe: %v, want InvalidArgument without the value", err)
		}
	})
	t.Run("Options", func(t *testing.T) {
		for _, o := range []Options{{Coalesce: 7}, {CoalesceInFlight: -1}, {CoalesceInFlight: 65}} {
			if _, err := configure(pgclient.Inert(), o); contract.CodeOf(err) != contract.InvalidArgument {
				t.Errorf("configure(%+v) = %v, want InvalidArgument", o, err)
			}
		}
	})
}

// fakeQuerier answers the statements of a write alone: "hold" blocks until
// release is closed and has no row; anything else fails with err.
type fakeQuerier struct {
	querier
	release chan struct{}
	err     error
	alone   *atomic.Int64
}

func (f fakeQuerier) QueryRow(ctx context.Context, _ opKind, sql string, _ []any, _ ...any) (bool, error) {
	if sql == "hold" {
		<-f.release
		return false, nil
	}
	f.alone.Add(1)
	return false, f.err
}

// fakePipe fails every batch with err, counting the writes sent (those of
// a many-rows statement each).
type fakePipe struct {
	err   error
	items *atomic.Int64
}

func (f fakePipe) QueryBatch(_ context.Context, items []pgclient.BatchItem) ([]bool, error) {
	for _, it := range items {
		if it.SQL != rowsPlanSetup.SQL {
			f.items.Add(max(1, int64(len(it.Rows))))
		}
	}
	return nil, f.err
}

// A batch that failed before anything was sent is sent again (as a write
// alone is, by Backend.do); one whose outcome is unknown is never sent
// again: every write of it gets OutcomeUnknown.
func TestCoalescedRetriesOnlyWhatWasNotSent(t *testing.T) {
	for _, c := range []struct {
		name  string
		err   error
		code  contract.Code
		sends int64 // of each write
	}{
		{"Unknown", errors.New("connection reset"), contract.OutcomeUnknown, 1},
		{"NotSent", pgclient.NotSent(errors.New("no connection")), contract.Unavailable, 1 + maxTxRetries},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := configure(pgclient.Inert(), Options{Clock: newTestClock()})
			if err != nil {
				t.Fatal(err)
			}
			var batched, alone atomic.Int64
			fq := fakeQuerier{release: make(chan struct{}), err: c.err, alone: &alone}
			b.q, b.pipe = fq, fakePipe{err: c.err, items: &batched}
			b.batcher = coalesce.New(b.flushBatch, coalesce.Options{MaxInFlight: 1})
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = b.batcher.Do(context.Background(), batchItem{text: "hold"})
			}()
			for b.batcher.Stats().Batches == 0 {
				time.Sleep(time.Millisecond)
			}
			const n = 5
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					_, err := b.UpdateWorkflow(t.Context(), contract.Update{ID: fmt.Sprint("w", i), ExpectStatus: "s", Status: "t"})
					if contract.CodeOf(err) != c.code {
						t.Errorf("UpdateWorkflow: %v, want %v", err, c.code)
					}
				})
			}
			time.Sleep(200 * time.Millisecond) // all five queue behind the hold
			close(fq.release)
			wg.Wait()
			<-done
			if s := b.CoalesceStats(); s.Largest != n {
				t.Fatalf("stats %+v, want the %d writes in one batch", s, n)
			}
			if got := batched.Load() + alone.Load(); got != n*c.sends {
				t.Errorf("%d sends (%d in batches, %d alone), want each of the %d writes sent %d times", got, batched.Load(), alone.Load(), n, c.sends)
			}
		})
	}
}

type orderPipe struct{ sent *[]string }

func (p orderPipe) QueryBatch(_ context.Context, items []pgclient.BatchItem) ([]bool, error) {
	found := make([]bool, len(items))
	for i, it := range items {
		*p.sent = append(*p.sent, it.SQL)
		found[i] = it.SQL != "" && it.SQL[0] == 'f'
	}
	return found, nil
}

// A batch runs its statements in the order of the rows they lock (leases,
// keys, workflows; then scope and ID), whatever order they arrived in, and
// maps each row back to its own write.
func TestCoalescedBatchIsOrderedByLock(t *testing.T) {
	b, err := configure(pgclient.Inert(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var sent []string
	b.pipe = orderPipe{&sent}
	items := []batchItem{
		{text: "f-workflow-a-1", lock: lockKey{lockWorkflows, "a", "1"}},
		{text: "n-key-b-1", lock: lockKey{lockKeys, "b", "1"}},
		{text: "f-lease--9", lock: lockKey{lockLeases, "", "9"}},
		{text: "n-key-a-2", lock: lockKey{lockKeys, "a", "2"}},
		{text: "f-key-a-10", lock: lockKey{lockKeys, "a", "10"}},
		{text: "n-workflow--1", lock: lockKey{lockWorkflows, "", "1"}},
	}
	res := b.flushBatch(t.Context(), items)
	want := []string{"f-lease--9", "f-key-a-10", "n-key-a-2", "n-key-b-1", "n-workflow--1", "f-workflow-a-1"}
	if !slices.Equal(sent, want) {
		t.Errorf("sent %v, want %v", sent, want)
	}
	for i, it := range items {
		if res[i].Err != nil || res[i].Val.found != (it.text[0] == 'f') {
			t.Errorf("%s: result %+v", it.text, res[i])
		}
	}
}

// Claims of one key in one batch: the first takes it, the others find it
// claimed, as if they ran one after the other.
func TestCoalescedClaimsOfOneKey(t *testing.T) {
	b, sizes, _ := openCoalescing(t, tcPgx, "", Options{Listen: ListenOff})
	const racers = 5
	for round := range 3 {
		wait := hold(t, b, time.Second)
		var wg sync.WaitGroup
		var won, inflight atomic.Int64
		for range racers {
			wg.Go(func() {
				c, err := b.ClaimKey(t.Context(), contract.ClaimRequest{KeyRef: contract.KeyRef{Key: fmt.Sprint("race", round)}, Fingerprint: "f", TTL: time.Minute})
				switch {
				case err != nil:
					t.Errorf("ClaimKey: %v", err)
				case c.Kind == contract.ClaimNew:
					won.Add(1)
				case c.Kind == contract.ClaimInFlight:
					inflight.Add(1)
				default:
					t.Errorf("ClaimKey: %v", c.Kind)
				}
			})
		}
		wg.Wait()
		wait()
		if won.Load() != 1 || inflight.Load() != racers-1 {
			t.Errorf("round %d: %d claims won, %d found the key in flight; want 1 and %d", round, won.Load(), inflight.Load(), racers-1)
		}
	}
	if sizes.largest() < 2 {
		t.Fatalf("batch sizes %v: the claims never shared a batch", sizes.sizes)
	}
}
