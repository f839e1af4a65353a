package faults

// The fault suite. Run it with
//
//	DURABLE_REQUIRE_POSTGRES=1 go test -race -count=1 -v ./internal/faults/
//
// It starts a private PostgreSQL cluster of its own (never the shared test
// server: this one is killed and restarted), and for each client library
// (pgx, lib/pq with driver=pq, pgx's stdlib with driver=pgx-stdlib) runs
// six fault scenarios, each as a series of short histories of 16
// concurrent clients on fresh resources (leases, fenced semaphores of 2 and
// 3 permits, workflows, idempotency keys, Store.Do keys):
//
//	kill          pg_terminate_backend on the clients' backends every ~200 ms
//	restart       pg_ctl restart -m fast every ~2 s
//	stmt-timeout  statement_timeout=5ms/25ms, with periodic table-lock stalls
//	proxy         a TCP proxy adding latency and connection resets, and
//	              freezing all traffic for 2 s every 3.5 s (calls have
//	              deadlines)
//	hang          the proxy freezing all traffic for 3 s every 6 s while
//	              callers set no deadline: only the Store's operation
//	              timeout (WithOperationTimeout, 750 ms here) bounds them
//	cancel        contexts cancelled at random moments and short deadlines,
//	              through the proxy with latency (so they land in flight)
//
// Knobs (environment):
//
//	DURABLE_FAULT_DURATION   time per client library, split among the
//	                         scenarios (default 30s); e.g. 5m for a long
//	                         local run
//	DURABLE_FAULT_DRIVERS    comma-separated subset of pgx,pq,pgx-stdlib
//	DURABLE_FAULT_SCENARIOS  comma-separated subset of the scenarios
//	DURABLE_FAULT_SEED       random seed (printed on every run)
//	DURABLE_FAULT_ARTIFACTS  directory for violation reports and porcupine
//	                         visualizations (default: a fresh temporary
//	                         directory, printed when there is something in it)
//	DURABLE_FAULT_DUMP       "1": also write every history to the artifacts
//	                         directory
//	DURABLE_FAULT_SUMMARY    a file to append the summary lines to (CI
//	                         prints it: go test hides a passing package's
//	                         output)
//
// Every run prints one summary line per client library to stdout:
//
//	FAULTS driver=… histories=… ops=… … do{…} permits{…} faults{…} lin{…} coalesce{…} violations=… wall=…
//
// coalesce{batches=… calls=… largest=…} sums the Postgres backend's
// coalesced writes over the stores of every scenario (postgres.Backend's
// CoalesceStats: a write alone is a batch of one; largest is the most
// writes of one batch), so that a log shows that batches formed under the
// faults; all zero on lib/pq, which does not coalesce.
//
// permits{acquire=native acq=… busy=… not-applied=… unknown=…
// adopted=… max-holders=…} counts Store.AcquirePermit's outcomes (adopted:
// lost replies whose grant a read-back found), the most permits of one
// semaphore the callers were told they held at one instant, and whether
// the backend has the native capability (contract.PermitAcquirer; always,
// see semKind).

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/internal/faultmodel"
	"github.com/durable-go/durable/internal/faultproxy"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/syncbuf"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if _, ok := <-sigs; ok {
			pgtest.StopAllPrivate()
			os.Exit(130)
		}
	}()
	code := m.Run()
	signal.Stop(sigs)
	close(sigs)
	pgtest.StopAllPrivate()
	os.Exit(code)
}

type driverSpec struct {
	name  string
	param string
}

var drivers = []driverSpec{
	{"pgx", ""},
	{"pq", "&driver=pq"},
	{"pgx-stdlib", "&driver=pgx-stdlib"},
}

// scenario is one kind of fault and the call contexts that go with it.
type scenario struct {
	name   string
	params func(store int) string // extra DSN parameters per store
	proxy  bool
	// latency of the proxy
	latency, jitter time.Duration
	// call contexts: a deadline with probability deadlineP (1 = always),
	// else a cancellation with probability cancelP; both at a log-uniform
	// random time within [min, max], so that they land in every phase of a
	// call: waiting for a connection, connecting, preparing, in flight
	deadlineP                float64
	deadlineMin, deadlineMax time.Duration
	cancelP                  float64
	cancelMin, cancelMax     time.Duration
	think                    time.Duration // pause between a client's actions
	// proxy faults: a freeze of freezeFor at freezeFirst and then every
	// freezeEvery, and resets of resetFrac of the connections every
	// 200–400 ms
	freezeFirst, freezeEvery, freezeFor time.Duration
	resetFrac                           float64
	// opTimeout, when set, is the Store's operation timeout
	// (durable.WithOperationTimeout): the only bound of calls without a
	// deadline of their own
	opTimeout time.Duration
	inject    func(ctx context.Context, f *faultEnv)
}

