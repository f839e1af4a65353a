package durable

import (
	"context"
	"time"

	"github.com/durable-go/durable/contract"
	"go.uber.org/multierr"
)

// Defaults of [Store.RunWithLease]'s acquisition backoff.
const (
	// leaseFirstBackoff is the largest pause before the second acquisition
	// attempt; it doubles up to LeaseOptions.MaxBackoff (see backoff).
	leaseFirstBackoff = 50 * time.Millisecond
	// DefaultLeaseMaxBackoff caps the pause between acquisition attempts
	// when LeaseOptions.MaxBackoff is 0 (and TTL/2 is longer).
	DefaultLeaseMaxBackoff = 5 * time.Second
)

// LeaseOptions configures [Store.RunWithLease] and [Store.RunWithPermit].
// The zero value does not wait for a held lease (they return
// [ErrLeaseBusy] at once) and renews every TTL/3. The lease's TTL is the
// one in the [LeaseRequest] or [PermitRequest].
//
// Waiting is opt-in, and spelled the same way in [DoOptions]: Wait to
// wait as long as ctx allows, MaxWait to wait at most that long.
type LeaseOptions struct {
	// Wait makes RunWithLease wait until the lease is free instead of
	// returning ErrLeaseBusy at once, as [Store.WaitLease] waits (in this
	// Store's queue, in arrival order, woken by releases), with MaxBackoff
	// as its poll floor's cap. RunWithPermit waits as [Store.WaitPermit].
	// It waits as long as ctx allows, or MaxWait.
	Wait bool
	// MaxWait bounds how long RunWithLease waits for a held lease before it
	// returns ErrLeaseBusy. A positive MaxWait implies Wait; 0 means as
	// long as ctx allows when Wait is set.
	MaxWait time.Duration
	// RenewEvery is the renewal period; 0 means TTL/3. It must be shorter
	// than TTL minus the backend's clock tolerance.
	RenewEvery time.Duration
	// MaxBackoff caps the poll floor while waiting: the longest pause
	// between two attempts when no release wakes the waiter (a lease that
	// expires without being released is noticed within it). 0 means the
	// smaller of TTL/2 and DefaultLeaseMaxBackoff (5 s).
	MaxBackoff time.Duration
}

// RunWithLease runs fn while holding the lease req asks for (a zero req.TTL
// means the Store's default lease TTL; any other must be at least
// [Store.MinTTL], the clock tolerance plus 1 s, and should be several times
// the tolerance so that renewals have room).
//
// It acquires the lease (once, or with opts.Wait or opts.MaxWait as
// [Store.WaitLease] does, until it frees), renews it in the background
// every opts.RenewEvery, and releases it when fn returns. The leases of all
// the RunWithLease and RunWithPermit calls running on one Store are renewed
// together: one background loop per Store sends, per round, one
// [Store.RenewLeases] call for every lease that is due (or due within half
// its period, renewed early so that the leases share one schedule), so a
// worker holding many leases makes one round trip per round, not one per
// lease. Each lease keeps its own TTL, period and deadline, and a rejected
// renewal ends only its own fn.
//
// fn receives the lease; pass l.Fence() with its writes so that they are
// rejected if the lease is lost. The token never changes while fn runs.
//
// fn's context is cancelled as soon as the lease can no longer be proven
// valid: when a renewal is rejected, or when no renewal has succeeded by
// TTL − tolerance after the last successful one was sent (measured on the
// local monotonic clock from the moment the request left, so it errs early).
// Another owner can take over only after TTL + tolerance on the store clock,
// so fn's context ends before anyone else can hold the lease.
//
// The returned error says why it ended: ErrInvalidArgument (a request
// AcquireLease would reject, or bad options), ErrLeaseBusy (not acquired,
// or not within opts.MaxWait), a context error (ctx ended), ErrClosed (the
// Store closed while it waited), an error with Code Fenced and Op
// "RunWithLease" when the lease was lost (joined with fn's error, if any),
// or fn's own error. If fn panics or calls runtime.Goexit (as t.FailNow
// does), the renewals stop, the lease is released and the panic or Goexit
// continues. The release runs detached from ctx's cancellation, so a caller
// that gives up still frees the lease; it wakes this Store's next waiter at
// once.
func (s *Store) RunWithLease(ctx context.Context, req LeaseRequest, opts LeaseOptions, fn func(ctx context.Context, l Lease) error) error {
	const op = "RunWithLease"
	req, v := s.checkLeaseRequest(op, req)
	if v.err != nil {
		return v.err
	}
	return s.runHeld(ctx, op, req.TTL, opts, s.leaseWait(op, req, backoff{}), fn)
}

