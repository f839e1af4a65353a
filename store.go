package durable

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/contract"
	"go.uber.org/multierr"
)

// Store is what users hold: a validated, error-normalizing front for one
// backend. It is safe for concurrent use. Create one with [Open] or [New].
//
// Every method validates its input first; bad input returns an error with
// Code InvalidArgument and the backend is never called. Every error returned
// is a *contract.Error (use errors.Is with the Err* sentinels, or [CodeOf]);
// context cancellation stays visible to errors.Is(err, context.Canceled).
type Store struct {
	b      contract.Backend
	cfg    config
	tol    time.Duration // the backend's clock tolerance, read once
	local  bool          // the backend is contract.InProcess: no timeout timers
	closed atomic.Bool
	done   chan struct{} // closed by Close: wakes WaitKey

	renewals leaseRenewals // RunWithLease's shared keep-alive (renew.go)
	waits    waitRegistry  // WaitLease's queues and shared watches (waitlease.go)
}

// New returns a Store over b, bypassing the registry. It fails only on an
// invalid option.
func New(b contract.Backend, opts ...Option) (*Store, error) {
	if b == nil {
		return nil, invalid("New", "backend must not be nil")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	s := &Store{b: b, cfg: cfg, done: make(chan struct{})}
	if r, ok := b.(contract.ToleranceReporter); ok {
		s.tol = max(r.ClockTolerance(), 0)
	}
	if ip, ok := b.(contract.InProcess); ok {
		s.local = ip.InProcess()
	}
	// Set up the instruments and hand the logger and meter provider to
	// an Instrumentable backend now, not at the first call.
	s.obs()
	return s, nil
}

// ClockTolerance returns the backend's clock tolerance if it reports one
// (see contract.ToleranceReporter), otherwise 0.
func (s *Store) ClockTolerance() time.Duration { return s.tol }

// MinTTL is the shortest claim or lease TTL the Store accepts: the
// backend's clock tolerance plus [TTLMargin], 1 s (1 s on the memory
// backend, 2 s on Postgres with its default tolerance of 1 s). A fence is
// valid, and a renewal accepted, only while the lease expires more than
// the tolerance from now, so a TTL at or below the tolerance would be
// granted dead on arrival; this minimum leaves the holder at least 1 s to
// use and renew it. Shorter TTLs fail with ErrInvalidArgument naming the
// minimum.
func (s *Store) MinTTL() time.Duration { return TTLMargin + s.tol }

// As reaches the backend behind the Store, gocloud style: target must be a
// non-nil pointer to a variable whose type the backend is assignable to
// (its concrete type, contract.Backend, or an optional capability such as
// contract.CleanupCounter). As sets the variable and reports true, or
// reports false and leaves it alone. A backend may also implement
// As(target any) bool itself to offer other views; the Store asks it first.
//
//	var b *memory.Backend
//	if store.As(&b) { … }
//
// Calls made on the backend directly bypass everything the Store does:
// validation, defaults, error wrapping, time bounds and Close. They are for
// backend-specific features, decorators and tests.
func (s *Store) As(target any) bool {
	if a, ok := s.b.(interface{ As(target any) bool }); ok && a.As(target) {
		return true
	}
	p := reflect.ValueOf(target)
	if p.Kind() != reflect.Pointer || p.IsNil() {
		return false
	}
	v := reflect.ValueOf(s.b)
	if !v.Type().AssignableTo(p.Elem().Type()) {
		return false
	}
	p.Elem().Set(v)
	return true
}

// Close closes the backend. Later calls return ErrClosed.
//
// Calls waiting in WaitKey (and Do waiting for another caller), WaitLease
// and WaitPermit (and RunWithLease or RunWithPermit waiting for the lease)
// return ErrClosed at once.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.done)
	s.waits.close() // ends the waiters' backend watches before the backend closes
	return wrapErr("Close", s.b.Close())
}

