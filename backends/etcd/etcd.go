package etcd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func init() {
	durable.Register("etcd", driver{})
}

// DefaultTolerance is the clock tolerance when the DSN or Options give none.
const DefaultTolerance = time.Second

// DefaultPrefix is the key prefix when the DSN has no path.
const DefaultPrefix = "durable"

// Options configures a backend built with [New] or [NewBackend] over a
// client the caller owns.
type Options struct {
	// Prefix is the key prefix (default "durable"); every key of the store
	// lives under Prefix + "/". Two stores with different prefixes share
	// nothing.
	Prefix string
	// Tolerance is the clock tolerance, a whole number of seconds (default
	// 1 s; 0 is allowed). See the package documentation.
	Tolerance time.Duration
}

// grantFunc grants an etcd lease of ttl seconds and returns its id and the
// TTL etcd granted. Tests replace it (see the conformance harness) to move
// etcd's notion of time.
type grantFunc func(ctx context.Context, cli *clientv3.Client, ttl int64, now time.Time) (clientv3.LeaseID, int64, error)

func defaultGrant(ctx context.Context, cli *clientv3.Client, ttl int64, _ time.Time) (clientv3.LeaseID, int64, error) {
	r, err := cli.Grant(ctx, ttl)
	if err != nil {
		return 0, 0, err
	}
	return r.ID, r.TTL, nil
}

// Backend is a durable backend on an etcd cluster. It implements
// contract.Backend and the optional capabilities KeyWaiter,
// ToleranceReporter, CleanupCounter, RecordDeleter, RecordLister,
// PermitAcquirer and LeaseWatcher. Use it through a [durable.Store]
// ([Open], [New]); [NewBackend] returns it raw.
type Backend struct {
	cli     *clientv3.Client
	ownsCli bool
	prefix  string
	tol     time.Duration
	now     contract.Clock // the time records report (CreatedAt, ExpiresAt, …); it never decides expiry
	grantFn grantFunc

	closed atomic.Bool
	done   chan struct{} // closed by Close
	bgMu   sync.Mutex    // orders revokeLater's Add with Close's Wait
	bg     sync.WaitGroup
	// minHold is the longest TTL (seconds) etcd ever granted for a shorter
	// request: the cluster's minimum lease TTL once learned, so later
	// grants ask for it at once.
	minGranted atomic.Int64
	// watches counts the running lease watches (WatchLease), for tests.
	watches atomic.Int64
}

var (
	_ contract.Backend           = (*Backend)(nil)
	_ contract.KeyWaiter         = (*Backend)(nil)
	_ contract.ToleranceReporter = (*Backend)(nil)
	_ contract.CleanupCounter    = (*Backend)(nil)
	_ contract.RecordDeleter     = (*Backend)(nil)
	_ contract.RecordLister      = (*Backend)(nil)
)

// New returns a Store on cli, a client the caller keeps and closes after
// the Store: the safe path, with the Store's validation, defaults, time
// bounds and helpers (storeOpts configure it). Reach the *Backend with
// store.As.
func New(cli *clientv3.Client, opts Options, storeOpts ...durable.Option) (*durable.Store, error) {
	b, err := NewBackend(cli, opts)
	if err != nil {
		return nil, err
	}
	return storeOn(b, storeOpts)
}

func storeOn(b *Backend, storeOpts []durable.Option) (*durable.Store, error) {
	s, err := durable.New(b, storeOpts...)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	return s, nil
}

// NewBackend returns the raw backend on cli, which the caller keeps and
// closes after the backend: the contract.Backend for conformance harnesses
// and decorators. Its methods skip the Store's validation, defaults and
// time bounds; applications use [New] (or durable.New on the result).
func NewBackend(cli *clientv3.Client, opts Options) (*Backend, error) {
	if cli == nil {
		return nil, &contract.Error{Code: contract.InvalidArgument, Msg: "etcd client is nil"}
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !validPrefix(opts.Prefix) {
		return nil, &contract.Error{Code: contract.InvalidArgument, Msg: "prefix must be 1-128 bytes of [A-Za-z0-9_.:/-] and not end with /"}
	}
	if opts.Tolerance < 0 || opts.Tolerance%time.Second != 0 || opts.Tolerance > time.Hour {
		return nil, &contract.Error{Code: contract.InvalidArgument, Msg: "tolerance must be a whole number of seconds between 0s and 1h (etcd lease TTLs are whole seconds)"}
	}
	return newBackend(cli, false, opts.Prefix, opts.Tolerance), nil
}

func newBackend(cli *clientv3.Client, owns bool, prefix string, tol time.Duration) *Backend {
	return &Backend{
		cli: cli, ownsCli: owns, prefix: prefix + "/", tol: tol,
		now: contract.SystemClock{}, grantFn: defaultGrant, done: make(chan struct{}),
	}
}

func validPrefix(p string) bool {
	if len(p) == 0 || len(p) > 128 || p[len(p)-1] == '/' || p[0] == '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == ':', c == '-', c == '/':
		default:
			return false
		}
	}
	return true
}

