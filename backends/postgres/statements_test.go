package postgres

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// countingTracer counts the statements pgx sends and the statements it
// prepares.
type countingTracer struct {
	mu       sync.Mutex
	queries  []string
	prepares int
}

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	c.queries = append(c.queries, d.SQL)
	c.mu.Unlock()
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *countingTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.mu.Lock()
	c.prepares++
	c.mu.Unlock()
	return ctx
}

func (c *countingTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func (c *countingTracer) reset() {
	c.mu.Lock()
	c.queries, c.prepares = nil, 0
	c.mu.Unlock()
}

func (c *countingTracer) counts() (int, int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queries), c.prepares, append([]string(nil), c.queries...)
}

// TestFastPathIsOneStatement runs every fast-path operation, in its success
// and its usual failure, and checks that each sends exactly one statement,
// and that after the first use no statement is prepared again (so each is
// one round trip: Bind, Execute, Sync).
func TestFastPathIsOneStatement(t *testing.T) {
	b0, clock, srv := newTestBackend(t, Options{})
	ctx := t.Context()
	tr := &countingTracer{}
	cfg, err := pgxpool.ParseConfig(srv.DSN() + "&pool_max_conns=1")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b, err := NewBackend(ctx, pool, Options{Schema: b0.schema, Clock: clock, Migrate: MigrateOff})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	steps := fastPathSteps(t, ctx, b, tr.reset)
	cov := newCoverage(b.st)
	// Twice: the first pass prepares the statements, the second must not.
	firstPassPrepares := 0
	for pass := 1; pass <= 2; pass++ {
		if pass == 2 {
			// Start over on fresh records so each step takes the same path.
			if _, err := pool.Exec(ctx, `TRUNCATE `+quoteIdent(b.schema)+`.workflows, `+quoteIdent(b.schema)+`.idempotency_keys, `+quoteIdent(b.schema)+`.leases`); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range steps {
			tr.reset()
			if err := s.op(); err != nil {
				t.Fatalf("pass %d: %s: %v", pass, s.name, err)
			}
			n, prepares, qs := tr.counts()
			if n != 1 {
				t.Errorf("pass %d: %s sent %d statements, want 1: %q", pass, s.name, n, qs)
			}
			cov.add(qs)
			if pass == 1 {
				firstPassPrepares += prepares
			}
			if pass == 2 && prepares != 0 {
				t.Errorf("pass %d: %s prepared %d statements, want 0 (cached)", pass, s.name, prepares)
			}
		}
	}
	if firstPassPrepares == 0 {
		t.Error("the tracer saw no prepared statement in the first pass: it does not see prepares, so the test proves nothing")
	}
	cov.check(t)
}

// notOnTheFastPath lists the registered statements that fastPathSteps does
// not run, each with the reason and what covers it instead. coverage.check
// fails on a name here that is not registered, or that the steps do run.
var notOnTheFastPath = map[string]string{
	"FenceTx": "it runs in the caller's own transaction (Backend.FenceTx), not on the backend's pool, between " +
		"the caller's BEGIN and COMMIT; TestFenceTx runs it on every client library and " +
		"TestSQLMockPinsEveryStatement pins its text and arguments",
	"CompleteKeyTx": "it runs in a transaction (Backend.CompleteKeyTx), the backend's from BeginTx or the caller's, " +
		"between BEGIN and COMMIT: three round trips by design; TestCompleteKeyTx runs it on every client library " +
		"and through PgBouncer, and TestSQLMockPinsEveryStatement pins its text and arguments",
	"ClaimKeyLock": "ClaimKey's locked form runs only after ClaimKey's optimistic statement lost its race on every " +
		"attempt, in a transaction of its own; TestClaimKeyNeverGivesUpUnderContention drives it on every client library " +
		"and through PgBouncer, TestClaimKeyLockedForm on every kind of key, and TestSQLMockPinsEveryStatement pins it",
	"ClaimKeyTake": "the write of ClaimKey's locked form (see ClaimKeyLock), covered by the same tests",
}

// coverage collects the registered statements that the counted part of the
// fast-path steps sent.
type coverage struct {
	byText map[string]*statement
	seen   map[*statement]bool
}

func newCoverage(st *statements) *coverage {
	c := &coverage{byText: map[string]*statement{}, seen: map[*statement]bool{}}
	for _, s := range registry {
		c.byText[s.sql(st)] = s
	}
	return c
}

// add records the statements among texts (other SQL is ignored) and
// returns how many parameters they have.
func (c *coverage) add(texts []string) (params int) {
	for _, q := range texts {
		if s, ok := c.byText[q]; ok {
			c.seen[s] = true
			params += len(s.params)
		}
	}
	return params
}

// check fails t for every registered statement that the steps did not send
// and notOnTheFastPath does not list, and for every stale entry of
// notOnTheFastPath.
func (c *coverage) check(t *testing.T) {
	t.Helper()
	if len(registry) == 0 {
		t.Fatal("no statement is registered")
	}
	registered := map[string]bool{}
	for _, s := range registry {
		registered[s.name] = true
		_, excluded := notOnTheFastPath[s.name]
		switch {
		case !c.seen[s] && !excluded:
			t.Errorf("statement %s is not run by fastPathSteps: add a step (or list it, with the reason, in notOnTheFastPath)", s.name)
		case c.seen[s] && excluded:
			t.Errorf("statement %s is run by fastPathSteps: remove it from notOnTheFastPath", s.name)
		}
	}
	for name := range notOnTheFastPath {
		if !registered[name] {
			t.Errorf("notOnTheFastPath lists %s, which is not a registered statement", name)
		}
	}
}

// recordingQuerier records the text of every statement it runs.
type recordingQuerier struct {
	querier
	mu   sync.Mutex
	sent []string
}

func (r *recordingQuerier) record(sql string) {
	r.mu.Lock()
	r.sent = append(r.sent, sql)
	r.mu.Unlock()
}

// take returns the texts recorded since the last take.
func (r *recordingQuerier) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	sent := r.sent
	r.sent = nil
	return sent
}