// bounded runs one backend call under the Store's operation timeout (see
// [WithOperationTimeout]) and wraps its error once. A failure caused by
// that timeout, rather than by the caller's context, is reported as
// Unavailable (never sent) or OutcomeUnknown (may have applied), since the
// caller did not cancel anything.
//
// It is also the Store's one instrumentation point (see observe.go): a
// span, the operation duration and the result counters per call.
func bounded[T any](s *Store, ctx context.Context, op string, f func(ctx context.Context) (T, error)) (T, error) {
	o := s.obs()
	ctx, c := o.start(ctx, op)
	bctx, cancel := ctx, context.CancelFunc(nil)
	if s.local {
		// An in-process backend cannot hang on I/O.
	} else if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > s.cfg.opTimeout {
		bctx, cancel = context.WithTimeout(ctx, s.cfg.opTimeout)
	}
	out, err := f(bctx)
	if err != nil {
		err = wrapErr(op, err)
		if cancel != nil && ctx.Err() == nil && bctx.Err() != nil {
			err = s.timedOut(err)
		}
	}
	if cancel != nil {
		cancel()
	}
	endObs(o, ctx, op, &c, &out, err)
	return out, err
}

// timedOut rewrites an error caused by the Store's own operation timeout.
func (s *Store) timedOut(err error) error {
	ce, ok := err.(*contract.Error)
	if !ok {
		return err
	}
	cp := *ce
	switch cp.Code {
	case contract.Canceled:
		cp.Code = contract.Unavailable
		cp.Msg = "no answer within the operation timeout (" + s.cfg.opTimeout.String() + "); the request was not applied"
	case contract.OutcomeUnknown:
		cp.Msg = "no answer within the operation timeout (" + s.cfg.opTimeout.String() + "); the request may have applied"
	default:
		return err
	}
	if !errors.Is(cp.Err, context.DeadlineExceeded) {
		cp.Err = multierr.Combine(context.DeadlineExceeded, cp.Err)
	}
	return &cp
}

// begin runs the checks every call shares: validation result, closed store
// and a context that has already ended.
func (s *Store) begin(ctx context.Context, v *validator) error {
	if v.err != nil {
		return v.err
	}
	if s.closed.Load() {
		return &contract.Error{Code: contract.Closed, Op: v.op, Msg: "store is closed"}
	}
	if ctx == nil {
		return invalid(v.op, "context must not be nil")
	}
	if err := ctx.Err(); err != nil {
		return &contract.Error{Code: contract.Canceled, Op: v.op, Err: err}
	}
	return nil
}

// wrapErr turns a backend error into exactly one *contract.Error carrying
// op.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var ce *contract.Error
	if errors.As(err, &ce) {
		if ce.Op == op {
			return err
		}
		cp := *ce
		if cp.Op == "" {
			cp.Op = op
		}
		return &cp
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &contract.Error{Code: contract.Canceled, Op: op, Err: err}
	}
	return &contract.Error{Code: contract.Unknown, Op: op, Msg: "backend error", Err: err}
}

// --- workflows ---

// CreateWorkflow stores a new workflow at revision 1. An empty Status means
// StatusPending. An existing (scope, id) → ErrAlreadyExists.
func (s *Store) CreateWorkflow(ctx context.Context, w Workflow) (Workflow, error) {
	v := validator{op: "CreateWorkflow"}
	if w.Status == "" {
		w.Status = StatusPending
	}
	v.scope(w.Scope)
	v.ident("workflow id", w.ID)
	v.optIdent("request id", w.RequestID)
	v.status("status", w.Status)
	v.size("snapshot", len(w.Snapshot), s.cfg.maxSnapshot)
	if err := s.begin(ctx, &v); err != nil {
		return Workflow{}, err
	}
	w.Revision, w.CreatedAt, w.UpdatedAt = 0, time.Time{}, time.Time{}
	return bounded(s, ctx, v.op, func(ctx context.Context) (Workflow, error) {
		return s.b.CreateWorkflow(ctx, w)
	})
}

// GetWorkflow returns a workflow or ErrNotFound.
func (s *Store) GetWorkflow(ctx context.Context, scope Scope, id string) (Workflow, error) {
	v := validator{op: "GetWorkflow"}
	v.scope(scope)
	v.ident("workflow id", id)
	if err := s.begin(ctx, &v); err != nil {
		return Workflow{}, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) (Workflow, error) {
		return s.b.GetWorkflow(ctx, scope, id)
	})
}

// UpdateWorkflow applies one compare-and-set; see [contract.Update]. On
// failure nothing changed and the error is ErrNotFound, ErrTerminal,
// ErrFenced or ErrConflict (whose Details say expected vs actual).
func (s *Store) UpdateWorkflow(ctx context.Context, u Update) (Workflow, error) {
	v := validator{op: "UpdateWorkflow"}
	v.scope(u.Scope)
	v.ident("workflow id", u.ID)
	v.status("expected status", u.ExpectStatus)
	v.status("status", u.Status)
	if u.ExpectRevision < 0 {
		v.fail("expected revision must not be negative")
	}
	v.optIdent("request id", u.RequestID)
	v.fence(u.Fence)
	v.size("snapshot", len(u.Snapshot), s.cfg.maxSnapshot)
	if err := s.begin(ctx, &v); err != nil {
		return Workflow{}, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) (Workflow, error) {
		return s.b.UpdateWorkflow(ctx, u)
	})
}

