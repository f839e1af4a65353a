// Package memory is the reference durable backend: every rule of the
// contract, in process, with no setup. It registers the DSN scheme "memory".
//
// # Opening a store
//
// [Open] returns a [durable.Store] on a new private store: the easy path,
// with every validation, default and time bound of the Store. Tests that
// move the clock pass a [contract.ManualClock] in [Options]:
//
//	store, err := memory.Open(memory.Options{Clock: clock})
//
// durable.Open with a memory DSN (below) gives such a Store through the
// registry.
//
// [NewStorage] and [Storage.Backend] give the raw contract.Backend, whose
// methods trust their input: use it to build decorators, conformance
// harnesses, or several clients on one store, and wrap it with
// [durable.New] before use. NewStorage(opts).Backend() is this package's
// NewBackend: every backend package's Open and New return the validating
// Store and one function returns the raw backend (see package contract,
// "Constructors"), and here that path takes two steps because several raw
// clients share one Storage. From a Store, [durable.Store.As] reaches the
// backend:
//
//	var b *memory.Backend
//	store.As(&b)
//
// # DSN
//
//	memory://            a private store, visible only to the Store opened
//	memory://NAME        a store shared by every durable.Open of NAME in this process
//	memory://NAME?tolerance=2s
//
// Parameters:
//
//	tolerance  clock tolerance as a Go duration (default 0). Takeover of a
//	           claim or lease waits this long past expiry; a fence or
//	           renewal must have this much time left.
//
// Unknown parameters are rejected. The first durable.Open of a NAME fixes
// its parameters; a later one of the same NAME with other parameters fails.
// Named stores live as long as the process.
//
// # Clock
//
// Expiry is judged on one clock, by default the system clock. Tests inject a
// [contract.ManualClock] through [Options] and move it with Advance.
//
// # Idempotency keys: tokens, tombstones, no shared transaction
//
// A ClaimRequest with its own Token stores that token, and a retry of the
// same request with the same token (compared byte for byte) gets its own
// claim back (ClaimNew, the lease set to now + TTL) as long as nobody has
// reclaimed or completed it.
//
// A completed key keeps its outcome until ExpiresAt and its tombstone
// (fingerprint, workflow ID, times, status code and token) until ForgetAt:
// between the two, reads report KeyExpired with the code alone (the
// payload is never returned, whether or not Cleanup has dropped it yet),
// ClaimKey of the same request returns OutcomeExpired and another request
// KeyConflict; past ForgetAt the key is free. Cleanup drops the payloads
// past ExpiresAt (CleanupResult.Outcomes) and deletes the tombstones past
// ForgetAt (Keys). The tombstone costs nothing extra per key: the record's
// lease field holds ForgetAt once the key is completed.
//
// The backend does not implement contract.TxCompleter: it has no
// transaction a caller's own effect could share, so Store.CompleteKeyTx
// and Store.DoTx return Unimplemented. Use the plain path (Store.Do, or
// ClaimKey, the effect, CompleteKey) and mind its hazard: an effect that
// happened before a crash or an unreachable store is not known to the key,
// and a retry after the claim expires runs the request again. Within one
// process that is only a crash, which also loses this backend's records.
//
// # Concurrency
//
// One mutex guards all records: the backend is read to learn the contract,
// so it stays as plain as the rules it implements. A call takes a few
// hundred nanoseconds on one goroutine; concurrent callers serialise on the
// lock, so throughput does not grow with cores (docs/BENCHMARKS.md has the
// figures). Fencing tokens come from one counter per store and never
// repeat, across resources and the permits of a semaphore alike. WaitKey
// is woken by channels, not polling, and so is a WatchLease, by every
// client of the Storage (AcquirePermit grants a semaphore's lowest free
// permit under the same lock).
package memory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

func init() {
	durable.Register("memory", driver{})
}

// Clock tells the store what time it is.
//
// Deprecated: use contract.Clock; this alias remains for one release.
type Clock = contract.Clock

// ManualClock is a Clock that moves only when told.
//
// Deprecated: use contract.ManualClock; this alias remains for one release.
type ManualClock = contract.ManualClock

// NewManualClock returns a clock stopped at start.
//
// Deprecated: use contract.NewManualClock; this remains for one release.
func NewManualClock(start time.Time) *ManualClock { return contract.NewManualClock(start) }

// Options configures a memory store.
type Options struct {
	// Clock judges expiry; nil means the system clock (contract.SystemClock).
	Clock contract.Clock
	// Tolerance is the clock tolerance (default 0).
	Tolerance time.Duration
}

// Storage is one in-process store. Backends opened on it share its records.
type Storage struct {
	clock     contract.Clock
	tolerance time.Duration

	// mu guards everything below. A fenced write checks the lease in the
	// same critical section as the write, which makes it atomic.
	mu        sync.Mutex
	tokens    int64 // the last fencing token issued: one counter for all resources, like Postgres's sequence
	workflows map[recKey]*contract.Workflow
	keys      map[recKey]keyRec // by value, under each record's own id (keyrec.go)
	leases    map[recKey]*contract.Lease
	waiters   map[recKey][]chan struct{}          // WaitKey callers, by key
	watches   map[recKey]map[*leaseWatch]struct{} // WatchLease callers, by lease (watch.go)
	idx       indexes                             // the listing indexes (index.go), beside the maps
}