var scenarios = []*scenario{
	{
		name: "kill", cancelP: 0.05, cancelMin: 100 * time.Microsecond, cancelMax: 50 * time.Millisecond, think: time.Millisecond,
		inject: injectKills,
	},
	{
		name: "restart", cancelP: 0.05, cancelMin: 100 * time.Microsecond, cancelMax: 50 * time.Millisecond, think: time.Millisecond,
		inject: injectRestarts,
	},
	{
		name: "stmt-timeout", cancelP: 0.05, cancelMin: 100 * time.Microsecond, cancelMax: 50 * time.Millisecond, think: time.Millisecond,
		params: func(i int) string {
			if i%2 == 0 {
				return "&statement_timeout=5ms"
			}
			return "&statement_timeout=25ms"
		},
		inject: injectLockStalls,
	},
	{
		name: "proxy", proxy: true, latency: 200 * time.Microsecond, jitter: 2 * time.Millisecond,
		deadlineP: 1, deadlineMin: 250 * time.Millisecond, deadlineMax: time.Second, think: time.Millisecond,
		freezeFirst: 1200 * time.Millisecond, freezeEvery: 3500 * time.Millisecond, freezeFor: 2 * time.Second, resetFrac: 0.15,
		inject: injectProxyFaults,
	},
	{
		// A hung server with callers that set no deadline: only the
		// Store's operation timeout bounds them.
		name: "hang", proxy: true, latency: 200 * time.Microsecond, jitter: time.Millisecond, think: time.Millisecond,
		freezeFirst: 1500 * time.Millisecond, freezeEvery: 6 * time.Second, freezeFor: 3 * time.Second, opTimeout: 750 * time.Millisecond,
		inject: injectProxyFaults,
	},
	{
		name: "cancel", proxy: true, latency: 500 * time.Microsecond, jitter: 3 * time.Millisecond,
		deadlineP: 0.2, deadlineMin: time.Millisecond, deadlineMax: 80 * time.Millisecond,
		cancelP: 0.35, cancelMin: 100 * time.Microsecond, cancelMax: 80 * time.Millisecond,
		inject: func(ctx context.Context, f *faultEnv) { f.env.stats.fault("latency") },
	},
}

const historyLen = time.Second

// --- configuration from the environment ---

func durationKnob(t *testing.T) time.Duration {
	v := os.Getenv("DURABLE_FAULT_DURATION")
	if v == "" {
		return 30 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("DURABLE_FAULT_DURATION=%q: want a positive Go duration such as 5m", v)
	}
	return d
}

func selected(env, name string) bool {
	v := os.Getenv(env)
	if v == "" {
		return true
	}
	for _, s := range strings.Split(v, ",") {
		if strings.TrimSpace(s) == name {
			return true
		}
	}
	return false
}

var (
	seedOnce sync.Once
	seed     uint64
)

func seedKnob(t *testing.T) uint64 {
	seedOnce.Do(func() {
		seed = uint64(time.Now().UnixNano())
		if v := os.Getenv("DURABLE_FAULT_SEED"); v != "" {
			s, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("DURABLE_FAULT_SEED=%q: want an unsigned integer", v)
			}
			seed = s
		}
	})
	return seed
}

var (
	artOnce sync.Once
	artDir  string
)

func artifacts(t *testing.T) string {
	artOnce.Do(func() {
		artDir = os.Getenv("DURABLE_FAULT_ARTIFACTS")
		if artDir == "" {
			d, err := os.MkdirTemp("", "durable-faults-")
			if err != nil {
				t.Fatalf("artifacts directory: %v", err)
			}
			artDir = d
		} else if err := os.MkdirAll(artDir, 0o755); err != nil {
			t.Fatalf("artifacts directory: %v", err)
		}
	})
	return artDir
}