// ListWorkflows returns one page of workflows in a scope, ordered by ID.
// Pass the last ID of a page as After to get the next; a short page is the
// last. Limit 0 means 100; the largest is 1000.
func (s *Store) ListWorkflows(ctx context.Context, q ListQuery) ([]Workflow, error) {
	v := validator{op: "ListWorkflows"}
	v.scope(q.Scope)
	if q.Status != "" {
		v.status("status filter", q.Status)
	}
	v.optIdent("cursor", q.After)
	q.Limit = v.limit(q.Limit)
	if err := s.begin(ctx, &v); err != nil {
		return nil, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) ([]Workflow, error) {
		return s.b.ListWorkflows(ctx, q)
	})
}

// ListKeys returns one page of the idempotency keys in a scope, ordered by
// Key, for operators ("durable inspect keys"): with State KeyClaimed the
// keys in flight (and abandoned claims not yet cleaned up: compare
// LeaseUntil with the time), with KeyCompleted the stored outcomes, with ""
// all. A completed key past its ExpiresAt is listed as its tombstone
// (State KeyExpired, only the status code) until its ForgetAt, and not
// after. Pass the last
// Key of a page as After to get the next; a short page is the last. Limit 0
// means 100; the largest is 1000.
//
// It returns ErrUnimplemented when the backend lacks the
// contract.RecordLister capability.
func (s *Store) ListKeys(ctx context.Context, q KeyListQuery) ([]KeyRecord, error) {
	v := validator{op: "ListKeys"}
	v.scope(q.Scope)
	switch q.State {
	case "", contract.KeyClaimed, contract.KeyCompleted, contract.KeyExpired:
	default:
		v.fail("state filter must be claimed, completed, expired or empty")
	}
	v.optIdent("cursor", q.After)
	q.Limit = v.limit(q.Limit)
	if err := s.begin(ctx, &v); err != nil {
		return nil, err
	}
	l, err := s.lister(v.op)
	if err != nil {
		return nil, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) ([]KeyRecord, error) {
		return l.ListKeys(ctx, q)
	})
}

// ListLeases returns one page of the leases in a scope, ordered by
// Resource, for operators ("durable inspect leases"): with Held only the
// leases that have not expired, otherwise expired ones too (until Cleanup
// deletes them). Released leases are never listed. Paging is as for
// ListKeys.
//
// It returns ErrUnimplemented when the backend lacks the
// contract.RecordLister capability.
func (s *Store) ListLeases(ctx context.Context, q LeaseListQuery) ([]Lease, error) {
	v := validator{op: "ListLeases"}
	v.scope(q.Scope)
	if q.After != "" {
		v.leaseResource("cursor", q.After)
	}
	q.Limit = v.limit(q.Limit)
	if err := s.begin(ctx, &v); err != nil {
		return nil, err
	}
	l, err := s.lister(v.op)
	if err != nil {
		return nil, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) ([]Lease, error) {
		return l.ListLeases(ctx, q)
	})
}

// lister is the backend's RecordLister, or Unimplemented.
func (s *Store) lister(op string) (contract.RecordLister, error) {
	l, ok := s.b.(contract.RecordLister)
	if !ok {
		return nil, &contract.Error{Code: contract.Unimplemented, Op: op, Msg: "backend cannot list keys or leases"}
	}
	return l, nil
}

// --- idempotency keys ---

// ClaimKey claims an idempotency key for one request. See [contract.ClaimKind]
// for the outcomes; a key bound to another fingerprint or workflow id →
// ErrKeyConflict; the same request on a key whose outcome's retention has
// ended (only its tombstone is left) → [ErrOutcomeExpired]. A zero TTL
// means the default claim TTL.
//
// req.Token, when set, is the caller's own claim token (16–128 bytes of
// printable ASCII, fresh and random for each logical call, see
// [NewClaimToken]): a ClaimKey retried with it after a lost reply
// ([ErrOutcomeUnknown]) gets the caller's own claim back (ClaimNew)
// instead of ClaimInFlight. [Store.Do] and the middleware do this for
// their callers.
func (s *Store) ClaimKey(ctx context.Context, req ClaimRequest) (Claim, error) {
	v := validator{op: "ClaimKey"}
	if req.TTL == 0 {
		req.TTL = s.cfg.claimTTL
	}
	v.scope(req.Scope)
	v.ident("key", req.Key)
	v.fingerprint(req.Fingerprint)
	v.optIdent("workflow id", req.WorkflowID)
	v.ttl(req.TTL, s.MinTTL())
	v.callerToken(req.Token)
	if err := s.begin(ctx, &v); err != nil {
		return Claim{}, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) (Claim, error) {
		return s.b.ClaimKey(ctx, req)
	})
}

