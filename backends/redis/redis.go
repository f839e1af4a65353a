package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/multierr"
)

func init() {
	durable.Register("redis", driver{})
	durable.Register("rediss", driver{})
}

// DefaultTolerance is the clock tolerance when the DSN or Options give none.
const DefaultTolerance = time.Second

// DefaultPrefix is the key prefix when the DSN or Options give none.
const DefaultPrefix = "durable"

// DefaultPollFloor is how often a WaitKey reads the key again when no
// message woke it (see Options.PollFloor).
const DefaultPollFloor = time.Second

// DefaultWaitTimeout bounds WAIT when Options.Wait is set and
// Options.WaitTimeout is not.
const DefaultWaitTimeout = time.Second

// Options configures a backend built with [New] or [NewBackend] over a
// client the caller owns.
type Options struct {
	// Prefix is the key prefix (default "durable"): every key of the
	// store starts with Prefix + ":". 1–64 bytes of [A-Za-z0-9_.:-].
	Prefix string
	// Tolerance is the clock tolerance (default 1 s, at most 1 h).
	Tolerance time.Duration
	// Wait, when positive, makes every write wait, on the same connection,
	// for that many replicas to acknowledge it (Redis WAIT), for at most
	// WaitTimeout (default 1 s). Fewer acknowledgements are reported as
	// OutcomeUnknown, never success.
	Wait        int
	WaitTimeout time.Duration
	// PollFloor is how long a WaitKey sleeps at most between two reads of
	// the key when no pub/sub message woke it (default 1 s): what a lost
	// message costs.
	PollFloor time.Duration
	// Coalesce says how scripts sent at the same time to one node travel
	// (see the package documentation, "Shared connections"): CoalesceOn,
	// the default, CoalescePipeline or CoalesceOff.
	Coalesce CoalesceMode
	// CoalesceInFlight is how many pipelines may be in flight at once per
	// node with CoalescePipeline (and with CoalesceOn where it pipelines),
	// each on a pooled connection (0: DefaultCoalesceInFlight; at most 64).
	CoalesceInFlight int
	// Clock, for tests only: when set, every script is given this clock's
	// time instead of reading the server's (TIME), so that a test can move
	// time (the conformance suite's manual clock). Production code leaves
	// it nil: expiry is then judged on the Redis server's clock alone.
	Clock contract.Clock
}

// Backend is a durable backend on Redis (one node, or a Redis Cluster).
// It implements contract.Backend and the optional capabilities KeyWaiter,
// ToleranceReporter, CleanupCounter, RecordDeleter, RecordLister,
// LeaseRenewer, PermitAcquirer, LeaseWatcher, SystemNamer, Doctor and
// TxCompleter. Use it through a [durable.Store]
// ([Open], [New]); [NewBackend] returns it raw.
type Backend struct {
	rdb     goredis.UniversalClient
	single  *goredis.Client        // one node
	cluster *goredis.ClusterClient // or a cluster
	owns    bool
	prefix  string // ends with ":"
	opts    Options
	tolArg  string // us(opts.Tolerance)

	scopes   sync.Map // scopes known to be in the registry
	batchers sync.Map // node address → *coalesce.Batcher[runItem, any]
	muxes    sync.Map // node address → *mux (nil: the node's options need the pooled path)

	closed atomic.Bool
	done   chan struct{}
	subMu  sync.Mutex
	sub    *subscriber

	markMu       sync.Mutex
	marks        map[string]*markRef // the watch marks this backend keeps alive
	marking      bool                // refreshMarks is running
	watchMarkTTL time.Duration       // for tests; 0: DefaultWatchMarkTTL
	newMuxHook   func(*mux)          // for tests: called with each shared connection made
	muxAlone     bool                // for tests: a script alone goes on the shared connection too
}