func (r *recordingQuerier) QueryRow(ctx context.Context, kind opKind, sql string, args []any, dest ...any) (bool, error) {
	r.record(sql)
	return r.querier.QueryRow(ctx, kind, sql, args, dest...)
}

func (r *recordingQuerier) Query(ctx context.Context, kind opKind, sql string, args []any, dest []any, row func() error) error {
	r.record(sql)
	return r.querier.Query(ctx, kind, sql, args, dest, row)
}

// fastPathStep is one fast-path operation, in its success or its usual
// failure.
type fastPathStep struct {
	name string
	op   func() error
}

// fastPathSteps returns every fast-path operation in an order that works
// on an empty schema. reset is called where a step needs setup work that
// must not be counted.
func fastPathSteps(t *testing.T, ctx context.Context, b *Backend, reset func()) []fastPathStep {
	const scope = contract.Scope("tenant-1")
	ttl := 10 * time.Second
	var (
		wf    contract.Workflow
		claim contract.Claim
		lease contract.Lease
		// permit is a permit granted through AcquireLease
		permit contract.Lease
	)
	return []fastPathStep{
		{"CreateWorkflow", func() (err error) {
			wf, err = b.CreateWorkflow(ctx, contract.Workflow{Scope: scope, ID: "wf-1", Status: contract.StatusRunning, Snapshot: []byte("a")})
			return err
		}},
		{"CreateWorkflow/AlreadyExists", func() error {
			_, err := b.CreateWorkflow(ctx, contract.Workflow{Scope: scope, ID: "wf-1", Status: contract.StatusRunning})
			return want(err, contract.AlreadyExists)
		}},
		{"GetWorkflow", func() error { _, err := b.GetWorkflow(ctx, scope, "wf-1"); return err }},
		{"GetWorkflow/NotFound", func() error { _, err := b.GetWorkflow(ctx, scope, "nope"); return want(err, contract.NotFound) }},
		{"UpdateWorkflow", func() (err error) {
			wf, err = b.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: "wf-1", ExpectStatus: wf.Status, ExpectRevision: wf.Revision, Status: contract.StatusRunning, Snapshot: []byte("b")})
			return err
		}},
		{"UpdateWorkflow/Conflict", func() error {
			_, err := b.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: "wf-1", ExpectStatus: wf.Status, ExpectRevision: 1, Status: contract.StatusRunning})
			return want(err, contract.Conflict)
		}},
		{"UpdateWorkflow/NotFound", func() error {
			_, err := b.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: "nope", ExpectStatus: "running", Status: contract.StatusRunning})
			return want(err, contract.NotFound)
		}},
		{"UpdateWorkflow/Fenced", func() error {
			_, err := b.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: "wf-1", ExpectStatus: wf.Status, Status: contract.StatusRunning,
				Fence: &contract.Fence{Resource: "r", Owner: "o", Token: 99}})
			return want(err, contract.Fenced)
		}},
		{"WhyWorkflow", func() error {
			// UpdateWorkflow's second read runs only when a concurrent
			// commit hid the reason from its first statement's snapshot:
			// run it directly.
			var r updateWorkflowRow
			found, err := qWhyWorkflow.one(ctx, b, whyWorkflowParams{Now: b.nowParam(), Tol: b.tol, Scope: scope, ID: "wf-1"}, &r)
			if err == nil && (!found || r.applied || !r.fenceOK || r.id != "wf-1") {
				t.Errorf("WhyWorkflow = %v, %+v", found, r)
			}
			return err
		}},
		{"ListWorkflows", func() error { _, err := b.ListWorkflows(ctx, contract.ListQuery{Scope: scope, Limit: 10}); return err }},
		{"ListWorkflows/Status", func() error {
			_, err := b.ListWorkflows(ctx, contract.ListQuery{Scope: scope, Status: "running", Limit: 10})
			return err
		}},
		{"ClaimKey/New", func() (err error) {
			claim, err = b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: scope, Key: "k-1"}, Fingerprint: "fp", TTL: ttl})
			return err
		}},
		{"ClaimKey/InFlight", func() error {
			c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: scope, Key: "k-1"}, Fingerprint: "fp", TTL: ttl})
			if err == nil && c.Kind != contract.ClaimInFlight {
				t.Errorf("kind %v", c.Kind)
			}
			return err
		}},
		{"ClaimKey/KeyConflict", func() error {
			_, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: scope, Key: "k-1"}, Fingerprint: "other", TTL: ttl})
			return want(err, contract.KeyConflict)
		}},
		{"RenewKey", func() error { _, err := b.RenewKey(ctx, claim.Record.KeyRef, claim.Token, ttl); return err }},
		{"RenewKey/Fenced", func() error {
			_, err := b.RenewKey(ctx, claim.Record.KeyRef, "stale", ttl)
			return want(err, contract.Fenced)
		}},
		{"GetKey", func() error { _, err := b.GetKey(ctx, claim.Record.KeyRef); return err }},
		{"WaitKey/Mark", func() error {
			// WaitKey's read while its LISTEN connection is up (this
			// backend's may not be up yet): run it directly. It marks the
			// claim waited, in one statement.
			rec, err := b.waitRead(ctx, claim.Record.KeyRef)
			if err == nil && rec.State != contract.KeyClaimed {
				t.Errorf("WaitKey read = %+v", rec)
			}
			return err
		}},
		{"CompleteKey", func() error {
			_, err := b.CompleteKey(ctx, contract.Completion{KeyRef: claim.Record.KeyRef, Token: claim.Token, Outcome: contract.Outcome{Code: 200}, Retain: time.Hour})
			return err
		}},
		{"CompleteKey/Retry", func() error {
			_, err := b.CompleteKey(ctx, contract.Completion{KeyRef: claim.Record.KeyRef, Token: claim.Token, Outcome: contract.Outcome{Code: 200}, Retain: time.Hour})
			return err
		}},
		{"CompleteKey/Fenced", func() error {
			_, err := b.CompleteKey(ctx, contract.Completion{KeyRef: claim.Record.KeyRef, Token: "stale", Retain: time.Hour})
			return want(err, contract.Fenced)
		}},
		{"ClaimKey/Completed", func() error {
			c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: scope, Key: "k-1"}, Fingerprint: "fp", TTL: ttl})
			if err == nil && c.Kind != contract.ClaimCompleted {
				t.Errorf("kind %v", c.Kind)
			}
			return err
		}},
		{"ReleaseKey", func() error {
			c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: scope, Key: "k-2"}, Fingerprint: "fp", TTL: ttl})
			if err != nil {
				return err
			}
			reset()
			ok, err := b.ReleaseKey(ctx, c.Record.KeyRef, c.Token)
			if !ok && err == nil {
				t.Error("ReleaseKey = false")
			}
			return err
		}},
		{"AcquireLease", func() (err error) {
			lease, err = b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "r-1", Owner: "o-1", TTL: ttl})
			return err
		}},
		{"AcquireLease/Busy", func() error {
			_, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "r-1", Owner: "o-2", TTL: ttl})
			return want(err, contract.LeaseBusy)
		}},
		{"UpdateWorkflow/Fenced/Valid", func() (err error) {
			wf, err = b.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: "wf-1", ExpectStatus: wf.Status, Status: contract.StatusRunning, Fence: lease.Fence()})
			return err
		}},
		{"RenewLease", func() (err error) { lease, err = b.RenewLease(ctx, lease, ttl); return err }},
		{"RenewLeases", func() error { // renew.go: one statement for the batch
			stale := lease
			stale.Token += 1000
			out, err := b.RenewLeases(ctx, []contract.Lease{lease, stale, lease}, ttl)
			if err == nil && (out[0].Err != nil || out[2].Err != nil || contract.CodeOf(out[1].Err) != contract.Fenced) {
				t.Errorf("RenewLeases = %+v", out)
			}
			if err == nil {
				lease = out[0].Lease
			}
			return err
		}},
		{"GetLease", func() error { _, err := b.GetLease(ctx, scope, "r-1"); return err }},
		{"AcquirePermit", func() error {
			_, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: "tenant-2", Resource: "sem", Owner: "o-1", TTL: ttl, Permits: 2, Value: "v"})
			return err
		}},
		{"AcquirePermit/Busy", func() error {
			_, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: "tenant-2", Resource: "sem", Owner: "o-2", TTL: ttl, Permits: 1})
			return want(err, contract.LeaseBusy)
		}},
		{"WatchLease/Permits", func() error {
			// A semaphore's watch marks its row (as a permit's watch does:
			// see the next step), then its permits' rows in a statement of
			// its own: run that one directly.
			var r countRow
			_, err := qWatchPermits.one(ctx, b, watchPermitsParams{Scope: "tenant-2", Resource: "sem", Last: watchRange("sem"), MarkTTL: markTTL}, &r)
			if err == nil && r.n != 1 {
				t.Errorf("WatchPermits marked %d rows, want 1", r.n)
			}
			return err
		}},
		{"WatchLease/Mark", func() error {
			// WatchLease's mark while its LISTEN connection is up (this
			// backend may not listen): run it directly. A permit's watch
			// marks its row in one statement.
			w := &leaseWatch{b: b, scope: "tenant-2", resource: "sem#1", last: watchRange("sem#1"), markTTL: markTTL}
			return w.mark(ctx)
		}},
		{"WatchLease/State", func() error {
			// The read of a watch that polls (it polls in a goroutine of
			// its own): run it directly.
			w := &leaseWatch{b: b, scope: "tenant-2", resource: "sem", last: watchRange("sem")}
			s, err := w.state(ctx)
			if err == nil && s == "" {
				t.Error("the state of a semaphore with a permit held is empty")
			}
			return err
		}},
		{"ListKeys", func() error {
			ks, err := b.ListKeys(ctx, contract.KeyListQuery{Scope: scope, Limit: 10})
			if err == nil && len(ks) == 0 {
				t.Error("ListKeys listed nothing")
			}
			return err
		}},
		{"ListKeys/State", func() error {
			_, err := b.ListKeys(ctx, contract.KeyListQuery{Scope: scope, State: contract.KeyCompleted, Limit: 10})
			return err
		}},
		{"ListLeases", func() error {
			ls, err := b.ListLeases(ctx, contract.LeaseListQuery{Scope: scope, Limit: 10})
			if err == nil && len(ls) != 1 {
				t.Errorf("ListLeases = %+v", ls)
			}
			return err
		}},
		{"ListLeases/Held", func() error {
			ls, err := b.ListLeases(ctx, contract.LeaseListQuery{Scope: scope, Held: true, Limit: 10})
			if err == nil && len(ls) != 1 {
				t.Errorf("ListLeases(held) = %+v", ls)
			}
			return err
		}},
		{"ReleaseLease", func() error { _, err := b.ReleaseLease(ctx, lease); return err }},
		{"AcquireLease/Permit", func() (err error) {
			permit, err = b.AcquireLease(ctx, contract.LeaseRequest{Scope: "tenant-2", Resource: "sem#9", Owner: "o-1", TTL: ttl})
			return err
		}},
		{"ReleaseLease/Permit", func() error {
			ok, err := b.ReleaseLease(ctx, permit)
			if err == nil && !ok {
				t.Error("ReleaseLease(permit) = false")
			}
			return err
		}},
		{"RenewLease/Fenced", func() error { _, err := b.RenewLease(ctx, lease, ttl); return want(err, contract.Fenced) }},
		{"Cleanup", func() error { _, err := b.Cleanup(ctx, contract.CleanupRequest{Limit: 10}); return err }},
		{"CountCleanup", func() error { _, err := b.CountCleanup(ctx, contract.CleanupRequest{Limit: 10}); return err }},
		{"DeleteRecord", func() error {
			found, err := b.DeleteRecord(ctx, contract.KindWorkflow, scope, "wf-1")
			if err == nil && !found {
				t.Error("DeleteRecord = false")
			}
			return err
		}},
		{"MigrationStatus", func() error { _, err := b.MigrationStatus(ctx); return err }},
	}
}