// CompleteKey stores the outcome of a claimed key while c.Token still holds
// the claim. Retrying a completion that succeeded returns the stored record.
// A stale token or an invalid fence → ErrFenced. A zero Retain means the
// Store's key retention ([WithKeyRetention]), a zero Tombstone the Store's
// tombstone retention ([WithTombstoneRetention]): the outcome is replayed
// until ExpiresAt = CompletedAt + Retain, and a tombstone keeps the key
// bound to its request until ForgetAt = CompletedAt + max(Retain,
// Tombstone).
func (s *Store) CompleteKey(ctx context.Context, c Completion) (KeyRecord, error) {
	v := validator{op: "CompleteKey"}
	c = s.completionDefaults(c)
	v.completion(c, s.cfg.maxBody, s.cfg.maxHeader)
	if err := s.begin(ctx, &v); err != nil {
		return KeyRecord{}, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) (KeyRecord, error) {
		return s.b.CompleteKey(ctx, c)
	})
}

// completionDefaults fills a Completion's zero Retain and Tombstone.
func (s *Store) completionDefaults(c Completion) Completion {
	if c.Retain == 0 {
		c.Retain = s.cfg.keyRetention
	}
	if c.Tombstone == 0 {
		c.Tombstone = s.cfg.tombstone
	}
	return c
}

// BeginTx begins a transaction on the backend's own database, for the
// caller's statements and [Store.CompleteKeyTx], which then commit together
// (see contract.TxCompleter). Tx.Raw is the client library's transaction
// (a pgx.Tx or a *sql.Tx); the caller must Commit or Rollback it. ctx
// bounds beginning the transaction, not its life. Commit and Rollback are
// bounded by the Store's operation timeout and their errors are
// *contract.Error; a commit that may have applied is ErrOutcomeUnknown.
//
// It returns ErrUnimplemented when the backend has no transaction the
// caller can share (memory, etcd: see [Store.CompleteKeyTx] for which path
// to use there).
func (s *Store) BeginTx(ctx context.Context) (Tx, error) {
	v := validator{op: "BeginTx"}
	if err := s.begin(ctx, &v); err != nil {
		return nil, err
	}
	tc, err := s.txCompleter(v.op)
	if err != nil {
		return nil, err
	}
	tx, err := bounded(s, ctx, v.op, func(ctx context.Context) (Tx, error) {
		return tc.BeginTx(ctx)
	})
	if err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, &contract.Error{Code: contract.Unknown, Op: v.op, Msg: "backend began no transaction and returned no error"}
	}
	return &storeTx{s: s, tx: tx}, nil
}

// CompleteKeyTx is [Store.CompleteKey] inside tx, the transaction that also
// holds the caller's effect: a Tx from [Store.BeginTx], or the caller's own
// transaction on the backend's database in the client library's type (a
// pgx.Tx or a *sql.Tx on PostgreSQL, a *sql.Tx on the same file on SQLite).
// It is validated and defaulted like CompleteKey. If tx commits, the
// outcome is stored with the effect; if it rolls back, the claim is as it
// was. Until tx ends, the key cannot be reclaimed (on Redis, a reclaim
// instead makes the commit fail with ErrFenced, applying nothing). See
// contract.TxCompleter for the details, and [DoTx] for the helper that
// does all of it.
//
// It returns ErrUnimplemented on a backend without transactions the caller
// can share (memory, etcd): there, complete with [Store.CompleteKey] after
// the effect (or use [Store.Do]), and make the effect itself conditional
// where a duplicate is unacceptable (see Do's Hazard).
func (s *Store) CompleteKeyTx(ctx context.Context, tx any, c Completion) (KeyRecord, error) {
	v := validator{op: "CompleteKeyTx"}
	c = s.completionDefaults(c)
	v.completion(c, s.cfg.maxBody, s.cfg.maxHeader)
	if tx == nil {
		v.fail("transaction must not be nil")
	}
	if err := s.begin(ctx, &v); err != nil {
		return KeyRecord{}, err
	}
	tc, err := s.txCompleter(v.op)
	if err != nil {
		return KeyRecord{}, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) (KeyRecord, error) {
		return tc.CompleteKeyTx(ctx, backendTx(tx), c)
	})
}

