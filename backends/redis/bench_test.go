package redis

// Benchmarks of the backend's operations on a private redis-server node,
// beside their ceiling: the raw go-redis client sending the same scripts
// (EVALSHA, the same keys and arguments, on the same client) with none of
// the backend's own work around them. The comparison with redsync and
// bsm/redislock lives in the nested module internal/compare, so that those
// libraries (and the module graph they bring) stay out of the root
// go.mod. BENCHMARKS.md records the figures and the commands.
//
//	go test -run '^$' -bench . -benchtime 3s ./backends/redis/
//
// Every benchmark runs on a node with appendfsync always and on one with
// appendfsync everysec (both appendonly yes, noeviction), at 1 client (a
// plain loop) and 16 (RunParallel with SetParallelism(16/GOMAXPROCS)),
// each client on a resource, key or workflow of its own: no contention,
// the cost of the round trip and of the script.

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/outcomecodec"
	"github.com/durable-go/durable/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
)

// benchFsyncs are the node configurations every benchmark runs on.
var benchFsyncs = []string{"always", "everysec"}

// benchClients are the client counts every benchmark runs at.
var benchClients = []int{1, 16}

// benchEnv is one node, one client of it and a backend on that client.
type benchEnv struct {
	rdb *goredis.Client
	b   *Backend
}

func newBenchEnv(b *testing.B, fsync string) *benchEnv {
	b.Helper()
	srv := redistest.Start(b, redistest.Options{AppendFsync: fsync})
	// The backend's own client settings (dsn.go): no retries, deadlines
	// from the context. The default pool (10 per CPU) exceeds 16 clients.
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = rdb.Close() })
	be, err := NewBackend(rdb, Options{Prefix: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() })
	return &benchEnv{rdb: rdb, b: be}
}