// --- statistics and violations ---

type stats struct {
	mu     sync.Mutex
	counts map[string]int64
	maxes  map[string]int64
}

func newStats() *stats { return &stats{counts: map[string]int64{}, maxes: map[string]int64{}} }

// setMax records v under key if it is the largest so far.
func (s *stats) setMax(key string, v int64) {
	s.mu.Lock()
	s.maxes[key] = max(s.maxes[key], v)
	s.mu.Unlock()
}

func (s *stats) getMax(key string) int64 { s.mu.Lock(); defer s.mu.Unlock(); return s.maxes[key] }

func (s *stats) add(key string, n int64) {
	s.mu.Lock()
	s.counts[key] += n
	s.mu.Unlock()
}

func (s *stats) fault(kind string)         { s.add("fault."+kind, 1) }
func (s *stats) faultN(kind string, n int) { s.add("fault."+kind, int64(n)) }
func (s *stats) get(key string) int64      { s.mu.Lock(); defer s.mu.Unlock(); return s.counts[key] }
func (s *stats) op(o *faultmodel.Op)       { s.add("ops", 1); s.add("out."+o.Out.O.String(), 1) }
func (s *stats) merge(o *stats) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, v := range o.counts {
		s.add(k, v)
	}
	for k, v := range o.maxes {
		s.setMax(k, v)
	}
}