// errNoTxMsg says what BeginTx, CompleteKeyTx, DoTx and the middleware's
// transactional mode return on a backend without contract.TxCompleter.
const errNoTxMsg = "backend has no transaction the caller can share (it does not implement contract.TxCompleter; PostgreSQL, SQLite and Redis do): complete with CompleteKey after the effect (Store.Do), and make the effect conditional where a duplicate is unacceptable"

// txCompleter is the backend's TxCompleter, or Unimplemented.
func (s *Store) txCompleter(op string) (contract.TxCompleter, error) {
	tc, ok := s.b.(contract.TxCompleter)
	if !ok {
		return nil, &contract.Error{Code: contract.Unimplemented, Op: op, Msg: errNoTxMsg}
	}
	return tc, nil
}

// CanCompleteInTx reports whether the backend can store an outcome in the
// caller's transaction (it implements contract.TxCompleter): whether
// [Store.BeginTx], [Store.CompleteKeyTx] and [DoTx] can work.
func (s *Store) CanCompleteInTx() bool {
	_, ok := s.b.(contract.TxCompleter)
	return ok
}

// RenewKey extends the claim held by token to now+ttl (a heartbeat for long
// work); ttl must be at least [Store.MinTTL] and 0 means the default claim
// TTL. A token that no longer holds the claim → ErrFenced.
func (s *Store) RenewKey(ctx context.Context, k KeyRef, token string, ttl time.Duration) (KeyRecord, error) {
	v := validator{op: "RenewKey"}
	if ttl == 0 {
		ttl = s.cfg.claimTTL
	}
	v.scope(k.Scope)
	v.ident("key", k.Key)
	v.token(token)
	v.ttl(ttl, s.MinTTL())
	if err := s.begin(ctx, &v); err != nil {
		return KeyRecord{}, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) (KeyRecord, error) {
		return s.b.RenewKey(ctx, k, token, ttl)
	})
}

// ReleaseKey deletes the claim held by token so that a retry can run. It
// reports false if token does not hold the claim; it never deletes a
// completed record.
func (s *Store) ReleaseKey(ctx context.Context, k KeyRef, token string) (bool, error) {
	v := validator{op: "ReleaseKey"}
	v.scope(k.Scope)
	v.ident("key", k.Key)
	v.token(token)
	if err := s.begin(ctx, &v); err != nil {
		return false, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) (bool, error) {
		return s.b.ReleaseKey(ctx, k, token)
	})
}

// GetKey returns a key's record or ErrNotFound.
func (s *Store) GetKey(ctx context.Context, k KeyRef) (KeyRecord, error) {
	v := validator{op: "GetKey"}
	v.scope(k.Scope)
	v.ident("key", k.Key)
	if err := s.begin(ctx, &v); err != nil {
		return KeyRecord{}, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) (KeyRecord, error) {
		return s.b.GetKey(ctx, k)
	})
}