// RunWithPermit runs fn while holding one permit of the fenced semaphore
// req asks for, exactly as [Store.RunWithLease] runs it while holding a
// lease: it acquires a permit (once, or with opts.Wait or opts.MaxWait as
// [Store.WaitPermit] does), renews it in the background with the Store's
// other leases, cancels fn's context as soon as the permit can no longer
// be proven valid, and releases it when fn returns. fn receives the
// permit's lease (its Resource names the permit, "resource#n"); pass
// l.Fence() with its writes. ErrLeaseBusy means every permit was held (or
// still was after opts.MaxWait).
func (s *Store) RunWithPermit(ctx context.Context, req PermitRequest, opts LeaseOptions, fn func(ctx context.Context, l Lease) error) error {
	const op = "RunWithPermit"
	req, v := s.checkPermitRequest(op, req)
	if v.err != nil {
		return v.err
	}
	return s.runHeld(ctx, op, req.TTL, opts, s.permitWait(op, req, backoff{}), fn)
}

// runHeld is RunWithLease and RunWithPermit: acquire with sp (its floor
// set here from opts), keep the lease alive while fn runs, release it.
func (s *Store) runHeld(ctx context.Context, op string, ttl time.Duration, opts LeaseOptions, sp waitSpec, fn func(ctx context.Context, l Lease) error) error {
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = min(ttl/2, DefaultLeaseMaxBackoff)
	}
	switch {
	case fn == nil:
		return invalid(op, "function must not be nil")
	case opts.MaxBackoff < 0 || opts.MaxWait < 0:
		return invalid(op, "max backoff and max wait must not be negative")
	}
	tol := s.ClockTolerance()
	var err error
	if opts.RenewEvery, err = renewPeriod(op, ttl, opts.RenewEvery, tol); err != nil {
		return err
	}
	if err := s.begin(ctx, &validator{op: op}); err != nil {
		return err
	}
	sp.floor = backoff{first: min(leaseFirstBackoff, opts.MaxBackoff), max: opts.MaxBackoff, jitter: true}

	lease, sent, err := s.acquireForRun(ctx, sp, opts)
	if err != nil {
		return err
	}

	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The Store's shared keep-alive renews this lease together with every
	// other lease RunWithLease keeps on it (one RenewLeases call per
	// round), each with its own period and deadline (renew.go).
	r := &keeper{s: s, op: op, what: "lease", ttl: ttl, tol: tol, every: opts.RenewEvery, cancel: cancel}
	h := s.keepLease(r, lease, sent)

	returned := false
	defer func() {
		if !returned {
			// fn panicked or called runtime.Goexit (t.FailNow does): stop
			// the renewals and give the lease up; the panic or Goexit
			// continues after this.
			s.unkeep(h)
			s.releaseDetached(ctx, lease)
		}
	}()
	fnErr := fn(fnCtx, lease)
	returned = true
	lost := s.unkeep(h)
	s.releaseDetached(ctx, lease)
	if lost != nil {
		return multierr.Combine(lost, fnErr)
	}
	return fnErr
}

// acquireForRun acquires the lease: one attempt, or, when opts ask to
// wait, in the Store's queue (waitLease) for as long as ctx and
// opts.MaxWait allow. It returns the local time the successful request was
// sent.
func (s *Store) acquireForRun(ctx context.Context, sp waitSpec, opts LeaseOptions) (Lease, time.Time, error) {
	if !opts.Wait && opts.MaxWait <= 0 {
		sent := time.Now()
		l, err := sp.attempt(ctx)
		return l, sent, err
	}
	wctx := ctx
	if opts.MaxWait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, opts.MaxWait)
		defer cancel()
	}
	l, sent, last, err := s.waitLease(wctx, sp)
	switch {
	case err == nil:
		return l, sent, nil
	case CodeOf(err) == contract.Canceled && ctx.Err() == nil && wctx.Err() != nil:
		// MaxWait passed: the last attempt's error says why (ErrLeaseBusy
		// while the lease stays held).
		if last != nil {
			return Lease{}, time.Time{}, last
		}
		return Lease{}, time.Time{}, &contract.Error{Code: contract.LeaseBusy, Op: sp.op,
			Msg: "not granted within MaxWait (" + opts.MaxWait.String() + "): earlier waiters of this Store were still queued"}
	}
	return Lease{}, time.Time{}, err
}

// releaseDetached releases l even if ctx has ended; a failure is only
// logged, since the lease then simply expires.
func (s *Store) releaseDetached(ctx context.Context, l Lease) {
	ctx, cancel := detach(ctx, detachedCallTimeout)
	defer cancel()
	if _, err := s.ReleaseLease(ctx, l); err != nil {
		s.cfg.logger.Warn("durable: releasing lease failed; it will expire", "resource", l.Resource, "token", l.Token, "err", err)
	}
}
