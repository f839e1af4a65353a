package postgres

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

// The ceiling: pgbench running the exact statements the backend sends,
// beside the backend's own throughput, at 1 and 16 clients.
//
// Each operation is first run once through the backend with a tracer on its
// pool: the statements it sends (text and arguments) are captured there,
// never copied by hand, and named through the statement registry. Each
// captured statement becomes a line of a pgbench script (-M prepared), its
// arguments passed as pgbench variables: the per-client record as
// :client_id, a fresh record as a random number, a token returned by an
// earlier statement (\gset), everything else as the value captured
// (NULL inline). The same statements, with the same variables, are the
// operation's raw floor (see ceiling_raw_test.go): a loop with no driver
// that prepares them once per connection and writes Bind, Execute and Sync
// itself. Then, in interleaved rounds, the backend runs the operation from
// C goroutines for the leg's duration, the raw floor with C connections
// for as long, and pgbench the script with C clients for as long; the
// table gives the medians and the ratios backend ÷ floor (what the backend
// costs beyond the least any Go program spends on the same statements)
// and backend ÷ pgbench.
//
// It runs on a private cluster with fsync on, as a user's server runs:
//
//	DURABLE_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkCeiling -benchtime 1x ./backends/postgres/
//
// DURABLE_CEILING_SECONDS sets the length of a leg (default 4),
// DURABLE_CEILING_ROUNDS the number of rounds (default 3) and
// DURABLE_CEILING_OPS a regular expression that picks operations by name
// (default all).
func BenchmarkCeiling(b *testing.B) {
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		b.Fatalf("pgbench is needed (Debian: postgresql-15 or postgresql-client): %v", err)
	}
	leg := time.Duration(envInt(b, "DURABLE_CEILING_SECONDS", 4)) * time.Second
	rounds := envInt(b, "DURABLE_CEILING_ROUNDS", 3)
	srv := pgtest.StartPrivate(b)
	ctx := context.Background()
	for _, sql := range []string{`ALTER SYSTEM SET fsync = on`, `ALTER SYSTEM SET full_page_writes = on`, `ALTER SYSTEM SET synchronous_commit = on`, `SELECT pg_reload_conf()`} {
		if err := srv.Exec(ctx, sql); err != nil {
			b.Fatal(err)
		}
	}
	c := newCeiling(b, srv.Server, 20)
	var results []ceilingResult
	only, err := regexp.Compile(os.Getenv("DURABLE_CEILING_OPS"))
	if err != nil {
		b.Fatalf("DURABLE_CEILING_OPS: %v", err)
	}
	// The round trip itself: SELECT 1, prepared, through pgconn (under
	// pgx and the backend) in the durable column, beside its raw floor and
	// pgbench, so that the table shows what part of a ratio below 1 is the
	// round trip of a Go client itself.
	floor := c.selectOne(b)
	for range b.N {
		if only.MatchString(selectOneName) {
			for _, clients := range []int{1, 16} {
				var ours, raw, theirs []float64
				for range rounds {
					ours = append(ours, c.runFloor(b, ctx, clients, leg))
					raw = append(raw, c.runRaw(b, ctx, floor.raw, clients, 0, leg, 0))
					theirs = append(theirs, c.runPgbench(b, ctx, pgbench, floor, clients, leg, 0))
				}
				results = append(results, ceilingResult{selectOneName, clients, median(ours), median(raw), median(theirs), 0})
			}
		}
		coOps := c.opsOn(c.co)
		for i, op := range c.ops() {
			if !only.MatchString(op.name) {
				continue
			}
			scripts := c.capture(b, ctx, op)
			for _, clients := range []int{1, 16} {
				// Coalescing changes writes from several clients only
				// (one client's write is always alone).
				coalesced := op.effect != "" && clients > 1
				var ours, co, raw, theirs []float64
				legs := []func(){
					func() { ours = append(ours, c.runBackend(b, ctx, op, clients, leg)) },
					func() { raw = append(raw, c.runRaw(b, ctx, scripts.raw, clients, 0, leg, 0)) },
					func() { theirs = append(theirs, c.runPgbench(b, ctx, pgbench, scripts, clients, leg, 0)) },
				}
				if coalesced {
					legs = append(legs, func() { co = append(co, c.runBackend(b, ctx, coOps[i], clients, leg)) })
				}
				for r := range rounds {
					// Each round starts with another leg, so that no leg
					// always runs first, into whatever the previous legs
					// left the server doing.
					for l := range legs {
						c.quiesce(b, ctx)
						legs[(r+l)%len(legs)]()
					}
				}
				r := ceilingResult{op.name, clients, median(ours), median(raw), median(theirs), 0}
				if coalesced {
					r.co = median(co)
				}
				results = append(results, r)
			}
		}
	}
	b.StopTimer()
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nceiling: %s legs, %d rounds, medians; fsync on\n", leg, rounds)
	fmt.Fprintf(&sb, "| operation | clients | durable ops/s | raw floor ops/s | pgbench ops/s | durable ÷ floor | durable ÷ pgbench | coalescing ops/s | coalescing ÷ pgbench |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		co, coRatio := "–", "–"
		if r.co > 0 {
			co, coRatio = fmt.Sprintf("%.0f", r.co), fmt.Sprintf("%.2f", r.co/r.theirs)
		}
		fmt.Fprintf(&sb, "| %s | %d | %.0f | %.0f | %.0f | %.2f | %.2f | %s | %s |\n", r.op, r.clients, r.ours, r.raw, r.theirs, r.ours/r.raw, r.ours/r.theirs, co, coRatio)
	}
	fmt.Print(sb.String())
}