type recKey struct {
	scope contract.Scope
	id    string
}

// NewStorage returns an empty store.
func NewStorage(opts Options) *Storage {
	s := &Storage{
		clock: opts.Clock, tolerance: opts.Tolerance,
		workflows: map[recKey]*contract.Workflow{},
		keys:      map[recKey]keyRec{},
		leases:    map[recKey]*contract.Lease{},
		waiters:   map[recKey][]chan struct{}{},
		watches:   map[recKey]map[*leaseWatch]struct{}{},
	}
	s.idx = newIndexes(s)
	if s.clock == nil {
		s.clock = contract.SystemClock{}
	}
	return s
}

// Backend returns a new raw client on the store: a contract.Backend whose
// methods trust their input (see the package doc). Closing it does not
// affect other clients or the records.
func (s *Storage) Backend() *Backend { return &Backend{s: s, done: make(chan struct{})} }

// Open returns a Store on a new private store, configured by opts and the
// Store's options. It fails only on an invalid option.
func Open(opts Options, storeOpts ...durable.Option) (*durable.Store, error) {
	return durable.New(NewStorage(opts).Backend(), storeOpts...)
}

// now returns the store clock, in UTC and truncated to microseconds like a
// database timestamp, so that records compare equal across backends.
func (s *Storage) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// Backend is one raw client of a Storage: it implements contract.Backend
// and the optional capabilities below, and trusts its input, so use it
// through a [durable.Store] (see the package doc).
type Backend struct {
	s      *Storage
	closed atomic.Bool
	done   chan struct{} // closed by Close: wakes this client's waiters
}

var (
	_ contract.Backend   = (*Backend)(nil)
	_ contract.KeyWaiter = (*Backend)(nil)

	_ contract.ToleranceReporter = (*Backend)(nil)
	_ contract.CleanupCounter    = (*Backend)(nil)
)

// Storage returns the store this client is on.
func (b *Backend) Storage() *Storage { return b.s }

// Close closes this client. The records stay. Calls of this client's
// WaitKey that are waiting return ErrClosed at once.
func (b *Backend) Close() error {
	if !b.closed.Swap(true) {
		close(b.done)
	}
	return nil
}

func (b *Backend) check(ctx context.Context) error {
	if b.closed.Load() {
		return &contract.Error{Code: contract.Closed, Msg: "backend is closed"}
	}
	if err := ctx.Err(); err != nil {
		return &contract.Error{Code: contract.Canceled, Err: err}
	}
	return nil
}

// lock checks that the client is open and ctx is live, then locks the
// store and returns the map key of the record (scope, id). The caller
// unlocks b.s.mu.
func (b *Backend) lock(ctx context.Context, scope contract.Scope, id string) (recKey, error) {
	if err := b.check(ctx); err != nil {
		return recKey{}, err
	}
	b.s.mu.Lock()
	return recKey{scope, id}, nil
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

func cloneWorkflow(w *contract.Workflow) contract.Workflow {
	out := *w
	out.Snapshot = cloneBytes(w.Snapshot)
	return out
}

func newToken() tokenText {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	var t tokenText
	hex.Encode(t[:], b[:])
	return t
}

// tokenText is a claim token: 32 hex digits of 16 random bytes. An array,
// so that a new record copies it into its data without allocating it
// first.
type tokenText [32]byte

// --- driver ---

type driver struct{}

var (
	namedMu sync.Mutex
	named   = map[string]namedStorage{}
)

type namedStorage struct {
	s      *Storage
	params string
}

// Open implements contract.Driver.
func (driver) Open(ctx context.Context, dsn string) (contract.Backend, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, &contract.Error{Code: contract.InvalidArgument, Msg: "malformed memory DSN"}
	}
	opts := Options{}
	q := u.Query()
	for k, vs := range q {
		switch k {
		case "tolerance":
			d, err := time.ParseDuration(vs[len(vs)-1])
			if err != nil || d < 0 {
				return nil, &contract.Error{Code: contract.InvalidArgument, Msg: "tolerance must be a non-negative Go duration such as 2s"}
			}
			opts.Tolerance = d
		default:
			return nil, &contract.Error{Code: contract.InvalidArgument, Msg: "unknown memory DSN parameter (known: tolerance)"}
		}
	}
	name := u.Host + u.Path
	if name == "" {
		return NewStorage(opts).Backend(), nil
	}
	params := q.Encode()
	namedMu.Lock()
	defer namedMu.Unlock()
	if n, ok := named[name]; ok {
		if n.params != params {
			return nil, &contract.Error{Code: contract.InvalidArgument, Msg: "named memory store is already open with other parameters"}
		}
		return n.s.Backend(), nil
	}
	s := NewStorage(opts)
	named[name] = namedStorage{s: s, params: params}
	return s.Backend(), nil
}

// --- workflows ---