func (s *stats) keys(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ks []string
	for k := range s.counts {
		if strings.HasPrefix(k, prefix) {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}

// sqlState counts the SQLSTATE of a call's database cause, if any.
func (s *stats) sqlState(err error) {
	var st interface{ SQLState() string }
	if asSQLState(err, &st) {
		s.add("sqlstate."+st.SQLState(), 1)
	}
}

type violation struct {
	driver, scenario string
	history          int
	kind, msg        string
	part             string // the partition whose history shows it
	ops              []string
}

// env is the state of one scenario run on one client library.
type env struct {
	t        *testing.T
	driver   string
	sc       *scenario
	base     time.Time
	seq      atomic.Int64
	stats    *stats
	password string
	secrets  []string // strings that must never appear in an error text

	mu     sync.Mutex
	viols  []violation
	grants []grantRec
}

type grantRec struct {
	resource   string
	op         *faultmodel.Op
	token      int64
	start, end time.Time // absolute: grants of every scenario are compared
}

func (e *env) violate(h *hist, kind, msg string, o *faultmodel.Op) {
	v := violation{driver: e.driver, scenario: e.sc.name, kind: kind, msg: msg}
	if h != nil {
		v.history = h.n
	}
	if o != nil {
		v.part = o.Part
		v.ops = []string{o.String()}
	}
	e.mu.Lock()
	e.viols = append(e.viols, v)
	e.mu.Unlock()
}

func (e *env) violateDo(h *hist, kind, msg string, ops []string) {
	e.mu.Lock()
	e.viols = append(e.viols, violation{driver: e.driver, scenario: e.sc.name, history: h.n, kind: kind, msg: msg, ops: ops})
	e.mu.Unlock()
}

func (e *env) grant(resource string, o *faultmodel.Op, token int64) {
	e.mu.Lock()
	e.grants = append(e.grants, grantRec{resource, o, token, e.base.Add(o.Start), e.base.Add(o.End)})
	e.mu.Unlock()
}

// checkErrorText: Error() never contains a DSN, a password, SQL text or
// raw driver text.
func (e *env) checkErrorText(h *hist, o *faultmodel.Op) {
	if o.Err == nil {
		return
	}
	msg := o.Err.Error()
	for _, s := range e.secrets {
		if strings.Contains(msg, s) {
			what := s
			if s == e.password {
				what = "the password"
			}
			e.violate(h, "error-text", fmt.Sprintf("Error() contains %q", what), o)
			return
		}
	}
}

// checkTimeBound: a call returns soon after its deadline or cancellation,
// and never hangs.
func (e *env) checkTimeBound(h *hist, o *faultmodel.Op) {
	// The slack covers lib/pq's watchdog, which cuts a statement's
	// connection 1 s after its context ended (backends/postgres
	// pqwatch.go), and scheduling under -race on a busy machine.
	const slack = 1500 * time.Millisecond
	took := o.End - o.Start
	bound := time.Duration(-1)
	switch {
	case o.Deadline > 0:
		bound = o.Deadline
	case o.Cancel > 0:
		bound = o.Cancel
	case e.sc.opTimeout > 0:
		bound = e.sc.opTimeout
	}
	if bound >= 0 && o.In.Kind != faultmodel.Do {
		e.stats.setMax("overrun", int64(max(took-bound, 0)))
	}
	limit := slack
	if o.In.Kind == faultmodel.Do {
		// Do stores or releases after fn on a detached context, for up to
		// its CompleteWithin (10 s by default).
		limit = 12 * time.Second
	}
	switch {
	case o.Deadline > 0 && took > o.Deadline+limit:
		e.violate(h, "time-bound", fmt.Sprintf("returned %v after its %v deadline", (took-o.Deadline).Round(time.Millisecond), o.Deadline), o)
	case o.Cancel > 0 && took > o.Cancel+limit:
		e.violate(h, "time-bound", fmt.Sprintf("returned %v after its context was cancelled", (took-o.Cancel).Round(time.Millisecond)), o)
	case o.Deadline == 0 && o.Cancel == 0 && e.sc.opTimeout > 0 && took > e.sc.opTimeout+limit:
		e.violate(h, "time-bound", fmt.Sprintf("took %v: %v beyond the Store's operation timeout %v", took.Round(time.Millisecond),
			(took-e.sc.opTimeout).Round(time.Millisecond), e.sc.opTimeout), o)
	case took > hungThreshold:
		e.violate(h, "time-bound", fmt.Sprintf("call took %v (hung)", took.Round(time.Millisecond)), o)
	}
}

// --- the test ---

func TestFaults(t *testing.T) {
	cl := pgtest.StartPrivate(t)
	total := durationKnob(t)
	sd := seedKnob(t)
	t.Logf("seed %d (DURABLE_FAULT_SEED), %v per client library (DURABLE_FAULT_DURATION)", sd, total)
	fmt.Printf("FAULTS seed=%d duration-per-driver=%v\n", sd, total)
	for _, d := range drivers {
		if !selected("DURABLE_FAULT_DRIVERS", d.name) {
			continue
		}
		t.Run(d.name, func(t *testing.T) { runDriver(t, cl, d, total, sd) })
	}
}

func runDriver(t *testing.T, cl *pgtest.Private, d driverSpec, total time.Duration, sd uint64) {
	began := time.Now()
	schema := "faults_" + strings.ReplaceAll(d.name, "-", "_")
	pwDSN := cl.PasswordDSN(t)
	// Create the schema once (migrate=auto), as the password role.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	s, err := durable.Open(ctx, pwDSN+"&schema="+schema+d.param)
	cancel()
	if err != nil {
		t.Fatalf("opening the store to migrate: %v", err)
	}
	ttlViols := checkTTLTolerance(d.name, s)
	if err := s.Close(); err != nil {
		t.Fatalf("closing: %v", err)
	}
	var sel []*scenario
	for _, sc := range scenarios {
		if selected("DURABLE_FAULT_SCENARIOS", sc.name) {
			sel = append(sel, sc)
		}
	}
	if len(sel) == 0 {
		t.Skip("no scenario selected (DURABLE_FAULT_SCENARIOS)")
	}
	per := total / time.Duration(len(sel))
	sum := newStats()
	viols := ttlViols
	var grants []grantRec
	histories := 0
	for i, sc := range sel {
		r := runScenario(t, cl, d, schema, sc, per, sd+uint64(i)*7919)
		sum.merge(r.stats)
		viols = append(viols, r.viols...)
		grants = append(grants, r.grants...)
		histories += r.histories
	}
	viols = append(viols, checkTokens(d.name, grants)...)
	sum.add("grants", int64(len(grants)))
	wall := time.Since(began)

	report(t, d.name, viols)
	line := summaryLine(d.name, histories, sum, len(viols), wall)
	t.Log(line)
	fmt.Println(line)
	appendSummary(t, line)
}

// appendSummary appends line to the file DURABLE_FAULT_SUMMARY names, if
// any: go test hides a passing package's output, so CI collects the counts
// there and prints them after the run.
func appendSummary(t *testing.T, line string) {
	path := os.Getenv("DURABLE_FAULT_SUMMARY")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("DURABLE_FAULT_SUMMARY: %v", err)
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		t.Errorf("DURABLE_FAULT_SUMMARY: %v", err)
	}
}

func summaryLine(driver string, histories int, s *stats, nviol int, wall time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "FAULTS driver=%s histories=%d ops=%d ok=%d refused=%d not-applied=%d unknown=%d bad=%d",
		driver, histories, s.get("ops"), s.get("out.ok"), s.get("out.refused"), s.get("out.not-applied"),
		s.get("out.unknown"), s.get("out.BAD"))
	fmt.Fprintf(&b, " do{calls=%d runs=%d}", s.get("do.calls"), s.get("do.runs"))
	fmt.Fprintf(&b, " permits{acquire=native acq=%d busy=%d not-applied=%d unknown=%d adopted=%d max-holders=%d}",
		s.get("permits.acq"), s.get("permits.busy"), s.get("permits.not-applied"), s.get("permits.unknown"),
		s.get("permits.adopted"), s.getMax("permits.max-holders"))
	b.WriteString(" faults{")
	for i, k := range s.keys("fault.") {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%s=%d", strings.TrimPrefix(k, "fault."), s.get(k))
	}
	b.WriteString("} sqlstate{")
	for i, k := range s.keys("sqlstate.") {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%s=%d", strings.TrimPrefix(k, "sqlstate."), s.get(k))
	}
	fmt.Fprintf(&b, "} lin{partitions=%d ok=%d illegal=%d timeout=%d}", s.get("lin.partitions"), s.get("lin.ok"),
		s.get("lin.illegal"), s.get("lin.timeout"))
	fmt.Fprintf(&b, " coalesce{batches=%d calls=%d largest=%d}", s.get("coalesce.batches"), s.get("coalesce.calls"),
		s.getMax("coalesce.largest"))
	fmt.Fprintf(&b, " max-overrun=%v", time.Duration(s.getMax("overrun")).Round(time.Millisecond))
	fmt.Fprintf(&b, " violations=%d wall=%v", nviol, wall.Round(100*time.Millisecond))
	return b.String()
}