// quiesce puts the server, before each leg, in the state a long-running
// one with autovacuum keeps: statistics that match the tables, and no
// checkpoint due. The legs grow the tables by thousands of rows in
// seconds, sooner than autovacuum's next pass, and a connection that
// prepared a statement on the statistics of a one-page table keeps its
// sequential scan. The backend's pooled connections kept ReleaseLease's
// for whole rounds (0.15–0.34 of the floor, whose connections are new in
// each leg and plan again); ANALYZE invalidates such plans, as
// autovacuum's would. The checkpoint keeps one that falls due during a
// leg, with the full-page writes after it, from landing on that leg.
func (c *ceiling) quiesce(tb testing.TB, ctx context.Context) {
	tb.Helper()
	q := quoteIdent(c.schema)
	for _, sql := range []string{`ANALYZE ` + q + `.leases, ` + q + `.idempotency_keys, ` + q + `.workflows`, `CHECKPOINT`} {
		if err := c.srv.Exec(ctx, sql); err != nil {
			tb.Fatal(err)
		}
	}
}

// selectOneName is the round trip's row of the ceiling: its durable column
// is SELECT 1 through pgconn (runFloor).
const selectOneName = "round trip (SELECT 1; durable column: pgconn)"

// selectOne is the round trip's script: SELECT 1, for pgbench and raw.
func (c *ceiling) selectOne(tb testing.TB) ceilingScript {
	s := ceilingScript{file: filepath.Join(c.dir, "floor.sql"), lines: []string{"SELECT 1;"},
		raw: []rawStatement{{sql: "SELECT 1", rows: 1}}}
	if err := os.WriteFile(s.file, []byte("SELECT 1;\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestCeilingScripts runs each pgbench script of the ceiling for a few
// transactions, the raw floor on the same statements for as many, and each
// operation through the backend, so that the benchmark above cannot rot:
// every statement the backend sends for the operations must be captured,
// named and runnable by pgbench and by the raw runner, and both must do
// the operation's work.
func TestCeilingScripts(t *testing.T) {
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		t.Fatalf("pgbench is needed (it comes with the PostgreSQL server packages): %v", err)
	}
	srv := pgtest.Require(t)
	ctx := context.Background()
	c := newCeiling(t, srv, 4)
	coOps := c.opsOn(c.co)
	for i, op := range c.ops() {
		t.Run(op.name, func(t *testing.T) {
			scripts := c.capture(t, ctx, op)
			if len(scripts.lines) != op.statements {
				t.Fatalf("captured %d statements, want %d:\n%s", len(scripts.lines), op.statements, strings.Join(scripts.lines, "\n"))
			}
			for i, r := range scripts.raw {
				if r.rows == 0 {
					t.Fatalf("statement %d of the capture returned and changed no row: the raw floor's row check would prove nothing", i+1)
				}
			}
			before := c.effect(t, ctx, op)
			if tps := c.runPgbench(t, ctx, pgbench, scripts, 2, 0, 20); tps <= 0 {
				t.Fatalf("pgbench ran no transaction")
			}
			// Renewals change the two clients' records; everything else
			// one record per transaction.
			want := int64(40)
			if strings.HasPrefix(op.name, "Renew") {
				want = 2
			}
			if op.effect == "" {
				want = 0
			}
			if got := c.effect(t, ctx, op) - before; got != want {
				t.Fatalf("pgbench's 40 transactions changed %d records, want %d: the script does not do the operation's work:\n%s", got, want, strings.Join(scripts.lines, "\n"))
			}
			// The raw floor, as clients 2 and 3 (pgbench's renewals above
			// already renewed the records of clients 0 and 1); each of its
			// statements also checks its row count against the backend's.
			before = c.effect(t, ctx, op)
			if n := c.runRaw(t, ctx, scripts.raw, 2, 2, 0, 20); n <= 0 {
				t.Fatalf("the raw floor ran no operation")
			}
			if got := c.effect(t, ctx, op) - before; got != want {
				t.Fatalf("the raw floor's 40 operations changed %d records, want %d: it does not do the operation's work:\n%s", got, want, strings.Join(scripts.lines, "\n"))
			}
			if n := c.runBackend(t, ctx, op, 2, 50*time.Millisecond); n <= 0 {
				t.Fatalf("the backend ran no operation")
			}
			if n := c.runBackend(t, ctx, coOps[i], 4, 50*time.Millisecond); n <= 0 {
				t.Fatalf("the coalescing backend ran no operation")
			}
		})
	}
	t.Run(selectOneName, func(t *testing.T) {
		if n := c.runFloor(t, ctx, 2, 50*time.Millisecond); n <= 0 {
			t.Fatalf("the pgconn floor ran no statement")
		}
		if n := c.runRaw(t, ctx, c.selectOne(t).raw, 2, 0, 0, 20); n <= 0 {
			t.Fatalf("the raw floor ran no statement")
		}
	})
}

type ceilingResult struct {
	op                string
	clients           int
	ours, raw, theirs float64
	co                float64 // coalescing (0: not measured)
}

func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[len(s)/2]
}

// ceiling is the backend under test, its traced pool and its server.
type ceiling struct {
	srv    *pgtest.Server
	pool   *pgxpool.Pool // the backend's
	be     *Backend      // coalesce=off, traced
	co     *Backend      // the default, coalescing, on a pool of its own
	schema string
	dir    string

	mu       sync.Mutex
	tracing  bool
	captured []capturedQuery
}

type capturedQuery struct {
	sql  string
	args []any
	rows int64 // returned or changed
}

func newCeiling(tb testing.TB, srv *pgtest.Server, conns int) *ceiling {
	ctx := context.Background()
	c := &ceiling{srv: srv, schema: srv.Schema(tb), dir: tb.TempDir()}
	cfg, err := pgxpool.ParseConfig(srv.DSN() + fmt.Sprintf("&pool_max_conns=%d&pool_min_conns=%d", conns, conns))
	if err != nil {
		tb.Fatal(err)
	}
	cfg.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	c.pool = pool
	// The single-statement path (coalesce=off): what the floor and
	// pgbench run, statement for statement.
	c.be, err = NewBackend(ctx, pool, Options{Schema: c.schema, Coalesce: CoalesceOff})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.be.Close() })
	// The default (coalesce=on), untraced, on a pool of its own: the
	// column of coalesced writes.
	coPool, err := pgxpool.New(ctx, srv.DSN()+fmt.Sprintf("&pool_max_conns=%d&pool_min_conns=%d", conns, conns))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(coPool.Close)
	c.co, err = NewBackend(ctx, coPool, Options{Schema: c.schema})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.co.Close() })
	q := quoteIdent(c.schema)
	// Per-client records, named by pgbench's client_id (0, 1, …): a
	// workflow, a claimed key (token "t"), a lease (token 1000 + client),
	// and below a completed key.
	for _, sql := range []string{
		`INSERT INTO ` + q + `.workflows (scope, id, status, revision, snapshot, created_at, updated_at)
			SELECT 'bench', g::text, 'running', 1, '\x0102'::bytea, now(), now() FROM generate_series(0, 63) g`,
		`INSERT INTO ` + q + `.workflows (scope, id, status, revision, snapshot, created_at, updated_at)
			SELECT 'list', 'wf-' || g, 'running', 1, '\x0102'::bytea, now(), now() FROM generate_series(0, 9) g`,
		`INSERT INTO ` + q + `.idempotency_keys (scope, key, fingerprint, state, token, lease_until, created_at)
			SELECT 'claimed', g::text, 'fp', 'claimed', 't', now() + interval '100 days', now() FROM generate_series(0, 63) g`,
		`INSERT INTO ` + q + `.leases (scope, resource, owner, token, acquired_at, expires_at)
			SELECT 'bench', g::text, 'o', 1000 + g, now(), now() + interval '100 days' FROM generate_series(0, 63) g`,
	} {
		if err := srv.Exec(ctx, sql); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range 64 {
		ref := contract.KeyRef{Scope: "done", Key: strconv.Itoa(i)}
		cl, err := c.be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: time.Hour})
		if err == nil {
			_, err = c.be.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: cl.Token, Outcome: contract.Outcome{Code: 201, Body: []byte("{}")}, Retain: 100 * 24 * time.Hour})
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	return c
}