// WaitKey blocks until the key is completed (it returns the record; a key
// whose outcome's retention has ended is returned as its tombstone, State
// KeyExpired), has no
// record (ErrNotFound: released, so the caller may claim it), or ctx ends.
// It uses the backend's KeyWaiter capability when present and polls GetKey
// with backoff otherwise, or when the KeyWaiter declines with an error
// whose Code is Unimplemented.
//
// When ctx has no deadline WaitKey waits at most the Store's max wait
// (default 1 min, see [WithMaxWait]) and then returns [ErrInFlight]: the key
// is still in flight. Close makes a waiting WaitKey
// return ErrClosed at once.
func (s *Store) WaitKey(ctx context.Context, k KeyRef) (KeyRecord, error) {
	v := validator{op: "WaitKey"}
	v.scope(k.Scope)
	v.ident("key", k.Key)
	if err := s.begin(ctx, &v); err != nil {
		return KeyRecord{}, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, ok := ctx.Deadline(); !ok {
		var cancelT context.CancelFunc
		wctx, cancelT = context.WithTimeout(wctx, s.cfg.maxWait)
		defer cancelT()
	}
	// Close wakes the wait however the backend waits.
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-wctx.Done():
		}
	}()

	var rec KeyRecord
	var err error = ErrUnimplemented
	if w, ok := s.b.(contract.KeyWaiter); ok {
		// One span for the whole wait (not bounded by the operation
		// timeout: the max wait bounds it).
		o := s.obs()
		octx, c := o.start(wctx, v.op)
		rec, err = w.WaitKey(octx, k)
		err = wrapErr(v.op, err)
		endObs(o, octx, v.op, &c, &rec, err)
	}
	if CodeOf(err) == contract.Unimplemented {
		// No KeyWaiter, or one that declines the capability at run time
		// (a decorator over a backend without it): poll.
		rec, err = s.pollKey(wctx, k)
	}
	switch {
	case err == nil:
		return rec, nil
	case s.closed.Load() && ctx.Err() == nil:
		return KeyRecord{}, &contract.Error{Code: contract.Closed, Op: v.op, Msg: "store is closed"}
	case ctx.Err() == nil && wctx.Err() != nil && CodeOf(err) == contract.Canceled:
		return KeyRecord{}, &contract.Error{Code: contract.InFlight, Op: v.op, Msg: "key still in flight after the Store's max wait (" + s.cfg.maxWait.String() + ")", Err: err}
	}
	return KeyRecord{}, err
}

// pollKey is WaitKey for a backend without the KeyWaiter capability: it
// reads the key with backoff (see WithWaitPolling) until it is completed,
// gone, or a read fails for good.
func (s *Store) pollKey(ctx context.Context, k KeyRef) (KeyRecord, error) {
	const op = "WaitKey"
	var (
		rec KeyRecord
		err error
	)
	bo := backoff{first: s.cfg.pollMin, max: s.cfg.pollMax}
	if cerr := bo.retry(ctx, op, func() bool {
		rec, err = bounded(s, ctx, op, func(ctx context.Context) (KeyRecord, error) {
			return s.b.GetKey(ctx, k)
		})
		switch {
		case err == nil:
			return rec.State != contract.KeyCompleted && rec.State != contract.KeyExpired
		case CodeOf(err) == contract.Canceled && ctx.Err() != nil:
			return true // retry reports the end of ctx
		}
		return Retryable(err)
	}); cerr != nil {
		return KeyRecord{}, cerr
	}
	if err != nil {
		return KeyRecord{}, err
	}
	return rec, nil
}

// --- leases ---

// AcquireLease grants a lease with a fresh fencing token, or returns
// ErrLeaseBusy while another grant (even the same owner's) is live. A zero
// TTL means the default lease TTL. It does not wait, and does not queue
// behind this Store's [Store.WaitLease] callers: it may take a lease that
// has just been freed ahead of them.
func (s *Store) AcquireLease(ctx context.Context, req LeaseRequest) (Lease, error) {
	req, v := s.checkLeaseRequest("AcquireLease", req)
	if err := s.begin(ctx, &v); err != nil {
		return Lease{}, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) (Lease, error) {
		return s.b.AcquireLease(ctx, req)
	})
}

// checkLeaseRequest fills req's defaults and validates it for op.
func (s *Store) checkLeaseRequest(op string, req LeaseRequest) (LeaseRequest, validator) {
	v := validator{op: op}
	if req.TTL == 0 {
		req.TTL = s.cfg.leaseTTL
	}
	v.scope(req.Scope)
	if _, _, ok := contract.SplitPermit(req.Resource); ok {
		v.fail(`resource names a permit: take permits with AcquirePermit or WaitPermit`)
	}
	v.ident("resource", req.Resource)
	v.ident("owner", req.Owner)
	v.ttl(req.TTL, s.MinTTL())
	v.leaseValue(req.Value)
	return req, v
}

// AcquirePermit grants one of req.Permits permits of a fenced semaphore on
// req.Resource, or returns ErrLeaseBusy while all of them are held. The
// Lease it returns names the permit (its Resource is
// contract.PermitResource(req.Resource, n)) and works like any lease:
// RenewLease, ReleaseLease, GetLease, Fence, FenceTx. Its token is greater
// than every token issued for the resource and its permits. Each permit
// expires, and is taken over, on its own, with the same tolerance rules as
// a lease. Keep Permits the same in every caller: a caller asking for fewer
// permits only looks at the first ones. Like AcquireLease it neither waits
// nor queues (see [Store.WaitPermit]).
func (s *Store) AcquirePermit(ctx context.Context, req PermitRequest) (Lease, error) {
	req, v := s.checkPermitRequest("AcquirePermit", req)
	if err := s.begin(ctx, &v); err != nil {
		return Lease{}, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) (Lease, error) {
		if pa, ok := s.b.(contract.PermitAcquirer); ok {
			l, err := pa.AcquirePermit(ctx, req)
			if CodeOf(err) != contract.Unimplemented {
				return l, err
			}
		}
		return s.acquirePermitByLeases(ctx, req)
	})
}