func want(err error, code contract.Code) error {
	if contract.CodeOf(err) == code {
		return nil
	}
	if err == nil {
		return &contract.Error{Code: contract.Unknown, Msg: "want code " + code.String() + ", got no error"}
	}
	return err
}

// TestStatementsAreSchemaQualified checks that every registered statement
// names its tables through the quoted schema, never bare, and has no
// unexpanded parameter or placeholder left.
func TestStatementsAreSchemaQualified(t *testing.T) {
	st := newStatements("my_schema")
	if len(registry) == 0 || len(st.text) != len(registry) {
		t.Fatalf("%d statements for %d registered", len(st.text), len(registry))
	}
	for _, s := range registry {
		q := s.sql(st)
		if q == "" {
			t.Errorf("%s: empty", s.name)
		}
		if strings.ContainsAny(q, "@{}") {
			t.Errorf("%s: unexpanded parameter or placeholder in %q", s.name, q)
		}
		if !strings.Contains(q, `"my_schema".`) {
			t.Errorf("%s: names no table of the schema: %q", s.name, q)
		}
		for _, table := range []string{"workflows", "idempotency_keys", "leases", "lease_tokens", "schema_migrations"} {
			bare := strings.Count(q, " "+table+" ") + strings.Count(q, " "+table+"\n")
			if bare > 0 {
				t.Errorf("%s: names %s without its schema: %q", s.name, table, q)
			}
		}
	}
}