// TraceQueryStart records the statements of a capture (pgx.QueryTracer).
func (c *ceiling) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tracing {
		var args []any
		for _, a := range data.Args {
			switch a.(type) {
			case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
				continue // per-query options, not arguments
			}
			args = append(args, a)
		}
		c.captured = append(c.captured, capturedQuery{sql: data.SQL, args: args})
	}
	return ctx
}

// TraceQueryEnd records the rows the statement returned or changed.
func (c *ceiling) TraceQueryEnd(_ context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tracing && len(c.captured) > 0 {
		c.captured[len(c.captured)-1].rows = data.CommandTag.RowsAffected()
	}
}

// ceilingOp is one operation (or pair) of the ceiling.
type ceilingOp struct {
	name       string
	statements int // the statements one run sends
	// vars: the pgbench expression of a parameter, by statement name and
	// parameter name: ":client_id", ":r" (a fresh random number per
	// transaction), ":t" (1000 + client_id), ":a_token" (from an earlier
	// statement's \gset). Parameters not named are passed as captured.
	vars map[string]map[string]string
	gset map[string]string // statement name → \gset prefix
	// effect counts what a run changed (nil: nothing, a read): pgbench's
	// transactions must change it as many times as the backend's
	// operations would, so that a script that does nothing (a renewal
	// that finds no lease) cannot pass for the ceiling.
	effect string
	// run does the operation for a client; r is fresh per call.
	run func(ctx context.Context, client int, r int64) error
}