// report fails t with every violation, grouped by kind, and writes the full
// report (with the failing histories) to the artifacts directory.
func report(t *testing.T, driver string, viols []violation) {
	if len(viols) == 0 {
		return
	}
	kinds := map[string]int{}
	for _, v := range viols {
		kinds[v.kind]++
	}
	var full bytes.Buffer
	for i, v := range viols {
		fmt.Fprintf(&full, "=== violation %d: [%s/%s h%d] %s: %s\n", i+1, v.driver, v.scenario, v.history, v.kind, v.msg)
		for _, o := range v.ops {
			fmt.Fprintf(&full, "    %s\n", o)
		}
	}
	path := fmt.Sprintf("%s/violations-%s.txt", artifacts(t), driver)
	if err := os.WriteFile(path, full.Bytes(), 0o644); err != nil {
		t.Logf("writing %s: %v", path, err)
	}
	shown := 0
	perKind := map[string]int{}
	for _, v := range viols {
		perKind[v.kind]++
		if perKind[v.kind] > 5 || shown >= 25 {
			continue
		}
		shown++
		var b strings.Builder
		fmt.Fprintf(&b, "[%s/%s h%d] %s: %s", v.driver, v.scenario, v.history, v.kind, v.msg)
		for i, o := range v.ops {
			if i == 40 {
				fmt.Fprintf(&b, "\n    … %d more ops (see %s)", len(v.ops)-40, path)
				break
			}
			fmt.Fprintf(&b, "\n    %s", o)
		}
		t.Error(b.String())
	}
	t.Errorf("%d violations on %s (by kind: %v); full report with histories: %s", len(viols), driver, kinds, path)
}

// --- one scenario ---

type scenarioResult struct {
	stats     *stats
	viols     []violation
	grants    []grantRec
	histories int
}

// faultEnv is what an injector works with.
type faultEnv struct {
	env    *env
	cl     *pgtest.Private
	proxy  *faultproxy.Proxy
	schema string
	dur    time.Duration
	rng    *rand.Rand
}

