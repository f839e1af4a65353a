package durable

import (
	"context"
	"errors"
	"time"

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

// LeaseOptions configures [Store.RunWithLease]. The zero value does not
// wait for a held lease (RunWithLease returns [ErrLeaseBusy] at once) and
// renews every TTL/3. The lease's TTL is the one in the [LeaseRequest].
//
// Waiting is opt-in, and spelled the same way in [DoOptions]: Wait to
// wait as long as ctx allows, MaxWait to wait at most that long.
type LeaseOptions struct {
	// Wait makes RunWithLease wait, with jittered backoff, until the lease
	// is free, instead of returning ErrLeaseBusy at once. It waits as long
	// as ctx allows, or MaxWait.
	Wait bool
	// MaxWait bounds how long RunWithLease waits for a held lease before it
	// returns ErrLeaseBusy. A positive MaxWait implies Wait; 0 means as
	// long as ctx allows when Wait is set.
	MaxWait time.Duration
	// RenewEvery is the renewal period; 0 means TTL/3. It must be shorter
	// than TTL minus the backend's clock tolerance.
	RenewEvery time.Duration
	// MaxBackoff caps the pause between acquisition attempts while waiting;
	// 0 means the smaller of TTL/2 and DefaultLeaseMaxBackoff (5 s).
	MaxBackoff time.Duration
}

// RunWithLease runs fn while holding the lease req asks for (a zero req.TTL
// means the Store's default lease TTL; any other must be at least
// [Store.MinTTL], the clock tolerance plus 1 s, and should be several times
// the tolerance so that renewals have room).
//
// It acquires the lease (once, or with opts.Wait or opts.MaxWait until it
// frees), renews it in the background every opts.RenewEvery, and releases
// it when fn returns. The leases of all the RunWithLease calls running on
// one Store are renewed together: one background loop per Store sends, per
// round, one [Store.RenewLeases] call for every lease that is due (or due
// within half its period, renewed early so that the leases share one
// schedule), so a worker holding many leases makes one round trip per
// round, not one per lease. Each lease keeps its own TTL, period and
// deadline, and a rejected renewal ends only its own fn.
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
// The returned error says why it ended: ErrLeaseBusy (not acquired, or not
// within opts.MaxWait), a context error (ctx ended), an error with Code
// Fenced and Op "RunWithLease" when the lease was lost (joined with fn's
// error, if any), or fn's own error. If fn panics or calls runtime.Goexit
// (as t.FailNow does), the renewals stop, the lease is released and the
// panic or Goexit continues. The release runs detached from ctx's
// cancellation, so a caller that gives up still frees the lease.
func (s *Store) RunWithLease(ctx context.Context, req LeaseRequest, opts LeaseOptions, fn func(ctx context.Context, l Lease) error) error {
	const op = "RunWithLease"
	if req.TTL == 0 {
		req.TTL = s.cfg.leaseTTL
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = min(req.TTL/2, DefaultLeaseMaxBackoff)
	}
	switch {
	case fn == nil:
		return invalid(op, "function must not be nil")
	case opts.MaxBackoff < 0 || opts.MaxWait < 0:
		return invalid(op, "max backoff and max wait must not be negative")
	}
	tol := s.ClockTolerance()
	var err error
	if opts.RenewEvery, err = renewPeriod(op, req.TTL, opts.RenewEvery, tol); err != nil {
		return err
	}

	lease, sent, err := s.acquireForRun(ctx, req, opts)
	if err != nil {
		return err
	}

	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The Store's shared keep-alive renews this lease together with every
	// other lease RunWithLease keeps on it (one RenewLeases call per
	// round), each with its own period and deadline (renew.go).
	r := &keeper{s: s, op: op, what: "lease", ttl: req.TTL, tol: tol, every: opts.RenewEvery, cancel: cancel}
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

// acquireForRun acquires the lease, waiting with backoff when asked to. It
// returns the local time the successful request was sent.
func (s *Store) acquireForRun(ctx context.Context, req LeaseRequest, opts LeaseOptions) (Lease, time.Time, error) {
	wait := opts.Wait || opts.MaxWait > 0
	wctx := ctx
	if opts.MaxWait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, opts.MaxWait)
		defer cancel()
	}
	var (
		l    Lease
		sent time.Time
		err  error
	)
	bo := backoff{first: min(leaseFirstBackoff, opts.MaxBackoff), max: opts.MaxBackoff, jitter: true}
	cerr := bo.retry(wctx, "RunWithLease", func() bool {
		sent = time.Now()
		l, err = s.AcquireLease(ctx, req)
		return err != nil && wait && (errors.Is(err, ErrLeaseBusy) || Retryable(err))
	})
	switch {
	case err == nil:
		return l, sent, nil
	case cerr != nil && ctx.Err() != nil:
		return Lease{}, time.Time{}, cerr // the caller's context ended
	}
	// Not waiting, a final error, or MaxWait passed: the last attempt's
	// error says why (ErrLeaseBusy while the lease stays held).
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