// runClients runs op b.N times over n clients: a plain loop for one, else
// RunParallel with n/GOMAXPROCS goroutines per CPU. Each client gets its
// own index (for its own resource, key or workflow) and a setup run before
// the timer starts. It reports the rate as unit ("pairs/s" or "ops/s").
//
// It also reports what the servers (nodes: every primary) spent per
// operation, which the shared machine's noise moves less than the rate:
// "srv-µs/op", the server processes' CPU time (INFO cpu, all their
// threads), and "script-µs/op", the time the servers measured inside
// EVALSHA and EVAL (INFO commandstats: the scripts and the commands they
// call).
func runClients(b *testing.B, nodes []*goredis.Client, n int, unit string, setup func(client int) func(i int) error) {
	b.Helper()
	ops := make([]func(int) error, n)
	for c := range ops {
		ops[c] = setup(c)
	}
	before := readServerStats(b, nodes)
	b.ResetTimer()
	if n == 1 {
		for i := 0; i < b.N; i++ {
			if err := ops[0](i); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		p := n / runtime.GOMAXPROCS(0)
		if p < 1 || p*runtime.GOMAXPROCS(0) != n {
			b.Skipf("%d clients need GOMAXPROCS to divide %d (it is %d)", n, n, runtime.GOMAXPROCS(0))
		}
		b.SetParallelism(p)
		var next atomic.Int64
		var failed sync.Once
		b.RunParallel(func(pb *testing.PB) {
			op := ops[int(next.Add(1)-1)%n]
			for i := 0; pb.Next(); i++ {
				if err := op(i); err != nil {
					failed.Do(func() { b.Error(err) })
					return
				}
			}
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
	after := readServerStats(b, nodes)
	b.ReportMetric((after.cpu-before.cpu)*1e6/float64(b.N), "srv-µs/op")
	b.ReportMetric((after.script-before.script)/float64(b.N), "script-µs/op")
}

// serverStats are a node's counters that runClients reports per operation.
type serverStats struct {
	cpu    float64 // seconds of CPU, user and system
	script float64 // µs spent in EVALSHA and EVAL
}

func readServerStats(b *testing.B, nodes []*goredis.Client) serverStats {
	b.Helper()
	var st serverStats
	for _, rdb := range nodes {
		st.add(b, rdb)
	}
	return st
}

func (st *serverStats) add(b *testing.B, rdb *goredis.Client) {
	info, err := rdb.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch name {
		case "used_cpu_user", "used_cpu_sys":
			f, _ := strconv.ParseFloat(val, 64)
			st.cpu += f
		case "cmdstat_evalsha", "cmdstat_eval":
			for _, kv := range strings.Split(val, ",") {
				if k, v, ok := strings.Cut(kv, "="); ok && k == "usec" {
					f, _ := strconv.ParseFloat(v, 64)
					st.script += f
				}
			}
		}
	}
}

// eachConfig runs fn under fsync=…/clients=… for every configuration, on a
// node started once per fsync setting.
func eachConfig(b *testing.B, fn func(b *testing.B, env *benchEnv, clients int)) {
	for _, fsync := range benchFsyncs {
		b.Run("fsync="+fsync, func(b *testing.B) {
			env := newBenchEnv(b, fsync)
			for _, n := range benchClients {
				b.Run("clients="+strconv.Itoa(n), func(b *testing.B) { fn(b, env, n) })
			}
		})
	}
}

var benchSeq atomic.Int64

// benchScope is a scope no other benchmark run uses.
func benchScope() contract.Scope { return contract.Scope(fmt.Sprintf("bench%d", benchSeq.Add(1))) }

// --- the ceiling: the same scripts, sent by the raw client ---
//
// These mirror the calls in ops.go (keys, arguments, reply positions);
// TestBenchCeilingSendsTheBackendsCommands checks that they send what the
// backend sends, so a change of a script's arguments fails it.

func ceilingAcquire(ctx context.Context, be *Backend, scope contract.Scope, res, owner string, ttl time.Duration) (string, error) {
	base := be.base(scope)
	v, err := leaseAcquire.Run(ctx, be.single, []string{base + "l:" + res, base + "t:" + res},
		base, "", res, owner, us(ttl), be.tol(), nonce(), "", res).Slice()
	if err != nil {
		return "", err
	}
	if len(v) < 2 || v[0] != "ok" {
		return "", fmt.Errorf("ceiling acquire: reply %v", v)
	}
	tok, ok := v[1].(int64)
	if !ok {
		return "", fmt.Errorf("ceiling acquire: token %v", v[1])
	}
	return strconv.FormatInt(tok, 10), nil
}

func ceilingRelease(ctx context.Context, be *Backend, scope contract.Scope, res, owner, tok string) error {
	base := be.base(scope)
	n, err := leaseRelease.Run(ctx, be.single, []string{base + "l:" + res}, base, "", res, owner, tok, res).Int64()
	if err == nil && n != 1 {
		err = fmt.Errorf("ceiling release: reply %d", n)
	}
	return err
}

func ceilingClaim(ctx context.Context, be *Backend, scope contract.Scope, key string, ttl time.Duration) (string, error) {
	base := be.base(scope)
	v, err := keyClaim.Run(ctx, be.single, []string{base + "k:" + key}, base, "", key, "sha256:bench", "", us(ttl), nonce(), be.tol()).Slice()
	if err != nil {
		return "", err
	}
	if len(v) < 2 || v[0] != "new" {
		return "", fmt.Errorf("ceiling claim: reply %v", v)
	}
	tok, _ := v[1].(string)
	return tok, nil
}

func ceilingComplete(ctx context.Context, be *Backend, scope contract.Scope, key, tok string, o contract.Outcome, retain, tomb time.Duration) error {
	base := be.base(scope)
	blob := outcomecodec.AppendOutcome(make([]byte, 0, outcomecodec.OutcomeLen(&o)), &o)
	v, err := keyComplete.Run(ctx, be.single, []string{base + "k:" + key}, base, "", key, tok, blob,
		strconv.Itoa(o.Code), us(retain), us(tomb), "", "", "", be.tol()).Slice()
	if err == nil && (len(v) < 1 || v[0] != "ok") {
		err = fmt.Errorf("ceiling complete: reply %v", v)
	}
	return err
}

func ceilingUpdate(ctx context.Context, be *Backend, scope contract.Scope, id string, rev int64, snap []byte) (int64, error) {
	base := be.base(scope)
	v, err := wfUpdate.Run(ctx, be.single, []string{base + "w:" + id}, base, "", id, string(contract.StatusRunning),
		strconv.FormatInt(rev, 10), "", "", "", be.tol(), string(contract.StatusRunning), "", snap, nonce()).Slice()
	if err != nil {
		return 0, err
	}
	if len(v) < 4 || v[0] != "ok" {
		return 0, fmt.Errorf("ceiling update: reply %v", v)
	}
	s, _ := v[3].(string)
	return strconv.ParseInt(s, 10, 64)
}

// --- the benchmarks ---

const benchTTL = 30 * time.Second

// BenchmarkLeasePair: AcquireLease then ReleaseLease of the client's own
// resource (a fenced grant: a new token each time), through the backend
// and through the raw client.
func BenchmarkLeasePair(b *testing.B) {
	ctx := context.Background()
	eachConfig(b, func(b *testing.B, env *benchEnv, n int) {
		b.Run("backend", func(b *testing.B) {
			scope := benchScope()
			runClients(b, []*goredis.Client{env.rdb}, n, "pairs/s", func(c int) func(int) error {
				req := contract.LeaseRequest{Scope: scope, Resource: "r" + strconv.Itoa(c), Owner: "o" + strconv.Itoa(c), TTL: benchTTL}
				return func(int) error {
					l, err := env.b.AcquireLease(ctx, req)
					if err != nil {
						return err
					}
					ok, err := env.b.ReleaseLease(ctx, l)
					if err == nil && !ok {
						err = fmt.Errorf("release of a held lease reported false")
					}
					return err
				}
			})
		})
		b.Run("ceiling", func(b *testing.B) {
			scope := benchScope()
			if err := env.b.register(ctx, scope); err != nil {
				b.Fatal(err)
			}
			runClients(b, []*goredis.Client{env.rdb}, n, "pairs/s", func(c int) func(int) error {
				res, owner := "r"+strconv.Itoa(c), "o"+strconv.Itoa(c)
				return func(int) error {
					tok, err := ceilingAcquire(ctx, env.b, scope, res, owner, benchTTL)
					if err != nil {
						return err
					}
					return ceilingRelease(ctx, env.b, scope, res, owner, tok)
				}
			})
		})
	})
}

// issue28Acquire and issue28Release are leaseAcquire and leaseRelease as
// issue 28 left them (commit b0bca16), frozen: the baseline of
// BenchmarkLeaseScriptsSinceIssue28.
var (
	issue28Acquire = script(`
local k, res = KEYS[1], ARGV[3]
local now = clock(ARGV[2])
local l = redis.call('HMGET', k, 'o', 't', 'a', 'e', 'n')
if l[1] then
  if ARGV[7] ~= '' and l[5] == ARGV[7] then return {'ok', l[1], l[2], l[3], l[4]} end
  if not (tonumber(l[4]) + tonumber(ARGV[6]) < now) then return {'busy'} end
end
if num(redis.call('GET', KEYS[2])) >= 9007199254740992 or num(l[2]) >= 9007199254740992 then return {'exhausted'} end
local tok = redis.call('INCR', KEYS[2])
if tok <= num(l[2]) then
  tok = num(l[2]) + 1
  redis.call('SET', KEYS[2], f(tok))
end
tok = f(tok)
local e = f(now + tonumber(ARGV[5]))
redis.call('HSET', k, 'o', ARGV[4], 't', tok, 'a', f(now), 'e', e, 'n', ARGV[7])
-- A no-op once the resource is listed: a released lease leaves its entry
-- (see leaseRelease), so a resource leased again costs no index write.
redis.call('ZADD', base .. 'i:l', 0, res)
return {'ok', ARGV[4], tok, f(now), e}
`)
	issue28Release = script(`
local l = redis.call('HMGET', KEYS[1], 'o', 't')
if l[1] ~= ARGV[4] or l[2] ~= ARGV[5] then return 0 end
return redis.call('DEL', KEYS[1])
`)
)

// BenchmarkLeaseScriptsSinceIssue28: the lease pair's scripts as issue 28
// left them and as they are now (the ceiling's calls), sent by the same
// raw client code, so that only the scripts differ. With -count N the
// two alternate N times on each node.
func BenchmarkLeaseScriptsSinceIssue28(b *testing.B) {
	ctx := context.Background()
	eachConfig(b, func(b *testing.B, env *benchEnv, n int) {
		b.Run("issue28", func(b *testing.B) {
			scope := benchScope()
			base := env.b.base(scope)
			runClients(b, []*goredis.Client{env.rdb}, n, "pairs/s", func(c int) func(int) error {
				res, owner := "r"+strconv.Itoa(c), "o"+strconv.Itoa(c)
				return func(int) error {
					v, err := issue28Acquire.Run(ctx, env.rdb, []string{base + "l:" + res, base + "t:" + res},
						base, "", res, owner, us(benchTTL), env.b.tol(), nonce()).Slice()
					if err != nil {
						return err
					}
					if len(v) < 3 || v[0] != "ok" {
						return fmt.Errorf("issue 28 acquire: reply %v", v)
					}
					return issue28Release.Run(ctx, env.rdb, []string{base + "l:" + res}, base, "", res, owner, v[2]).Err()
				}
			})
		})
		b.Run("now", func(b *testing.B) {
			scope := benchScope()
			runClients(b, []*goredis.Client{env.rdb}, n, "pairs/s", func(c int) func(int) error {
				res, owner := "r"+strconv.Itoa(c), "o"+strconv.Itoa(c)
				return func(int) error {
					tok, err := ceilingAcquire(ctx, env.b, scope, res, owner, benchTTL)
					if err != nil {
						return err
					}
					return ceilingRelease(ctx, env.b, scope, res, owner, tok)
				}
			})
		})
	})
}

// BenchmarkLeasePairWatch: AcquireLease then ReleaseLease through the
// backend, each client on a resource and scope of its own, on one node
// and on a 3-master cluster (both appendfsync everysec), with the
// resources' watch marks in three states:
//
//	unwatched  no mark: each script checks it (EXISTS) and publishes nothing
//	marked     the mark set by hand and nobody subscribed: each grant and
//	           release PUBLISHes to no subscriber, which is what publishing
//	           on every grant and release regardless would cost (plus the EXISTS)
//	watched    a WatchLease of each resource (another backend on the same
//	           client): each grant and release PUBLISHes to a subscriber
//
// srv-µs/op and script-µs/op sum every primary: on a cluster, a PUBLISH
// reaches every node (classic pub/sub), which pays for it too.
func BenchmarkLeasePairWatch(b *testing.B) {
	for _, on := range []string{"node", "cluster"} {
		b.Run("on="+on, func(b *testing.B) {
			var rdb goredis.UniversalClient
			var nodes []*goredis.Client
			var addrs []string
			if on == "node" {
				addrs = []string{redistest.Start(b, redistest.Options{AppendFsync: "everysec"}).Addr()}
				rdb = goredis.NewClient(&goredis.Options{Addr: addrs[0], MaxRetries: -1, ContextTimeoutEnabled: true})
			} else {
				cl := redistest.StartCluster(b, redistest.ClusterOptions{Masters: 3, Node: redistest.Options{AppendFsync: "everysec"}})
				addrs = cl.Addrs()
				rdb = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, MaxRetries: -1, ContextTimeoutEnabled: true})
			}
			b.Cleanup(func() { _ = rdb.Close() })
			for _, a := range addrs {
				c := goredis.NewClient(&goredis.Options{Addr: a})
				b.Cleanup(func() { _ = c.Close() })
				nodes = append(nodes, c)
			}
			be, err := NewBackend(rdb, Options{Prefix: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = be.Close() })
			watcher, err := NewBackend(rdb, Options{Prefix: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = watcher.Close() })
			ctx := context.Background()
			for _, n := range benchClients {
				for _, mode := range []string{"unwatched", "marked", "watched"} {
					b.Run("clients="+strconv.Itoa(n)+"/"+mode, func(b *testing.B) {
						wctx, stop := context.WithCancel(ctx)
						defer stop()
						runClients(b, nodes, n, "pairs/s", func(c int) func(int) error {
							scope := benchScope()
							req := contract.LeaseRequest{Scope: scope, Resource: "r", Owner: "o", TTL: benchTTL}
							switch mode {
							case "marked":
								if err := rdb.Set(ctx, be.base(scope)+"m:r", "1", time.Hour).Err(); err != nil {
									b.Fatal(err)
								}
							case "watched":
								if _, err := watcher.WatchLease(wctx, scope, "r"); err != nil {
									b.Fatal(err)
								}
							}
							return func(int) error {
								l, err := be.AcquireLease(ctx, req)
								if err != nil {
									return err
								}
								ok, err := be.ReleaseLease(ctx, l)
								if err == nil && !ok {
									err = fmt.Errorf("release of a held lease reported false")
								}
								return err
							}
						})
					})
				}
			}
		})
	}
}

// BenchmarkKeyPair: ClaimKey of a new key then CompleteKey with a 256-byte
// body, retained an hour (as durable bench does).
func BenchmarkKeyPair(b *testing.B) {
	ctx := context.Background()
	body := make([]byte, 256)
	out := contract.Outcome{Code: 201, Body: body}
	const retain, tomb = time.Hour, 7 * 24 * time.Hour
	eachConfig(b, func(b *testing.B, env *benchEnv, n int) {
		b.Run("backend", func(b *testing.B) {
			scope := benchScope()
			runClients(b, []*goredis.Client{env.rdb}, n, "pairs/s", func(c int) func(int) error {
				prefix := "k" + strconv.Itoa(c) + "-"
				return func(i int) error {
					ref := contract.KeyRef{Scope: scope, Key: prefix + strconv.Itoa(i)}
					cl, err := env.b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "sha256:bench", TTL: benchTTL})
					if err != nil {
						return err
					}
					if cl.Kind != contract.ClaimNew {
						return fmt.Errorf("claim of a new key: %v", cl.Kind)
					}
					_, err = env.b.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: cl.Token, Outcome: out, Retain: retain, Tombstone: tomb})
					return err
				}
			})
		})
		b.Run("ceiling", func(b *testing.B) {
			scope := benchScope()
			if err := env.b.register(ctx, scope); err != nil {
				b.Fatal(err)
			}
			runClients(b, []*goredis.Client{env.rdb}, n, "pairs/s", func(c int) func(int) error {
				prefix := "k" + strconv.Itoa(c) + "-"
				return func(i int) error {
					key := prefix + strconv.Itoa(i)
					tok, err := ceilingClaim(ctx, env.b, scope, key, benchTTL)
					if err != nil {
						return err
					}
					return ceilingComplete(ctx, env.b, scope, key, tok, out, retain, tomb)
				}
			})
		})
	})
}