func runScenario(t *testing.T, cl *pgtest.Private, d driverSpec, schema string, sc *scenario, dur time.Duration, sd uint64) scenarioResult {
	t.Helper()
	// Goroutines alive before the scenario are not its leaks: the testing
	// framework's, TestMain's signal handler (os/signal's loop and ours),
	// and nothing else of durable's (every earlier scenario's stores were
	// closed and checked the same way). Everything started after this
	// point — stores, pools, LISTEN connections, Do's keepers, the proxy —
	// must be gone once the stores and the proxy are closed.
	leakBase := goleak.IgnoreCurrent()
	e := &env{t: t, driver: d.name, sc: sc, base: time.Now(), stats: newStats(), password: pgtest.PasswordRolePassword}
	pwDSN := cl.PasswordDSN(t)
	host, port := cl.HostPort()
	e.secrets = []string{pgtest.PasswordRolePassword, "postgres://", pgtest.PasswordRole, "127.0.0.1:",
		"SELECT ", "INSERT INTO", "UPDATE ", "DELETE FROM", " WHERE ", "pq: ", "FATAL", "ERROR:"}
	var px *faultproxy.Proxy
	if sc.proxy {
		var err error
		px, err = faultproxy.New(fmt.Sprintf("%s:%d", host, port), faultproxy.Options{})
		if err != nil {
			t.Fatalf("proxy: %v", err)
		}
		px.SetLatency(sc.latency, sc.jitter)
	}
	logs := &syncbuf.Buffer{}
	logger := slogJSON(logs)
	stores := make([]*durable.Store, nStores)
	for i := range stores {
		dsn := pwDSN
		if px != nil {
			dsn = px.DSN(dsn)
		}
		dsn += "&schema=" + schema + "&migrate=verify&pool_max_conns=4" + d.param
		if i%2 == 1 {
			// One batch in flight at a time: larger batches of coalesced
			// writes meet the faults (pgx and pgx-stdlib; lib/pq does
			// not coalesce).
			dsn += "&coalesce_inflight=1"
		}
		if sc.params != nil {
			dsn += sc.params(i)
		}
		opts := []durable.Option{durable.WithLogger(logger)}
		if sc.opTimeout > 0 {
			opts = append(opts, durable.WithOperationTimeout(sc.opTimeout))
		}
		// Before the faults start; retried because a tiny
		// statement_timeout applies to Open's schema check too.
		var s *durable.Store
		var err error
		for attempt := 0; attempt < 20; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			s, err = durable.Open(ctx, dsn, opts...)
			cancel()
			if err == nil || !durable.Retryable(err) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s/%s: opening store %d: %v", d.name, sc.name, i, err)
		}
		stores[i] = s
	}

	fe := &faultEnv{env: e, cl: cl, proxy: px, schema: schema, dur: dur, rng: rand.New(rand.NewPCG(sd, 99))}
	ictx, stopInject := context.WithCancel(context.Background())
	var iwg sync.WaitGroup
	iwg.Add(1)
	go func() {
		defer iwg.Done()
		sc.inject(ictx, fe)
	}()

	clients := make([]*client, nClients+1)
	for i := range clients {
		clients[i] = &client{id: i, env: e, s: stores[i%nStores], rng: rand.New(rand.NewPCG(sd, uint64(i)))}
	}
	var hists []*hist
	deadline := time.Now().Add(dur)
	for n := 0; n == 0 || time.Now().Add(historyLen/2).Before(deadline); n++ {
		h := newHist(e, sc, n)
		if err := setupHistory(cl, schema, h); err != nil {
			t.Fatalf("%s/%s: setting up history %d: %v", d.name, sc.name, n, err)
		}
		h.end = time.Now().Add(historyLen)
		var wg sync.WaitGroup
		for _, c := range clients[:nClients] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.run(h)
			}()
		}
		wg.Wait()
		clients[nClients].finalReads(h)
		hists = append(hists, h)
	}
	stopInject()
	iwg.Wait()
	if px != nil {
		px.Thaw()
	}
	// The server must be up for the checks (a restart may have been the
	// last fault).
	if err := waitAdmin(cl, 60*time.Second); err != nil {
		t.Fatalf("%s/%s: the server did not come back: %v\n%s", d.name, sc.name, err, cl.ServerLog())
	}
	for _, s := range stores {
		var b *postgres.Backend
		if s.As(&b) {
			cs := b.CoalesceStats()
			e.stats.add("coalesce.batches", cs.Batches)
			e.stats.add("coalesce.calls", cs.Calls)
			e.stats.setMax("coalesce.largest", cs.Largest)
		}
	}
	for i, s := range stores {
		if err := s.Close(); err != nil {
			e.violate(nil, "close", fmt.Sprintf("closing store %d: %v", i, err), nil)
		}
	}
	if px != nil {
		px.Close()
	}
	if err := goleak.Find(leakBase); err != nil {
		e.violate(nil, "goroutine-leak", "goroutines left after closing every store: "+err.Error(), nil)
	}

	// Checks.
	if err := checkDatabase(e, cl, schema, hists); err != nil {
		t.Fatalf("%s/%s: reading the database for the checks: %v", d.name, sc.name, err)
	}
	for _, h := range hists {
		checkLinearizable(e, h)
		checkHolders(e, h)
		checkDo(e, h)
	}
	checkLogs(e, logs.String())
	if os.Getenv("DURABLE_FAULT_DUMP") == "1" {
		dumpHistories(t, e, hists)
	}
	for _, h := range hists {
		e.stats.add("do.calls", int64(len(h.runs.calls)))
		e.stats.add("do.runs", int64(len(h.runs.runs)))
	}
	t.Logf("%s/%s: %d histories, %d ops, faults %v, %d violations", d.name, sc.name, len(hists), e.stats.get("ops"),
		faultCounts(e.stats), len(e.viols))
	return scenarioResult{stats: e.stats, viols: e.viols, grants: e.grants, histories: len(hists)}
}