var (
	_ contract.Backend           = (*Backend)(nil)
	_ contract.KeyWaiter         = (*Backend)(nil)
	_ contract.ToleranceReporter = (*Backend)(nil)
	_ contract.CleanupCounter    = (*Backend)(nil)
	_ contract.RecordDeleter     = (*Backend)(nil)
	_ contract.RecordLister      = (*Backend)(nil)
	_ contract.LeaseRenewer      = (*Backend)(nil)
	_ contract.SystemNamer       = (*Backend)(nil)
	_ contract.Doctor            = (*Backend)(nil)
	_ contract.PermitAcquirer    = (*Backend)(nil)
	_ contract.LeaseWatcher      = (*Backend)(nil)
)

// New returns a Store on rdb (a *goredis.Client or *goredis.ClusterClient
// the caller keeps and closes after the Store). Reach the *Backend with
// store.As.
func New(rdb goredis.UniversalClient, opts Options, storeOpts ...durable.Option) (*durable.Store, error) {
	b, err := NewBackend(rdb, opts)
	if err != nil {
		return nil, err
	}
	s, err := durable.New(b, storeOpts...)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	return s, nil
}

// NewBackend returns the raw backend on rdb, a *goredis.Client or a
// *goredis.ClusterClient that the caller keeps and closes after the
// backend: the contract.Backend for conformance harnesses and decorators.
// Its methods skip the Store's validation, defaults and time bounds.
//
// The client should not retry commands by itself (MaxRetries -1): a
// retried write whose first attempt applied is reported honestly only if
// the backend sees the failure. Every write is conditional, and ClaimKey,
// AcquireLease, CreateWorkflow and UpdateWorkflow recognise their own
// retried request, but ReleaseKey and ReleaseLease would report false.
func NewBackend(rdb goredis.UniversalClient, opts Options) (*Backend, error) {
	return newBackend(rdb, false, opts)
}

func newBackend(rdb goredis.UniversalClient, owns bool, opts Options) (*Backend, error) {
	b := &Backend{rdb: rdb, owns: owns, done: make(chan struct{})}
	switch c := rdb.(type) {
	case *goredis.Client:
		b.single = c
	case *goredis.ClusterClient:
		b.cluster = c
	default:
		return nil, invalid("the client must be a *goredis.Client or a *goredis.ClusterClient")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !validPrefix(opts.Prefix) {
		return nil, invalid("prefix must be 1-64 bytes of [A-Za-z0-9_.:-]")
	}
	if opts.Tolerance < 0 || opts.Tolerance > time.Hour {
		return nil, invalid("tolerance must be between 0s and 1h")
	}
	if opts.Wait < 0 || opts.WaitTimeout < 0 || opts.PollFloor < 0 {
		return nil, invalid("wait, wait_timeout and poll_floor must not be negative")
	}
	if opts.Coalesce < CoalesceOn || opts.Coalesce > CoalescePipeline {
		return nil, invalid("coalesce must be CoalesceOn, CoalescePipeline or CoalesceOff")
	}
	if opts.CoalesceInFlight < 0 || opts.CoalesceInFlight > maxCoalesceInFlight {
		return nil, invalid("coalesce_inflight must be from 1 to 64 (0: the default)")
	}
	if opts.WaitTimeout == 0 {
		opts.WaitTimeout = DefaultWaitTimeout
	}
	if opts.PollFloor == 0 {
		opts.PollFloor = DefaultPollFloor
	}
	b.opts = opts
	b.prefix = opts.Prefix + ":"
	b.tolArg = us(opts.Tolerance)
	return b, nil
}

func invalid(msg string) error {
	return &contract.Error{Code: contract.InvalidArgument, Msg: "redis: " + msg}
}

func validPrefix(p string) bool {
	if len(p) == 0 || len(p) > 64 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if !safeByte(p[i]) {
			return false
		}
	}
	return true
}

func safeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-'
}

// Client returns the client the backend uses.
func (b *Backend) Client() goredis.UniversalClient { return b.rdb }