// BenchmarkUpdateWorkflow: a compare-and-set of the client's own workflow
// (status and revision checked) with a 1 KiB snapshot.
func BenchmarkUpdateWorkflow(b *testing.B) {
	ctx := context.Background()
	snap := make([]byte, 1024)
	create := func(b *testing.B, env *benchEnv, scope contract.Scope, c int) (string, int64) {
		id := "w" + strconv.Itoa(c)
		w, err := env.b.CreateWorkflow(ctx, contract.Workflow{Scope: scope, ID: id, Status: contract.StatusRunning})
		if err != nil {
			b.Fatal(err)
		}
		return id, w.Revision
	}
	eachConfig(b, func(b *testing.B, env *benchEnv, n int) {
		b.Run("backend", func(b *testing.B) {
			scope := benchScope()
			runClients(b, []*goredis.Client{env.rdb}, n, "ops/s", func(c int) func(int) error {
				id, rev := create(b, env, scope, c)
				return func(int) error {
					w, err := env.b.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: id, ExpectStatus: contract.StatusRunning,
						ExpectRevision: rev, Status: contract.StatusRunning, Snapshot: snap})
					rev = w.Revision
					return err
				}
			})
		})
		b.Run("ceiling", func(b *testing.B) {
			scope := benchScope()
			runClients(b, []*goredis.Client{env.rdb}, n, "ops/s", func(c int) func(int) error {
				id, rev := create(b, env, scope, c)
				return func(int) error {
					var err error
					rev, err = ceilingUpdate(ctx, env.b, scope, id, rev, snap)
					return err
				}
			})
		})
	})
}