func faultCounts(s *stats) map[string]int64 {
	m := map[string]int64{}
	for _, k := range s.keys("fault.") {
		m[strings.TrimPrefix(k, "fault.")] = s.get(k)
	}
	return m
}

func newHist(e *env, sc *scenario, n int) *hist {
	prefix := fmt.Sprintf("%s-h%d", sc.name, n)
	h := &hist{n: n, prefix: prefix, runs: newDoRuns(), permits: map[string]int{},
		rec: &faultmodel.Recorder{Base: e.base, Scenario: sc.name, Driver: e.driver, History: n}}
	for i := range nLeaseParts {
		h.leases = append(h.leases, fmt.Sprintf("%s-r%d", prefix, i))
	}
	for i := range nSemParts {
		s := fmt.Sprintf("%s-s%d", prefix, i)
		h.sems = append(h.sems, s)
		h.permits[s] = semPermits(i)
	}
	for i := range nWfParts {
		h.wfs = append(h.wfs, fmt.Sprintf("%s-w%d", prefix, i))
	}
	for i := range nKeyParts {
		h.keys = append(h.keys, fmt.Sprintf("%s-k%d", prefix, i))
	}
	for i := range nDoKeys {
		h.dos = append(h.dos, fmt.Sprintf("%s-d%d", prefix, i))
	}
	return h
}