// TestFastPathIsOneRoundTripOnEveryClient counts, at a TCP proxy in front
// of the server, the round trips (Sync and simple Query messages: after
// each the client waits for the server) that every fast-path operation
// costs on each client library, after a first pass that lets pgx prepare
// its statements. pgx, pgx's stdlib and lib/pq with binary_parameters=yes
// (what driver=pq sets) take one round trip per operation. lib/pq with its
// defaults (NewBackend on a *sql.DB opened without binary_parameters) takes
// two: it prepares every statement with arguments before it binds it.
//
// Together with TestFastPathIsOneStatement it covers every registered
// statement (see coverage): a new statement fails both until a step runs it
// or notOnTheFastPath says why none does.
func TestFastPathIsOneRoundTripOnEveryClient(t *testing.T) {
	srv := pgtest.Require(t)
	// pgx's stdlib pings a connection idle for more than a second before
	// reusing it: keep that out of the count.
	stdlibNoPing := testClient{"pgx-stdlib", func(ctx context.Context, dsn string, opts Options) (*Backend, error) {
		dsn, n, err := splitPoolSize(dsn)
		if err != nil {
			return nil, err
		}
		cc, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		db := stdlib.OpenDB(*cc, stdlib.OptionShouldPing(func(context.Context, stdlib.ShouldPingParams) bool { return false }))
		db.SetMaxOpenConns(n)
		return newFromOwnDB(ctx, db, opts)
	}}
	for _, c := range []struct {
		client testClient
		want   int64
	}{{tcPgx, 1}, {tcPQ, 1}, {stdlibNoPing, 1}, {tcPQDB, 2}} {
		t.Run(c.client.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			schema := srv.Schema(t)
			admin := newPool(t, srv.DSN())
			if err := migratePool(ctx, admin, schema, Up); err != nil {
				t.Fatal(err)
			}
			proxy := srv.NewProxy(t)
			clock := newTestClock()
			b, err := c.client.open(ctx, proxy.DSN(srv.DSN())+"&pool_max_conns=1", Options{
				Schema: schema, Clock: clock, Migrate: MigrateOff, Listen: ListenOff,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			rec := &recordingQuerier{querier: b.q}
			b.q = rec
			cov := newCoverage(b.st)
			steps := fastPathSteps(t, ctx, b, func() { proxy.ResetMessages(); rec.take() })
			for pass := 1; pass <= 2; pass++ {
				if pass == 2 {
					if _, err := admin.Exec(ctx, `TRUNCATE `+quoteIdent(schema)+`.workflows, `+quoteIdent(schema)+`.idempotency_keys, `+quoteIdent(schema)+`.leases`); err != nil {
						t.Fatal(err)
					}
				}
				for _, s := range steps {
					proxy.ResetMessages()
					rec.take()
					if err := s.op(); err != nil {
						t.Fatalf("pass %d: %s: %v", pass, s.name, err)
					}
					n, want := proxy.RoundTrips(), c.want
					if cov.add(rec.take()) == 0 {
						// lib/pq sends a statement without arguments as a
						// simple query, without preparing it.
						want = 1
					}
					if pass == 1 && (n < want || n > want+1) || pass == 2 && n != want {
						t.Errorf("pass %d: %s took %d round trips, want %d; messages %s", pass, s.name, n, want, formatMessages(proxy.Messages()))
					}
				}
			}
			cov.check(t)
		})
	}
}

func formatMessages(m map[byte]int64) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, int(k))
	}
	sort.Ints(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%c=%d ", k, m[byte(k)])
	}
	return b.String()
}