// ops are the operations on the single-statement backend.
func (c *ceiling) ops() []ceilingOp { return c.opsOn(c.be) }

// opsOn are the operations run on be.
func (c *ceiling) opsOn(be *Backend) []ceilingOp {
	snapshot := []byte("snapshot bytes of a small workflow state")
	id := strconv.Itoa
	fresh := func(r int64) string { return strconv.FormatInt(r, 10) }
	return []ceilingOp{
		{name: "CreateWorkflow", statements: 1, effect: `SELECT count(*) FROM {schema}.workflows`, vars: map[string]map[string]string{"CreateWorkflow": {"id": ":r"}},
			run: func(ctx context.Context, _ int, r int64) error {
				_, err := be.CreateWorkflow(ctx, contract.Workflow{Scope: "bench", ID: "c" + fresh(r), Status: "running", Snapshot: snapshot})
				return err
			}},
		{name: "GetWorkflow", statements: 1, vars: map[string]map[string]string{"GetWorkflow": {"id": ":client_id"}},
			run: func(ctx context.Context, client int, _ int64) error {
				_, err := be.GetWorkflow(ctx, "bench", id(client))
				return err
			}},
		{name: "UpdateWorkflow", statements: 1, effect: `SELECT sum(revision) FROM {schema}.workflows WHERE scope = 'bench'`, vars: map[string]map[string]string{"UpdateWorkflow": {"id": ":client_id"}},
			run: func(ctx context.Context, client int, _ int64) error {
				_, err := be.UpdateWorkflow(ctx, contract.Update{Scope: "bench", ID: id(client), ExpectStatus: "running", Status: "running", Snapshot: snapshot})
				return err
			}},
		{name: "ListWorkflows", statements: 1,
			run: func(ctx context.Context, _ int, _ int64) error {
				_, err := be.ListWorkflows(ctx, contract.ListQuery{Scope: "list", Limit: 10})
				return err
			}},
		{name: "ClaimKey (new)", statements: 1, effect: `SELECT count(*) FROM {schema}.idempotency_keys WHERE scope = 'new'`, vars: map[string]map[string]string{"ClaimKey": {"key": ":r", "token": ":r"}},
			run: func(ctx context.Context, _ int, r int64) error {
				_, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "new", Key: "n" + fresh(r)}, Fingerprint: "fp", TTL: time.Hour})
				return err
			}},
		{name: "ClaimKey (replay)", statements: 1, vars: map[string]map[string]string{"ClaimKey": {"key": ":client_id"}},
			run: func(ctx context.Context, client int, _ int64) error {
				cl, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "done", Key: id(client)}, Fingerprint: "fp", TTL: time.Hour})
				if err == nil && cl.Kind != contract.ClaimCompleted {
					err = fmt.Errorf("replay: %v", cl.Kind)
				}
				return err
			}},
		{name: "ClaimKey+CompleteKey", statements: 2, effect: `SELECT count(*) FROM {schema}.idempotency_keys WHERE scope = 'pair' AND state = 'completed'`,
			vars: map[string]map[string]string{"ClaimKey": {"key": ":r", "token": ":r"}, "CompleteKey": {"key": ":r", "token": ":r"}},
			run: func(ctx context.Context, _ int, r int64) error {
				ref := contract.KeyRef{Scope: "pair", Key: "p" + fresh(r)}
				cl, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: time.Hour})
				if err != nil {
					return err
				}
				_, err = be.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: cl.Token, Outcome: contract.Outcome{Code: 201, Body: snapshot}, Retain: time.Hour})
				return err
			}},
		{name: "RenewKey", statements: 1, effect: `SELECT count(*) FROM {schema}.idempotency_keys WHERE scope = 'claimed' AND lease_until < now() + interval '2 hours'`, vars: map[string]map[string]string{"RenewKey": {"key": ":client_id"}},
			run: func(ctx context.Context, client int, _ int64) error {
				_, err := be.RenewKey(ctx, contract.KeyRef{Scope: "claimed", Key: id(client)}, "t", time.Hour)
				return err
			}},
		{name: "GetKey", statements: 1, vars: map[string]map[string]string{"GetKey": {"key": ":client_id"}},
			run: func(ctx context.Context, client int, _ int64) error {
				_, err := be.GetKey(ctx, contract.KeyRef{Scope: "done", Key: id(client)})
				return err
			}},
		{name: "AcquireLease+ReleaseLease", statements: 2, effect: `SELECT count(*) FROM {schema}.leases WHERE scope = 'pair' AND released`,
			vars: map[string]map[string]string{"AcquireLease": {"resource": ":r"}, "ReleaseLease": {"resource": ":r", "token": ":a_token"}},
			gset: map[string]string{"AcquireLease": "a_"},
			run: func(ctx context.Context, _ int, r int64) error {
				l, err := be.AcquireLease(ctx, contract.LeaseRequest{Scope: "pair", Resource: "l" + fresh(r), Owner: "o", TTL: time.Hour})
				if err != nil {
					return err
				}
				_, err = be.ReleaseLease(ctx, l)
				return err
			}},
		{name: "RenewLease", statements: 1, effect: `SELECT count(*) FROM {schema}.leases WHERE scope = 'bench' AND expires_at < now() + interval '2 hours'`, vars: map[string]map[string]string{"RenewLease": {"resource": ":client_id", "token": ":t"}},
			run: func(ctx context.Context, client int, _ int64) error {
				_, err := be.RenewLease(ctx, contract.Lease{Scope: "bench", Resource: id(client), Owner: "o", Token: 1000 + int64(client)}, time.Hour)
				return err
			}},
		{name: "GetLease", statements: 1, vars: map[string]map[string]string{"GetLease": {"resource": ":client_id"}},
			run: func(ctx context.Context, client int, _ int64) error {
				_, err := be.GetLease(ctx, "bench", id(client))
				return err
			}},
	}
}