// Client returns the etcd client the backend uses.
func (b *Backend) Client() *clientv3.Client { return b.cli }

// Prefix returns the key prefix, ending in "/".
func (b *Backend) Prefix() string { return b.prefix }

// ClockTolerance implements contract.ToleranceReporter.
func (b *Backend) ClockTolerance() time.Duration { return b.tol }

// SystemName names the backend in the Store's spans and metrics.
func (*Backend) SystemName() string { return "etcd" }

// Close ends waiting WaitKey calls with Closed and, when the backend was
// opened from a DSN, closes its client.
func (b *Backend) Close() error {
	b.bgMu.Lock()
	already := b.closed.Swap(true)
	b.bgMu.Unlock()
	if already {
		return nil
	}
	close(b.done)
	b.bg.Wait()
	if b.ownsCli {
		if err := b.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			return &contract.Error{Code: contract.Unknown, Msg: "closing the etcd client failed", Err: err}
		}
	}
	return nil
}

func (b *Backend) check() error {
	if b.closed.Load() {
		return &contract.Error{Code: contract.Closed, Msg: "backend is closed"}
	}
	return nil
}

// clockNow is the time one operation reports, read once per operation:
// UTC, whole microseconds.
func (b *Backend) clockNow() time.Time { return b.now.Now().UTC().Truncate(time.Microsecond) }

func newToken() string {
	var r [16]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// --- etcd leases ---

// ceilSec returns d in whole seconds, rounded up, at least 1.
func ceilSec(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// floorSec returns d in whole seconds, rounded down, at least 1.
func floorSec(d time.Duration) int64 {
	return max(int64(d/time.Second), 1)
}

// grant grants an etcd lease of at least ttl seconds (at least the
// cluster's minimum, once learned) and returns its id and granted TTL.
func (b *Backend) grant(ctx context.Context, ttl int64, now time.Time) (clientv3.LeaseID, int64, error) {
	ttl = max(ttl, b.minGranted.Load())
	id, got, err := b.grantFn(ctx, b.cli, ttl, now)
	if err != nil {
		return 0, 0, err
	}
	if got > ttl {
		// The cluster's minimum lease TTL (1.5 election timeouts, whole
		// seconds) is longer than asked: remember it.
		for {
			m := b.minGranted.Load()
			if got <= m || b.minGranted.CompareAndSwap(m, got) {
				break
			}
		}
	}
	return id, got, nil
}

// grant2 grants two leases concurrently.
func (b *Backend) grant2(ctx context.Context, ttl1, ttl2 int64, now time.Time) (id1 clientv3.LeaseID, got1 int64, id2 clientv3.LeaseID, got2 int64, err error) {
	var err2 error
	var wg sync.WaitGroup
	wg.Go(func() { id2, got2, err2 = b.grant(ctx, ttl2, now) })
	id1, got1, err = b.grant(ctx, ttl1, now)
	wg.Wait()
	if err == nil && err2 != nil {
		b.revokeLater(id1)
		err = err2
	} else if err != nil && err2 == nil {
		b.revokeLater(id2)
	}
	return
}

// revokeLater revokes etcd leases that were granted but not used (or whose
// keys moved to newer leases), in the background: they would expire by
// themselves, this only frees them sooner.
func (b *Backend) revokeLater(ids ...clientv3.LeaseID) {
	var live []clientv3.LeaseID
	for _, id := range ids {
		if id != clientv3.NoLease {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		return
	}
	b.bgMu.Lock()
	defer b.bgMu.Unlock()
	if b.closed.Load() {
		return
	}
	b.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, id := range live {
			_, _ = b.cli.Revoke(ctx, id)
		}
	})
}