// CreateWorkflow implements contract.StateStore.
func (b *Backend) CreateWorkflow(ctx context.Context, w contract.Workflow) (contract.Workflow, error) {
	k, err := b.lock(ctx, w.Scope, w.ID)
	if err != nil {
		return contract.Workflow{}, err
	}
	defer b.s.mu.Unlock()
	if _, ok := b.s.workflows[k]; ok {
		return contract.Workflow{}, &contract.Error{Code: contract.AlreadyExists, Msg: "workflow already exists"}
	}
	now := b.s.now()
	rec := &contract.Workflow{
		Scope: w.Scope, ID: w.ID, RequestID: w.RequestID, Status: w.Status,
		Revision: 1, Snapshot: cloneBytes(w.Snapshot), CreatedAt: now, UpdatedAt: now,
	}
	b.s.putWorkflow(k, rec)
	out := *rec
	out.Snapshot = w.Snapshot // the caller's own bytes; the store keeps a copy
	return out, nil
}

// GetWorkflow implements contract.StateStore.
func (b *Backend) GetWorkflow(ctx context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	k, err := b.lock(ctx, scope, id)
	if err != nil {
		return contract.Workflow{}, err
	}
	defer b.s.mu.Unlock()
	rec, ok := b.s.workflows[k]
	if !ok {
		return contract.Workflow{}, &contract.Error{Code: contract.NotFound, Msg: "workflow not found"}
	}
	return cloneWorkflow(rec), nil
}

// fenceValid reports whether f is held and valid at now. s.mu must be held.
func (s *Storage) fenceValid(scope contract.Scope, f *contract.Fence, now time.Time) bool {
	l, ok := s.leases[recKey{scope, f.Resource}]
	return ok && l.Owner == f.Owner && l.Token == f.Token && l.ExpiresAt.After(now.Add(s.tolerance))
}

// UpdateWorkflow implements contract.StateStore. Checks run in this order:
// existence, terminal status, fence, expected status and revision.
func (b *Backend) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	k, err := b.lock(ctx, u.Scope, u.ID)
	if err != nil {
		return contract.Workflow{}, err
	}
	defer b.s.mu.Unlock()
	rec, ok := b.s.workflows[k]
	if !ok {
		return contract.Workflow{}, &contract.Error{Code: contract.NotFound, Msg: "workflow not found"}
	}
	if rec.Status.Terminal() {
		if u.Status == rec.Status {
			return cloneWorkflow(rec), nil
		}
		return contract.Workflow{}, &contract.Error{Code: contract.Terminal, Msg: "workflow is in a terminal status"}
	}
	now := b.s.now()
	if u.Fence != nil && !b.s.fenceValid(u.Scope, u.Fence, now) {
		return contract.Workflow{}, &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
	}
	if rec.Status != u.ExpectStatus || (u.ExpectRevision != 0 && rec.Revision != u.ExpectRevision) {
		return contract.Workflow{}, &contract.Error{
			Code: contract.Conflict, Msg: "workflow changed",
			Details: &contract.Details{
				ExpectedStatus: u.ExpectStatus, ActualStatus: rec.Status,
				ExpectedRevision: u.ExpectRevision, ActualRevision: rec.Revision,
			},
		}
	}
	// The record is updated in place, but its snapshot slice is replaced,
	// never written to, so copies taken by ListWorkflows stay valid. The
	// caller gets its own input slice back: the store keeps a private copy.
	b.s.setWorkflowStatus(k, rec, u.Status)
	rec.RequestID, rec.Revision, rec.UpdatedAt = u.RequestID, rec.Revision+1, now
	rec.Snapshot = cloneBytes(u.Snapshot)
	out := *rec
	out.Snapshot = u.Snapshot
	return out, nil
}

// ListWorkflows implements contract.StateStore. It walks the index of the
// scope, or of the scope and status, from the cursor, which holds each
// workflow's record: a page costs O(log n + page), whatever the size of the
// scope, and no map lookup per row.
func (b *Backend) ListWorkflows(ctx context.Context, q contract.ListQuery) ([]contract.Workflow, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = -1 // no limit (the Store always sets one)
	}
	var out []contract.Workflow
	if limit > 0 {
		out = make([]contract.Workflow, 0, min(limit, 1000))
	}
	b.s.mu.Lock()
	visit := func(_ string, w *contract.Workflow) bool {
		if q.Status != "" && w.Status != q.Status {
			return true // cannot happen while the index is in step; skip defensively
		}
		out = append(out, *w) // snapshot cloned below, outside the lock
		return len(out) != limit
	}
	if q.Status == "" {
		b.s.idx.workflows.ascend(q.Scope, q.After, visit)
	} else {
		b.s.idx.workflowsStatus.ascend(scopeStatus{q.Scope, q.Status}, q.After, visit)
	}
	b.s.mu.Unlock()
	if len(out) == 0 {
		return nil, nil
	}
	for i := range out {
		out[i].Snapshot = cloneBytes(out[i].Snapshot)
	}
	return out, nil
}

// ClockTolerance implements contract.ToleranceReporter.
func (b *Backend) ClockTolerance() time.Duration { return b.s.tolerance }