// ceilingScript is a pgbench script and its variables.
type ceilingScript struct {
	file    string
	lines   []string // the statements, as pgbench runs them
	defines []string // -D name=value
	raw     []rawStatement
}

// captureClient is the client a capture runs as: one that pgbench's
// clients (0 to 15) are not.
const captureClient = 63

var dollarParam = regexp.MustCompile(`\$(\d+)`)

// capture runs op once through the backend and turns the statements it
// sent into a pgbench script.
func (c *ceiling) capture(tb testing.TB, ctx context.Context, op ceilingOp) ceilingScript {
	tb.Helper()
	c.mu.Lock()
	c.tracing, c.captured = true, nil
	c.mu.Unlock()
	err := op.run(ctx, captureClient, rand.Int64N(1<<62))
	c.mu.Lock()
	c.tracing = false
	got := c.captured
	c.mu.Unlock()
	if err != nil {
		tb.Fatalf("%s: %v", op.name, err)
	}
	s := ceilingScript{file: filepath.Join(c.dir, strings.NewReplacer(" ", "_", "(", "", ")", "", "+", "_").Replace(op.name)+".sql")}
	var script strings.Builder
	script.WriteString("\\set r random(1, 1000000000000000)\n\\set t :client_id + 1000\n")
	for qi, q := range got {
		st := c.statementOf(q.sql)
		if st == nil {
			tb.Fatalf("%s sent a statement that is not in the registry: %.80s", op.name, q.sql)
		}
		if len(q.args) != len(st.params) {
			tb.Fatalf("%s: %s has %d parameters, %d arguments were sent", op.name, st.name, len(st.params), len(q.args))
		}
		vars := op.vars[st.name]
		raw := rawStatement{sql: q.sql, args: q.args, vars: make([]string, len(q.args)), gset: op.gset[st.name], rows: q.rows}
		for i, name := range st.params {
			raw.vars[i] = vars[name]
		}
		s.raw = append(s.raw, raw)
		text := dollarParam.ReplaceAllStringFunc(q.sql, func(m string) string {
			n, _ := strconv.Atoi(m[1:])
			name := st.params[n-1]
			if v, ok := vars[name]; ok {
				return v
			}
			a := q.args[n-1]
			switch a {
			case nil:
				return "NULL"
			case "":
				return "''" // pgbench takes no empty -D value
			}
			v := fmt.Sprintf("q%d_%s", qi, name)
			s.defines = append(s.defines, v+"="+pgbenchValue(a))
			return ":" + v
		})
		text = strings.Join(strings.Fields(text), " ") // one line
		if p, ok := op.gset[st.name]; ok {
			text += "\n\\gset " + p
		} else {
			text += ";"
		}
		s.lines = append(s.lines, text)
		script.WriteString(text + "\n")
	}
	if err := os.WriteFile(s.file, []byte(script.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	return s
}

// effect reads op's effect counter (0 for a read).
func (c *ceiling) effect(tb testing.TB, ctx context.Context, op ceilingOp) int64 {
	tb.Helper()
	if op.effect == "" {
		return 0
	}
	conn, err := c.srv.Connect(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, strings.ReplaceAll(op.effect, "{schema}", quoteIdent(c.schema))).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// statementOf names a statement by its text.
func (c *ceiling) statementOf(sql string) *statement {
	for _, s := range registry {
		if s.sql(c.be.st) == sql {
			return s
		}
	}
	return nil
}

// pgbenchValue is an argument as pgbench sends a variable: text.
func pgbenchValue(a any) string {
	switch v := a.(type) {
	case []byte:
		return `\x` + hex.EncodeToString(v)
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	default:
		return fmt.Sprint(v)
	}
}

// runBackend runs op from clients goroutines for d and returns operations
// per second.
func (c *ceiling) runBackend(tb testing.TB, ctx context.Context, op ceilingOp, clients int, d time.Duration) float64 {
	tb.Helper()
	return runClients(tb, op.name, clients, d, func(client int, stop time.Time, n *atomic.Int64) error {
		for first := true; first || time.Now().Before(stop); first = false {
			if err := op.run(ctx, client, rand.Int64N(1<<62)); err != nil {
				return err
			}
			n.Add(1)
		}
		return nil
	})
}

// runFloor runs SELECT 1, prepared, from clients connections of the
// ceiling's pool for d, through pgconn directly (no pgx row handling, no
// backend), and returns statements per second.
func (c *ceiling) runFloor(tb testing.TB, ctx context.Context, clients int, d time.Duration) float64 {
	tb.Helper()
	return runClients(tb, "floor", clients, d, func(_ int, stop time.Time, n *atomic.Int64) error {
		conn, err := c.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		pc := conn.Conn().PgConn()
		if _, err := pc.Prepare(ctx, "durable_floor", "SELECT 1", nil); err != nil {
			return err
		}
		for time.Now().Before(stop) {
			if _, err := pc.ExecPrepared(ctx, "durable_floor", nil, nil, nil).Close(); err != nil {
				return err
			}
			n.Add(1)
		}
		_, err = pc.Exec(ctx, "DEALLOCATE durable_floor").ReadAll()
		return err
	})
}

// runClients runs work in clients goroutines until d has passed (each
// work counts what it did in n and returns when time.Now() passes stop)
// and returns the count per second; the first error fails tb.
func runClients(tb testing.TB, name string, clients int, d time.Duration, work func(client int, stop time.Time, n *atomic.Int64) error) float64 {
	tb.Helper()
	var n atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for client := range clients {
		wg.Go(func() {
			if err := work(client, stop, &n); err != nil {
				failed.CompareAndSwap(nil, err)
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return float64(n.Load()) / time.Since(start).Seconds()
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// runPgbench runs the script with clients connections, for d or for
// transactions per client, and returns transactions per second.
func (c *ceiling) runPgbench(tb testing.TB, ctx context.Context, pgbench string, s ceilingScript, clients int, d time.Duration, transactions int) float64 {
	tb.Helper()
	cfg, err := pgx.ParseConfig(c.srv.DSN())
	if err != nil {
		tb.Fatal(err)
	}
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)),
		"-f", s.file, "-h", cfg.Host, "-p", strconv.Itoa(int(cfg.Port)), "-U", cfg.User}
	if transactions > 0 {
		args = append(args, "-t", strconv.Itoa(transactions))
	} else {
		args = append(args, "-T", strconv.Itoa(int(d.Seconds())))
	}
	for _, v := range s.defines {
		args = append(args, "-D", v)
	}
	args = append(args, cfg.Database)
	cmd := exec.CommandContext(ctx, pgbench, args...)
	out, err := cmd.CombinedOutput()
	m := tpsLine.FindSubmatch(out)
	if err != nil || m == nil || strings.Contains(string(out), "ERROR") || strings.Contains(string(out), "aborted") {
		tb.Fatalf("pgbench %s: %v\n%s\nscript:\n%s", filepath.Base(s.file), err, out, strings.Join(s.lines, "\n"))
	}
	tps, _ := strconv.ParseFloat(string(m[1]), 64)
	return tps
}