// --- the ceiling sends what the backend sends ---

// evalRecorder is a go-redis hook that records the arguments of every
// EVALSHA and EVAL the client sends.
type evalRecorder struct {
	mu   sync.Mutex
	cmds [][]any
}

func (r *evalRecorder) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r *evalRecorder) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			r.mu.Lock()
			r.cmds = append(r.cmds, append([]any(nil), cmd.Args()...))
			r.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (r *evalRecorder) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (r *evalRecorder) take() [][]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cmds
	r.cmds = nil
	return c
}

// isNonce reports whether v is a request id as nonce() makes them.
func isNonce(v any) bool {
	s := fmt.Sprint(v)
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// sameCommands compares the backend's commands with the ceiling's: the
// same script hash, keys and arguments, but for random request ids and
// the fencing token, which differ between two grants.
func sameCommands(t *testing.T, what string, backend, ceiling [][]any, token string) {
	t.Helper()
	if len(backend) != len(ceiling) {
		t.Fatalf("%s: the backend sent %d scripts, the ceiling %d:\n%v\n%v", what, len(backend), len(ceiling), backend, ceiling)
	}
	for i := range backend {
		a, c := backend[i], ceiling[i]
		if len(a) != len(c) {
			t.Fatalf("%s, script %d: the backend sent %d arguments, the ceiling %d:\n%v\n%v", what, i, len(a), len(c), a, c)
		}
		for j := range a {
			x, y := fmt.Sprint(a[j]), fmt.Sprint(c[j])
			if x == y || (isNonce(x) && isNonce(y)) || (token != "" && x == token) {
				continue
			}
			t.Fatalf("%s, script %d, argument %d: the backend sent %q, the ceiling %q:\n%v\n%v", what, i, j, x, y, a, c)
		}
	}
}

// TestBenchCeilingSendsTheBackendsCommands: the ceiling's calls send the
// scripts, keys and arguments the backend sends for the same request, so
// that the ceiling measures the same work on the server.
func TestBenchCeilingSendsTheBackendsCommands(t *testing.T) {
	srv := sharedNode(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	rec := &evalRecorder{}
	rdb.AddHook(rec)
	prefix := freshPrefix()
	// Coalescing off: the scripts go through the client, where rec sees
	// them (on the shared connection they are the same EVALSHA, encoded
	// as go-redis would: TestEvalShaCommandIsGoRedisEncoding).
	be, err := NewBackend(rdb, Options{Prefix: prefix, Coalesce: CoalesceOff})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	defer func() { _ = deletePrefix(context.Background(), rdb, prefix+":") }()
	ctx := context.Background()
	scope := contract.Scope("s")
	// Load the scripts first, so that no EVALSHA meets NOSCRIPT (and is
	// followed by an EVAL) on either side.
	for _, s := range []*goredis.Script{leaseAcquire, leaseRelease, keyClaim, keyComplete, wfUpdate} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}

	l, err := be.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "r", Owner: "o", TTL: benchTTL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := be.ReleaseLease(ctx, l); err != nil {
		t.Fatal(err)
	}
	backend := rec.take()
	tok, err := ceilingAcquire(ctx, be, scope, "r", "o", benchTTL)
	if err != nil {
		t.Fatal(err)
	}
	if tok != strconv.FormatInt(l.Token+1, 10) {
		t.Fatalf("the ceiling's grant has token %s after the backend's %d", tok, l.Token)
	}
	if err := ceilingRelease(ctx, be, scope, "r", "o", tok); err != nil {
		t.Fatal(err)
	}
	sameCommands(t, "lease pair", backend, rec.take(), strconv.FormatInt(l.Token, 10))

	out := contract.Outcome{Code: 201, Body: []byte("body")}
	ref := contract.KeyRef{Scope: scope, Key: "k"}
	c, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "sha256:bench", TTL: benchTTL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := be.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: c.Token, Outcome: out, Retain: time.Hour, Tombstone: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	backend = rec.take()
	if ok, err := be.DeleteRecord(ctx, contract.KindKey, scope, "k"); err != nil || !ok {
		t.Fatalf("deleting the key: %v %v", ok, err)
	}
	rec.take()
	ktok, err := ceilingClaim(ctx, be, scope, "k", benchTTL)
	if err != nil {
		t.Fatal(err)
	}
	if err := ceilingComplete(ctx, be, scope, "k", ktok, out, time.Hour, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	sameCommands(t, "key pair", backend, rec.take(), "")

	w, err := be.CreateWorkflow(ctx, contract.Workflow{Scope: scope, ID: "w", Status: contract.StatusRunning})
	if err != nil {
		t.Fatal(err)
	}
	rec.take()
	snap := []byte("snapshot")
	w, err = be.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: "w", ExpectStatus: contract.StatusRunning,
		ExpectRevision: w.Revision, Status: contract.StatusRunning, Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	backend = rec.take()
	// The ceiling's update expects the revision the backend's made; the
	// backend's expected the one before, so that argument differs by one.
	rev, err := ceilingUpdate(ctx, be, scope, "w", w.Revision, snap)
	if err != nil {
		t.Fatal(err)
	}
	if rev != w.Revision+1 {
		t.Fatalf("the ceiling's update made revision %d after %d", rev, w.Revision)
	}
	got := rec.take()
	sameCommands(t, "update", backend, got, strconv.FormatInt(w.Revision-1, 10))
}