// checkPermitRequest fills req's defaults and validates it for op.
func (s *Store) checkPermitRequest(op string, req PermitRequest) (PermitRequest, validator) {
	lr, v := s.checkLeaseRequest(op, LeaseRequest{Scope: req.Scope, Resource: req.Resource, Owner: req.Owner, TTL: req.TTL, Value: req.Value})
	req.TTL = lr.TTL
	if req.Permits < 1 || req.Permits > contract.MaxPermits {
		v.fail("permits must be within 1 and 1000")
	}
	return req, v
}

// acquirePermitByLeases is AcquirePermit without the capability: permits 1
// to req.Permits in turn, the first granted wins.
func (s *Store) acquirePermitByLeases(ctx context.Context, req PermitRequest) (Lease, error) {
	for n := 1; n <= req.Permits; n++ {
		l, err := s.b.AcquireLease(ctx, req.Lease(n))
		if err == nil || !errors.Is(err, ErrLeaseBusy) {
			return l, err
		}
	}
	return Lease{}, &contract.Error{Code: contract.LeaseBusy, Msg: "every permit is held"}
}

// WatchLease returns a channel that receives a signal after the lease on
// (scope, resource), or any permit of it, is granted, released or deleted
// (see contract.LeaseWatcher), until ctx ends. Signals coalesce and may be
// spurious; an expiry alone sends none. A backend without the capability
// returns an error with Code Unimplemented (errors.Is(err,
// ErrUnimplemented)): poll GetLease instead.
func (s *Store) WatchLease(ctx context.Context, scope Scope, resource string) (<-chan struct{}, error) {
	v := validator{op: "WatchLease"}
	v.scope(scope)
	v.leaseResource("resource", resource)
	if err := s.begin(ctx, &v); err != nil {
		return nil, err
	}
	w, ok := s.b.(contract.LeaseWatcher)
	if !ok {
		return nil, wrapErr(v.op, &contract.Error{Code: contract.Unimplemented, Msg: "the backend cannot watch leases"})
	}
	ch, err := w.WatchLease(ctx, scope, resource)
	if err != nil {
		return nil, wrapErr(v.op, err)
	}
	return ch, nil
}

// RenewLease extends a still-valid lease to now+ttl, keeping its token. A
// lease that expired, was released or was taken over → ErrFenced. A zero TTL
// means the default lease TTL; any other must be at least [Store.MinTTL].
func (s *Store) RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	v := validator{op: "RenewLease"}
	if ttl == 0 {
		ttl = s.cfg.leaseTTL
	}
	v.lease(l)
	v.ttl(ttl, s.MinTTL())
	if err := s.begin(ctx, &v); err != nil {
		return Lease{}, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) (Lease, error) {
		return s.b.RenewLease(ctx, l, ttl)
	})
}

// ReleaseLease gives a lease up; false if l no longer holds it. This
// Store's own waiters for the lease ([Store.WaitLease], [Store.WaitPermit]
// for a permit) are woken at once when the Store has no working watch on
// it; with one, they learn of the release from the watch's signal, like
// other Stores' waiters (see WaitLease's Order).
func (s *Store) ReleaseLease(ctx context.Context, l Lease) (bool, error) {
	v := validator{op: "ReleaseLease"}
	v.lease(l)
	if err := s.begin(ctx, &v); err != nil {
		return false, err
	}
	since := time.Now()
	ok, err := bounded(s, ctx, v.op, func(ctx context.Context) (bool, error) {
		return s.b.ReleaseLease(ctx, l)
	})
	if ok || err != nil { // released, or it may have been
		s.waits.changed(l.Scope, l.Resource, since)
	}
	return ok, err
}

// GetLease returns the stored lease on a resource (compare ExpiresAt to see
// whether it is live) or ErrNotFound.
func (s *Store) GetLease(ctx context.Context, scope Scope, resource string) (Lease, error) {
	v := validator{op: "GetLease"}
	v.scope(scope)
	v.leaseResource("resource", resource)
	if err := s.begin(ctx, &v); err != nil {
		return Lease{}, err
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) (Lease, error) {
		return s.b.GetLease(ctx, scope, resource)
	})
}