// Prefix returns the key prefix, ending in ":".
func (b *Backend) Prefix() string { return b.prefix }

// ClockTolerance implements contract.ToleranceReporter.
func (b *Backend) ClockTolerance() time.Duration { return b.opts.Tolerance }

// SystemName implements contract.SystemNamer.
func (*Backend) SystemName() string { return "redis" }

// Close wakes waiting WaitKey calls with Closed, signals every WatchLease
// channel once, closes the shared pub/sub connection and the backend's
// script connections (their scripts in flight fail as they would on a
// broken connection) and, when the
// backend was opened from a DSN, the client.
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	close(b.done)
	b.muxes.Range(func(_, v any) bool {
		if m := v.(*mux); m != nil {
			m.close()
		}
		return true
	})
	var err error
	b.subMu.Lock()
	if b.sub != nil {
		err = b.sub.close()
	}
	b.subMu.Unlock()
	if b.owns {
		err = multierr.Append(err, b.rdb.Close())
	}
	if err != nil {
		return &contract.Error{Code: contract.Unknown, Msg: "closing the redis client failed", Err: err}
	}
	return nil
}

func errClosed() error { return &contract.Error{Code: contract.Closed, Msg: "backend is closed"} }

// --- keys ---

// base returns the key base of a scope: "<prefix>{<tag>}:". The tag is
// "s" and the scope with every byte outside [A-Za-z0-9_.:-] written as
// %XX, so that no scope can close the hash tag early or make it empty,
// and two scopes never share a tag.
func (b *Backend) base(scope contract.Scope) string {
	var sb strings.Builder
	sb.Grow(len(b.prefix) + len(scope) + 5)
	sb.WriteString(b.prefix)
	sb.WriteString("{s")
	const hexd = "0123456789ABCDEF"
	for i := 0; i < len(scope); i++ {
		c := scope[i]
		if safeByte(c) {
			sb.WriteByte(c)
		} else {
			sb.WriteByte('%')
			sb.WriteByte(hexd[c>>4])
			sb.WriteByte(hexd[c&15])
		}
	}
	sb.WriteString("}:")
	return sb.String()
}

// registry is the sorted set of every scope that has ever held a record:
// Cleanup walks it.
func (b *Backend) registry() string { return b.prefix + "scopes" }

// register adds scope to the registry once per backend, before the first
// write that may create a record in it.
func (b *Backend) register(ctx context.Context, scope contract.Scope) error {
	if _, ok := b.scopes.Load(scope); ok {
		return nil
	}
	if err := b.rdb.ZAdd(ctx, b.registry(), goredis.Z{Member: string(scope)}).Err(); err != nil {
		return b.fail(ctx, err, false)
	}
	b.scopes.Store(scope, struct{}{})
	return nil
}

// now is the argument that carries the test clock, or "" for the
// server's clock.
func (b *Backend) now() string {
	if b.opts.Clock == nil {
		return ""
	}
	return strconv.FormatInt(b.opts.Clock.Now().UTC().Truncate(time.Microsecond).UnixMicro(), 10)
}

func us(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }

// tol is the clock tolerance as scripts take it (formatted once).
func (b *Backend) tol() string { return b.tolArg }