// setupHistory creates the workflows that the lease and semaphore
// partitions fence, at revision 1, directly in the database (not part of
// any history).
func setupHistory(cl *pgtest.Private, schema string, h *hist) error {
	var last error
	for range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := func() error {
			conn, err := cl.Connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			for _, r := range append(append([]string(nil), h.leases...), h.sems...) {
				if _, err := conn.Exec(ctx, `INSERT INTO "`+schema+`".workflows
					(scope, id, request_id, status, revision, snapshot, created_at, updated_at)
					VALUES ($1, $2, $3, 'running', 1, NULL, now(), now()) ON CONFLICT DO NOTHING`,
					string(scope), r, faultmodel.InitRef); err != nil {
					return err
				}
			}
			return nil
		}()
		cancel()
		if err == nil {
			return nil
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

func waitAdmin(cl *pgtest.Private, within time.Duration) error {
	end := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := cl.Exec(ctx, "SELECT 1")
		cancel()
		if err == nil || time.Now().After(end) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// --- fault injectors ---

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// adminConn keeps one superuser connection, reconnecting after failures.
type adminConn struct {
	cl   *pgtest.Private
	conn *pgx.Conn
}

func (a *adminConn) get(ctx context.Context) (*pgx.Conn, error) {
	if a.conn != nil {
		return a.conn, nil
	}
	c, err := a.cl.Connect(ctx)
	if err != nil {
		return nil, err
	}
	a.conn = c
	return c, nil
}

func (a *adminConn) broken() {
	if a.conn != nil {
		_ = a.conn.Close(context.Background())
		a.conn = nil
	}
}

func (a *adminConn) close() { a.broken() }

// injectKills terminates about half of the clients' backends (those of the
// password role, including LISTEN connections) every 150–250 ms.
func injectKills(ctx context.Context, f *faultEnv) {
	a := &adminConn{cl: f.cl}
	defer a.close()
	for sleepCtx(ctx, 150*time.Millisecond+time.Duration(f.rng.Int64N(int64(100*time.Millisecond)))) {
		conn, err := a.get(ctx)
		if err != nil {
			continue
		}
		var n int
		err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
			FROM pg_stat_activity WHERE usename = $1 AND random() < 0.5`, pgtest.PasswordRole).Scan(&n)
		if err != nil {
			a.broken()
			continue
		}
		f.env.stats.faultN("backend-kill", n)
		f.env.stats.fault("kill-round")
	}
}

// injectRestarts restarts the server (pg_ctl restart -m fast) 1.75 s into
// the scenario and then every 2.25 s.
func injectRestarts(ctx context.Context, f *faultEnv) {
	next := time.Now().Add(1750 * time.Millisecond)
	for {
		if !sleepCtx(ctx, time.Until(next)) {
			return
		}
		next = time.Now().Add(2250 * time.Millisecond)
		if err := f.cl.Restart("fast"); err != nil {
			f.env.violate(nil, "harness", "restart failed: "+err.Error(), nil)
			return
		}
		f.env.stats.fault("restart")
	}
}

// injectLockStalls takes a write-blocking lock on one of durable's tables
// for 10–80 ms every 100–300 ms, so that statements wait and hit their
// statement_timeout while in flight.
func injectLockStalls(ctx context.Context, f *faultEnv) {
	f.env.stats.fault("statement-timeout")
	a := &adminConn{cl: f.cl}
	defer a.close()
	tables := []string{"leases", "workflows", "idempotency_keys"}
	for sleepCtx(ctx, 100*time.Millisecond+time.Duration(f.rng.Int64N(int64(200*time.Millisecond)))) {
		conn, err := a.get(ctx)
		if err != nil {
			continue
		}
		tbl := tables[f.rng.IntN(len(tables))]
		hold := 0.01 + f.rng.Float64()*0.07
		_, err = conn.Exec(ctx, fmt.Sprintf(`BEGIN; LOCK TABLE "%s".%s IN SHARE ROW EXCLUSIVE MODE; SELECT pg_sleep(%f); COMMIT`,
			f.schema, tbl, hold))
		if err != nil {
			a.broken()
			continue
		}
		f.env.stats.fault("lock-stall")
	}
}

// injectProxyFaults resets a fraction of the proxied connections every
// 200–400 ms and freezes all traffic (connections stay open) at the
// scenario's moments.
func injectProxyFaults(ctx context.Context, f *faultEnv) {
	f.env.stats.fault("latency")
	sc := f.env.sc
	next := time.Now().Add(sc.freezeFirst)
	for {
		if !sleepCtx(ctx, 200*time.Millisecond+time.Duration(f.rng.Int64N(int64(200*time.Millisecond)))) {
			return
		}
		if sc.freezeFor > 0 && time.Now().After(next) {
			next = next.Add(sc.freezeEvery)
			if f.proxy.Freeze() {
				f.env.stats.fault("freeze")
				ok := sleepCtx(ctx, f.env.sc.freezeFor)
				f.proxy.Thaw()
				if !ok {
					return
				}
			}
			continue
		}
		if f.env.sc.resetFrac > 0 {
			f.env.stats.faultN("reset", f.proxy.Reset(f.env.sc.resetFrac))
		}
	}
}

// dumpHistories writes every history, one op per line, to the artifacts
// directory.
func dumpHistories(t *testing.T, e *env, hists []*hist) {
	var b bytes.Buffer
	for _, h := range hists {
		fmt.Fprintf(&b, "=== %s/%s history %d\n", e.driver, e.sc.name, h.n)
		for _, o := range h.rec.Snapshot() {
			fmt.Fprintf(&b, "%s\n", o)
		}
	}
	path := fmt.Sprintf("%s/history-%s-%s.txt", artifacts(t), e.driver, e.sc.name)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Logf("writing %s: %v", path, err)
	}
}