// --- maintenance ---

// Cleanup runs one bounded cleanup pass: terminal workflows not updated for
// TerminalAge, completed keys past retention, and claims and leases expired
// beyond the clock tolerance. Call it again while the result's More is true.
// Limit 0 means 1000 per kind. A pass that deleted leases wakes this
// Store's lease waiters ([Store.WaitLease], [Store.WaitPermit]) as
// ReleaseLease does.
func (s *Store) Cleanup(ctx context.Context, req CleanupRequest) (CleanupResult, error) {
	v := validator{op: "Cleanup"}
	req = v.cleanup(req)
	if err := s.begin(ctx, &v); err != nil {
		return CleanupResult{}, err
	}
	since := time.Now()
	res, err := bounded(s, ctx, v.op, func(ctx context.Context) (CleanupResult, error) {
		return s.b.Cleanup(ctx, req)
	})
	if res.Leases > 0 || err != nil { // leases freed, or maybe: wake this Store's waiters
		s.waits.changedAll(since)
	}
	return res, err
}

// CountCleanup reports what Cleanup would delete now, deleting nothing. It
// returns ErrUnimplemented when the backend lacks contract.CleanupCounter.
func (s *Store) CountCleanup(ctx context.Context, req CleanupRequest) (CleanupResult, error) {
	v := validator{op: "CountCleanup"}
	req = v.cleanup(req)
	if err := s.begin(ctx, &v); err != nil {
		return CleanupResult{}, err
	}
	c, ok := s.b.(contract.CleanupCounter)
	if !ok {
		return CleanupResult{}, &contract.Error{Code: contract.Unimplemented, Op: v.op, Msg: "backend cannot count cleanup candidates"}
	}
	return bounded(s, ctx, v.op, func(ctx context.Context) (CleanupResult, error) {
		return c.CountCleanup(ctx, req)
	})
}

// MaxSnapshotBytes is the largest workflow snapshot the Store accepts.
func (s *Store) MaxSnapshotBytes() int { return s.cfg.maxSnapshot }

// MaxBodyBytes is the largest outcome body the Store accepts.
func (s *Store) MaxBodyBytes() int { return s.cfg.maxBody }

// DefaultTTLs returns the TTLs the Store uses for a claim and a lease
// requested with a zero TTL (see [WithDefaultTTLs]).
func (s *Store) DefaultTTLs() (claim, lease time.Duration) { return s.cfg.claimTTL, s.cfg.leaseTTL }

// DeleteRecord deletes one record whatever its state: a workflow by id
// (kind [KindWorkflow]), an idempotency key by key ([KindKey]), or a lease
// by resource ([KindLease]). It reports whether the record existed. It is
// an operator's tool, used by "durable delete": the way to remove a record
// that cannot be decoded (ErrCorrupt), or a claim or lease known to be
// abandoned. Deleting a live claim or lease lets another caller take it
// over at once, so the holder's fenced writes and completion are rejected
// from then on. Deleting a lease wakes this Store's waiters for it
// ([Store.WaitLease], [Store.WaitPermit]) as ReleaseLease does.
//
// It returns ErrUnimplemented when the backend lacks the
// contract.RecordDeleter capability.
func (s *Store) DeleteRecord(ctx context.Context, kind RecordKind, scope Scope, id string) (bool, error) {
	v := validator{op: "DeleteRecord"}
	v.scope(scope)
	switch kind {
	case KindWorkflow:
		v.ident("workflow id", id)
	case KindKey:
		v.ident("key", id)
	case KindLease:
		v.leaseResource("resource", id)
	default:
		v.fail("record kind must be workflow, key or lease")
	}
	if err := s.begin(ctx, &v); err != nil {
		return false, err
	}
	d, ok := s.b.(contract.RecordDeleter)
	if !ok {
		return false, &contract.Error{Code: contract.Unimplemented, Op: v.op, Msg: "backend cannot delete single records"}
	}
	since := time.Now()
	ok, err := bounded(s, ctx, v.op, func(ctx context.Context) (bool, error) {
		return d.DeleteRecord(ctx, kind, scope, id)
	})
	if kind == KindLease && (ok || err != nil) { // wake this Store's waiters for it
		s.waits.changed(scope, id, since)
	}
	return ok, err
}