func nonce() string {
	var r [16]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// --- running scripts ---

// node returns the client of the node that owns key's slot.
func (b *Backend) node(ctx context.Context, key string) (*goredis.Client, error) {
	if b.single != nil {
		return b.single, nil
	}
	return b.cluster.MasterForKey(ctx, key)
}

// run runs s with keys and args on the node that owns keys[0] and returns
// its reply. write says whether the script may change anything: then, with
// Options.Wait, it is followed by WAIT on the same connection, and a
// failure after sending is OutcomeUnknown. With coalescing, the script goes
// on its node's shared connection (runMux) or through its node's pipeline
// batcher (flushRuns).
func (b *Backend) run(ctx context.Context, s *goredis.Script, write bool, keys []string, args ...any) (any, error) {
	if b.closed.Load() {
		return nil, errClosed()
	}
	if err := ctx.Err(); err != nil {
		return nil, &contract.Error{Code: contract.Canceled, Msg: "context ended", Err: err}
	}
	if b.opts.Coalesce == CoalesceOff {
		return b.runDirect(ctx, s, write, keys, args)
	}
	node, err := b.node(ctx, keys[0])
	if err != nil {
		return nil, b.fail(ctx, err, false)
	}
	if b.opts.Coalesce == CoalesceOn && b.opts.Wait == 0 {
		if m := b.mux(node); m != nil {
			defer m.busy.Add(-1)
			if m.busy.Add(1) == 1 && !b.muxAlone {
				// Alone: on a pooled connection, where the caller reads
				// its own reply (no hand-off from the mux's reader).
				return b.runDirect(ctx, s, write, keys, args)
			}
			return b.runMux(ctx, m, s, write, keys, args)
		}
	}
	return b.runCoalesced(ctx, b.batcher(node), runItem{node: node, s: s, write: write, keys: keys, args: args})
}

// runDirect is run without a batcher: the script alone on a pooled
// connection, sent again (at most 4 times) while a cluster redirects it.
func (b *Backend) runDirect(ctx context.Context, s *goredis.Script, write bool, keys []string, args []any) (any, error) {
	var last error
	for attempt := 0; attempt < 4; attempt++ {
		node, err := b.node(ctx, keys[0])
		if err != nil {
			return nil, b.fail(ctx, err, false)
		}
		var v any
		if write && b.opts.Wait > 0 {
			v, err = b.runWait(ctx, node, s, keys, args)
		} else {
			v, err = s.Run(ctx, node, keys, args...).Result()
		}
		if err == nil {
			return v, nil
		}
		if b.cluster != nil && redirected(err) && ctx.Err() == nil {
			// MOVED or ASK: the node did not run the script. Learn the
			// new slot map and send it to the slot's owner.
			last = err
			b.cluster.ReloadState(ctx)
			time.Sleep(time.Duration(attempt*50) * time.Millisecond)
			continue
		}
		var ce *contract.Error
		if errors.As(err, &ce) {
			return nil, err
		}
		return nil, b.fail(ctx, err, write)
	}
	return nil, b.fail(ctx, last, false)
}

func redirected(err error) bool {
	return goredis.HasErrorPrefix(err, "MOVED") || goredis.HasErrorPrefix(err, "ASK")
}

// runWait sends the script and WAIT in one pipeline on one connection of
// node, reloading the script once if the server lost it.
func (b *Backend) runWait(ctx context.Context, node *goredis.Client, s *goredis.Script, keys []string, args []any) (any, error) {
	for attempt := 0; ; attempt++ {
		pipe := node.Pipeline()
		ev := pipe.EvalSha(ctx, s.Hash(), keys, args...)
		w := pipe.Do(ctx, "WAIT", b.opts.Wait, b.opts.WaitTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		if err := ev.Err(); err != nil {
			if attempt == 0 && goredis.HasErrorPrefix(err, "NOSCRIPT") {
				if err := s.Load(ctx, node).Err(); err != nil {
					return nil, b.fail(ctx, err, false)
				}
				continue
			}
			return nil, err
		}
		if err := b.waitResult(w); err != nil {
			return nil, err
		}
		return ev.Val(), nil
	}
}

// fail maps a client error. Nothing in the message comes from the server
// or the caller: the cause stays reachable with errors.As.
func (b *Backend) fail(ctx context.Context, err error, write bool) error {
	if err == nil {
		return nil
	}
	if b.closed.Load() {
		return &contract.Error{Code: contract.Closed, Msg: "backend is closed", Err: err}
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) && !errors.Is(err, goredis.ErrClosed) {
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOPERM"):
			return &contract.Error{Code: contract.PermissionDenied, Msg: "redis refused the credentials or the user lacks a permission (check username, password and ACL rules: the backend needs EVALSHA, EVAL, SCRIPT LOAD, PUBLISH, SUBSCRIBE, PING, SET, ZADD and WAIT on its prefix)", Err: err}
		case strings.HasPrefix(msg, "OOM"):
			return &contract.Error{Code: contract.Unavailable, Msg: "redis refused the write: out of memory (maxmemory reached); nothing was applied", Err: err}
		case strings.HasPrefix(msg, "READONLY"), strings.HasPrefix(msg, "LOADING"), strings.HasPrefix(msg, "MASTERDOWN"),
			strings.HasPrefix(msg, "CLUSTERDOWN"), strings.HasPrefix(msg, "TRYAGAIN"), strings.HasPrefix(msg, "MOVED"),
			strings.HasPrefix(msg, "ASK"), strings.HasPrefix(msg, "BUSY"), strings.HasPrefix(msg, "NOSCRIPT"):
			return &contract.Error{Code: contract.Unavailable, Msg: "redis refused the request before running it (read-only replica, loading, cluster down or busy)", Err: err}
		case strings.HasPrefix(msg, "WRONGTYPE"):
			return &contract.Error{Code: contract.Corrupt, Msg: "a key under the prefix holds a value of the wrong type (written outside durable?)", Err: err}
		}
		return &contract.Error{Code: contract.Unknown, Msg: "redis reported an error", Err: err}
	}
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); cerr == nil && ok && !time.Now().Before(dl) {
		// go-redis sets the socket deadline from ctx, so a read can time
		// out an instant before ctx reports that it ended.
		cerr = context.DeadlineExceeded
	}
	if cerr != nil {
		if write {
			return &contract.Error{Code: contract.OutcomeUnknown, Msg: "context ended while the request was in flight", Err: multierr.Combine(cerr, err)}
		}
		return &contract.Error{Code: contract.Canceled, Msg: "context ended", Err: multierr.Combine(cerr, err)}
	}
	var op *net.OpError
	if errors.Is(err, goredis.ErrPoolTimeout) || errors.Is(err, goredis.ErrPoolExhausted) || (errors.As(err, &op) && op.Op == "dial") {
		return &contract.Error{Code: contract.Unavailable, Msg: "could not connect to redis; the request was not sent", Err: err}
	}
	if write {
		return &contract.Error{Code: contract.OutcomeUnknown, Msg: "redis request failed after it may have been sent", Err: err}
	}
	return &contract.Error{Code: contract.Unavailable, Msg: "redis request failed", Err: err}
}

