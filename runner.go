package durable

import (
	"context"
	"errors"
	"time"
)

// LeaseOptions configures [Store.RunWithLease].
type LeaseOptions struct {
	// TTL of the lease; 0 means the Store's default lease TTL.
	TTL time.Duration
	// RenewEvery is the renewal period; 0 means TTL/3. It must be shorter
	// than TTL minus the backend's clock tolerance.
	RenewEvery time.Duration
	// Wait makes RunWithLease wait, with jittered backoff, until the lease is
	// free or ctx ends. Without it a held lease returns ErrLeaseBusy at once.
	Wait bool
	// MaxBackoff caps the wait between acquisition attempts; 0 means the
	// smaller of TTL/2 and 5 s.
	MaxBackoff time.Duration
}

// RunWithLease runs fn while holding the lease req asks for.
//
// It acquires the lease (once, or with opts.Wait until it frees), renews it
// in the background every opts.RenewEvery, and releases it when fn returns.
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
// The returned error says why it ended: ErrLeaseBusy (not acquired),
// a context error (ctx ended), an error with Code Fenced and Op
// "RunWithLease" when the lease was lost (joined with fn's error, if any),
// or fn's own error. If fn panics or calls runtime.Goexit (as t.FailNow
// does), the renewals stop, the lease is released and the panic or Goexit
// continues.
func (s *Store) RunWithLease(ctx context.Context, req LeaseRequest, opts LeaseOptions, fn func(ctx context.Context, l Lease) error) error {
	const op = "RunWithLease"
	if req.TTL == 0 {
		req.TTL = s.cfg.leaseTTL
	}
	if opts.TTL != 0 {
		req.TTL = opts.TTL
	}
	tol := s.ClockTolerance()
	if opts.RenewEvery == 0 {
		opts.RenewEvery = req.TTL / 3
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = min(req.TTL/2, 5*time.Second)
	}
	switch {
	case fn == nil:
		return invalid(op, "function must not be nil")
	case opts.RenewEvery < 0 || opts.RenewEvery >= req.TTL-tol:
		return invalid(op, "renew period must be positive and shorter than TTL minus the clock tolerance")
	case opts.MaxBackoff < 0:
		return invalid(op, "max backoff must not be negative")
	}

	lease, sent, err := s.acquireForRun(ctx, req, opts)
	if err != nil {
		return err
	}

	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := &keeper{s: s, op: "RunWithLease", what: "lease", ttl: req.TTL, tol: tol, every: opts.RenewEvery, cancel: cancel,
		renew: func(ctx context.Context) error {
			_, err := s.RenewLease(ctx, lease, req.TTL)
			return err
		}}
	r.start(ctx, sent)

	returned := false
	defer func() {
		if !returned {
			// fn panicked or called runtime.Goexit (t.FailNow does): stop
			// the renewals and give the lease up; the panic or Goexit
			// continues after this.
			r.stop()
			s.releaseDetached(lease)
		}
	}()
	fnErr := fn(fnCtx, lease)
	returned = true
	lost := r.stop()
	s.releaseDetached(lease)
	if lost != nil {
		return errors.Join(lost, fnErr)
	}
	return fnErr
}

// acquireForRun acquires the lease, waiting with backoff when asked to. It
// returns the local time the successful request was sent.
func (s *Store) acquireForRun(ctx context.Context, req LeaseRequest, opts LeaseOptions) (Lease, time.Time, error) {
	backoff := min(50*time.Millisecond, opts.MaxBackoff)
	for {
		sent := time.Now()
		l, err := s.AcquireLease(ctx, req)
		if err == nil {
			return l, sent, nil
		}
		busy := errors.Is(err, ErrLeaseBusy)
		if !opts.Wait || !(busy || Retryable(err)) {
			return Lease{}, time.Time{}, err
		}
		if err := jitterSleep(ctx, "RunWithLease", backoff); err != nil {
			return Lease{}, time.Time{}, err
		}
		backoff = min(backoff*2, opts.MaxBackoff)
	}
}

// releaseDetached releases l even if the caller's context has ended; a
// failure is only logged, since the lease then simply expires.
func (s *Store) releaseDetached(l Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.ReleaseLease(ctx, l); err != nil {
		s.cfg.logger.Warn("durable: releasing lease failed; it will expire", "resource", l.Resource, "token", l.Token, "err", err)
	}
}