func corrupt(what string) error {
	return &contract.Error{Code: contract.Corrupt, Msg: "stored " + what + " cannot be decoded (inspect it and delete it with durable delete)"}
}

func notFound(what string) error {
	return &contract.Error{Code: contract.NotFound, Msg: what + " not found"}
}

// --- decoding replies ---

// reply is a script's array reply, read in order.
type reply struct {
	v   []any
	i   int
	bad bool
}

func asReply(v any) *reply {
	a, ok := v.([]any)
	if !ok {
		return &reply{bad: true}
	}
	return &reply{v: a}
}

func (r *reply) str() string {
	if r.i >= len(r.v) {
		r.bad = true
		return ""
	}
	x := r.v[r.i]
	r.i++
	switch t := x.(type) {
	case string:
		return t
	case int64:
		return strconv.FormatInt(t, 10)
	}
	r.bad = true
	return ""
}

func (r *reply) int() int64 {
	if r.i < len(r.v) {
		if n, ok := r.v[r.i].(int64); ok {
			r.i++
			return n
		}
	}
	s := r.str()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.bad = true
	}
	return n
}

// time reads microseconds since the epoch; 0 is the zero time.
func (r *reply) time() time.Time {
	n := r.int()
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMicro(n).UTC()
}

func (r *reply) more() bool { return r.i < len(r.v) }
