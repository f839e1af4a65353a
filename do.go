package durable

import (
	"context"
	"errors"
	"time"

	"github.com/durable-go/durable/contract"
)

// errInFlight is what Do returns when another caller holds a live claim:
// [ErrInFlight] (Code InFlight, which ErrLeaseBusy does not match) with the
// operation named.
var errInFlight = &contract.Error{Code: contract.InFlight, Op: "Do", Msg: "key is in flight"}

// Limits and defaults of [Store.Do].
const (
	// doMaxRounds bounds how many times Do claims the key while other
	// callers hold, release or abandon it.
	doMaxRounds = 64
	// doClaimRetries bounds how many times Do claims again, with the same
	// token, after a claim whose reply was lost (ErrOutcomeUnknown).
	doClaimRetries = 3
	// DefaultCompleteWithin is the default of DoOptions.CompleteWithin.
	DefaultCompleteWithin = 10 * time.Second
	// doBackoff is the pause before the second attempt to complete or
	// release; it doubles up to doMaxBackoff (see backoff).
	doBackoff    = 50 * time.Millisecond
	doMaxBackoff = time.Second
)

// DoOptions configures [Store.Do]. The zero value does not wait for
// another caller's claim (Do returns [ErrInFlight] at once), renews every
// TTL/3, tries for 10 s to store an outcome and keeps outcomes for the
// Store's key retention.
//
// Waiting is opt-in, and spelled the same way in [LeaseOptions]: Wait to
// wait as long as ctx allows, MaxWait to wait at most that long.
type DoOptions struct {
	// Wait makes Do wait, while another caller holds a live claim on the
	// key, for that caller's outcome (see Do) instead of returning
	// ErrInFlight at once. It waits as long as ctx allows, or MaxWait.
	Wait bool
	// MaxWait bounds how long Do waits for another caller's claim before it
	// returns ErrInFlight. A positive MaxWait implies Wait; 0 means as long
	// as ctx allows when Wait is set.
	MaxWait time.Duration
	// RenewEvery is the claim renewal period while fn runs; 0 means TTL/3.
	// It must be shorter than the TTL minus the backend's clock tolerance.
	RenewEvery time.Duration
	// Retain is how long the outcome is kept for replay; 0 means the
	// Store's key retention (see [WithKeyRetention]).
	Retain time.Duration
	// CompleteWithin bounds how long Do keeps trying to store fn's outcome
	// once fn has succeeded, or to release the claim once fn has failed:
	// retryable failures (and attempts that time out) are retried with a
	// growing pause, and the claim is renewed meanwhile. 0 means
	// DefaultCompleteWithin (10 s).
	CompleteWithin time.Duration
	// CallTimeout bounds each store call Do makes: every claim, and every
	// attempt to complete or release. When MaxWait is set, the claims and
	// waits together also end within MaxWait plus CallTimeout. 0 means no
	// bound of Do's own on claims (ctx's deadline and the Store's operation
	// timeout still apply) and 5 s for each attempt to complete or release.
	// WaitKey is bounded by MaxWait, not by CallTimeout. On an in-process
	// backend, whose calls cannot hang, no timer is armed per call (see
	// Do's Time bounds).
	CallTimeout time.Duration
}

// DoResult is what [Store.Do] returns.
type DoResult struct {
	// Outcome is the outcome of the call: fn's, or the stored one on a
	// replay.
	Outcome Outcome
	// Replayed is true when the outcome was stored by an earlier call and fn
	// did not run in this one.
	Replayed bool
	// Record is the key's completed record. It is zero when the outcome was
	// not stored (see Do's errors).
	Record KeyRecord
}

// Do runs fn at most once per idempotency key and gives every call with the
// same key the same outcome: the non-HTTP counterpart of the
// middleware/idempotency package.
//
// Do claims req's key (a zero req.TTL means the Store's default claim TTL)
// and acts on what it finds:
//
//   - Completed: Do returns the stored outcome with Replayed set; fn does
//     not run.
//   - Completed so long ago that the outcome's retention has ended (only
//     the key's tombstone is left, see [WithTombstoneRetention]): Do returns
//     [ErrOutcomeExpired]; fn does not run, and must not for this key.
//   - In flight (another caller holds a live claim): by default Do returns
//     [ErrInFlight] at once, with the claim's record. With opts.Wait (or a
//     positive opts.MaxWait) Do waits for that caller with [Store.WaitKey]
//     and returns its outcome with Replayed set. If the other caller
//     releases the key, or abandons it so that its claim expires, Do claims
//     the key again and may run fn itself. Do waits as long as ctx allows
//     or opts.MaxWait says, then returns ErrInFlight. It also gives up with
//     ErrInFlight after 64 rounds of claims lost to other callers. If ctx
//     ends while Do waits, Do returns ctx's error
//     (errors.Is(err, context.Canceled) or context.DeadlineExceeded).
//   - New or reclaimed: Do runs fn and renews the claim in the background
//     every opts.RenewEvery while fn runs. fn's context is cancelled, with a
//     cause for which errors.Is(cause, ErrFenced) holds, as soon as the
//     claim can no longer be proven live: when a renewal is rejected, or
//     when no renewal has succeeded within TTL minus the clock tolerance of
//     the last successful one (measured locally from when it was sent, so
//     it errs early). Do still tries to store fn's outcome then; the store
//     accepts it only if no one has taken the claim over.
//
// Do claims with one claim token for the whole call (req.Token, or a fresh
// one from [NewClaimToken] when it is empty). A claim whose reply is lost
// ([ErrOutcomeUnknown]: it may have been stored) is tried again with the
// same token, up to 3 times with a growing pause, within the claim's time
// bound (opts.CallTimeout, when set): if the lost claim was stored, the
// retry gets it back as the caller's own instead of finding it in flight.
// If the reply is still lost, Do returns the error.
//
// When fn returns:
//
//   - fn returns an error: Do releases the claim, so that a retry runs fn
//     again, and returns fn's error unchanged. If the claim had been lost,
//     Do returns an error with Code Fenced and Op "Do" that wraps fn's.
//   - fn panics (or calls runtime.Goexit): Do releases the claim and lets the
//     panic continue.
//   - fn succeeds: Do stores the outcome with [Store.CompleteKey] and returns
//     it with Replayed false. It keeps renewing the claim, and retries
//     failures that may be transient (unavailable, outcome unknown, an
//     attempt timed out) with a growing pause, for up to
//     opts.CompleteWithin (default 10 s); a completion retried with the
//     same token is safe, it returns the stored record. If the outcome
//     still cannot be stored, Do returns the error, with DoResult.Outcome
//     set to fn's outcome and a zero Record, and does not release the
//     claim: fn ran, and releasing would let a retry run it again at once.
//     The claim stays until its TTL ends, so retries meanwhile find it in
//     flight. If the completion is rejected with ErrFenced, the claim was
//     lost (taken over, or expired and reclaimed): Do returns that error.
//
// Completion and release run on a context detached from ctx's cancellation,
// so a caller that gives up still releases its claim, or stores an outcome
// it already produced. Releasing is bounded by opts.CompleteWithin too; a
// release that fails is logged, and the claim then expires after its TTL.
// Do stops its renewals before it returns and leaves no goroutine or timer
// behind.
//
// # Time bounds
//
// With opts.CallTimeout set, every store call Do makes is bounded by it, so
// a hung store cannot hold Do longer than: the claims and waits (one
// CallTimeout without Wait, MaxWait plus CallTimeout with MaxWait), then
// fn, then opts.CompleteWithin to complete or release. A claim that times
// out returns the Store's error for an ended context
// (errors.Is(err, context.DeadlineExceeded)).
//
// On an in-process backend ([contract.InProcess], such as the memory
// backend) no store call can hang, so Do arms no timer or context of its
// own to bound one: a claim, completion or release returns as soon as the
// backend's locks allow. The bounds that can still matter are kept: with
// MaxWait, no claim starts after MaxWait plus CallTimeout (Do returns
// ErrInFlight), each wait is bounded by MaxWait, retries of a completion or
// release stop after opts.CompleteWithin (its timer is armed only when a
// first attempt fails and must be retried), and fn's context is still
// derived from ctx and cancelled when the claim is lost.
//
// # Hazard
//
// Do runs fn at most once per key only while outcomes can be stored. When
// fn succeeded but its outcome was not stored (the store stayed unavailable
// for opts.CompleteWithin, the outcome is too large, the claim was lost), a
// retry after the claim's TTL has ended reclaims the key and runs fn again
// (or at once, if the claim was lost to another caller). A fn that ignores
// its context can also outlive a lost claim and overlap with a second run.
// Where a duplicate effect is unacceptable, make the effect itself
// conditional, for example with a workflow compare-and-set or a fenced
// write.
func (s *Store) Do(ctx context.Context, req ClaimRequest, opts DoOptions, fn func(ctx context.Context) (Outcome, error)) (DoResult, error) {
	if fn == nil {
		return DoResult{}, invalid("Do", "function must not be nil")
	}
	return s.claimThen(ctx, "Do", req, opts, func(req ClaimRequest, token string, sent time.Time, opts DoOptions) (DoResult, error) {
		return s.runClaimed(ctx, req, token, sent, opts, fn)
	})
}

// claimThen is the claim phase of Do and DoTx: it applies the defaults,
// validates, chooses the call's claim token, claims the key (waiting for
// other callers as opts say) and calls run once the key is the caller's.
func (s *Store) claimThen(ctx context.Context, op string, req ClaimRequest, opts DoOptions,
	run func(req ClaimRequest, token string, sent time.Time, opts DoOptions) (DoResult, error)) (DoResult, error) {
	inFlight := errInFlight
	if op != "Do" {
		inFlight = &contract.Error{Code: contract.InFlight, Op: op, Msg: "key is in flight"}
	}
	if req.TTL == 0 {
		req.TTL = s.cfg.claimTTL
	}
	if opts.CompleteWithin == 0 {
		opts.CompleteWithin = DefaultCompleteWithin
	}
	switch {
	case opts.MaxWait < 0 || opts.Retain < 0:
		return DoResult{}, invalid(op, "max wait and retain must not be negative")
	case opts.CompleteWithin < 0 || opts.CallTimeout < 0:
		return DoResult{}, invalid(op, "completion bound and call timeout must not be negative")
	}
	var err error
	if opts.RenewEvery, err = renewPeriod(op, req.TTL, opts.RenewEvery, s.ClockTolerance()); err != nil {
		return DoResult{}, err
	}
	if req.Token == "" {
		// One token for the whole call: a claim whose reply is lost comes
		// back as this call's own when claimed again.
		req.Token = NewClaimToken()
	}
	wait := opts.Wait || opts.MaxWait > 0
	var deadline, phaseEnd time.Time
	if opts.MaxWait > 0 {
		deadline = time.Now().Add(opts.MaxWait)
		phaseEnd = deadline.Add(opts.CallTimeout)
	}
	// claim makes one ClaimKey, bounded by opts.CallTimeout and the end of
	// the phase (end, when not zero); ok is false when no time is left.
	claim := func(end time.Time) (c Claim, sent time.Time, err error, ok bool) {
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if opts.CallTimeout > 0 {
			d := opts.CallTimeout
			if !end.IsZero() {
				d = min(d, time.Until(end))
			}
			if d <= 0 {
				return Claim{}, time.Time{}, nil, false
			}
			if !s.local {
				// An in-process call cannot hang: no timer for it.
				cctx, cancel = context.WithTimeout(ctx, d)
			}
		}
		sent = time.Now()
		c, err = s.ClaimKey(cctx, req) // validates req
		cancel()
		return c, sent, err, true
	}
	var last KeyRecord // the record of the last in-flight claim
	for range doMaxRounds {
		end := phaseEnd
		if end.IsZero() && opts.CallTimeout > 0 {
			end = time.Now().Add(opts.CallTimeout)
		}
		c, sent, err, ok := claim(phaseEnd)
		if !ok {
			return DoResult{Record: last}, inFlight
		}
		// A claim whose reply was lost may have been stored: claim again
		// with the same token, which gets the claim back if it was.
		for retry := 0; err != nil && CodeOf(err) == contract.OutcomeUnknown && retry < doClaimRetries; retry++ {
			pause := doBackoff << retry
			if opts.CallTimeout > 0 && time.Until(end) <= pause {
				break
			}
			if !sleepCtx(ctx, pause) {
				break
			}
			var c2 Claim
			var err2 error
			if c2, sent, err2, ok = claim(end); !ok {
				break
			}
			c, err = c2, err2
		}
		if err != nil {
			return DoResult{}, err
		}
		switch c.Kind {
		case ClaimCompleted:
			return replayed(c.Record), nil
		case ClaimNew, ClaimReclaimed:
			return run(req, c.Token, sent, opts)
		}
		last = c.Record
		// In flight. Wait at most one TTL at a time: WaitKey does not end
		// when a claim merely expires, and the next ClaimKey reclaims an
		// abandoned one.
		slice := req.TTL
		switch {
		case !wait:
			return DoResult{Record: c.Record}, inFlight
		case opts.MaxWait > 0:
			left := time.Until(deadline)
			if left <= 0 {
				return DoResult{Record: c.Record}, inFlight
			}
			slice = min(slice, left)
		}
		wctx, cancel := context.WithTimeout(ctx, slice)
		rec, err := s.WaitKey(wctx, req.KeyRef)
		cancel()
		switch {
		case err == nil && rec.State == contract.KeyExpired:
			// Completed long ago, only a tombstone left: the next ClaimKey
			// says ErrOutcomeExpired (or KeyConflict).
		case err == nil && rec.Outcome != nil && rec.Fingerprint == req.Fingerprint &&
			(req.WorkflowID == "" || rec.WorkflowID == req.WorkflowID):
			return replayed(rec), nil
		case err == nil, errors.Is(err, ErrNotFound):
			// Released, or completed for another request after a release
			// (the next ClaimKey reports the conflict): claim again.
		case ctx.Err() != nil:
			return DoResult{}, err
		case CodeOf(err) == contract.Canceled:
			// The slice ended: claim again.
		default:
			return DoResult{}, err
		}
	}
	return DoResult{}, inFlight
}

// sleepCtx pauses for d, or until ctx ends (then it reports false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// keepClaim starts renewing the claim of req held by token, requested at
// local time sent, for op; cancel ends the function's context when the
// claim is lost.
func (s *Store) keepClaim(ctx context.Context, op string, req ClaimRequest, token string, sent time.Time, opts DoOptions, cancel context.CancelCauseFunc) *keeper {
	r := &keeper{s: s, op: op, what: "claim", key: req.KeyRef, token: token, ttl: req.TTL, tol: s.ClockTolerance(), every: opts.RenewEvery, cancel: cancel}
	r.start(ctx, sent)
	return r
}

func replayed(rec KeyRecord) DoResult {
	r := DoResult{Replayed: true, Record: rec}
	if rec.Outcome != nil {
		r.Outcome = *rec.Outcome
	}
	return r
}

// runClaimed runs fn under the claim held by token, which was requested at
// local time sent.
func (s *Store) runClaimed(ctx context.Context, req ClaimRequest, token string, sent time.Time, opts DoOptions, fn func(context.Context) (Outcome, error)) (DoResult, error) {
	ref := req.KeyRef
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := s.keepClaim(ctx, "Do", req, token, sent, opts, cancel)

	returned := false
	defer func() {
		if !returned {
			// fn panicked or called runtime.Goexit: give the key back so
			// that a retry can run; the panic continues after this.
			if r.stop() == nil {
				s.doRelease(ctx, ref, token, opts)
			}
		}
	}()
	out, fnErr := fn(runCtx)
	returned = true

	if fnErr != nil {
		if lost := r.stop(); lost != nil {
			return DoResult{}, &contract.Error{Code: contract.Fenced, Op: "Do", Msg: "claim lost while the function ran", Err: fnErr}
		}
		s.doRelease(ctx, ref, token, opts)
		return DoResult{}, fnErr
	}
	// fn succeeded: its effect happened. Keep the claim renewed until the
	// outcome is stored or the bound ends, and never release it: a retry
	// must not run fn again while this call may still store the outcome.
	var rec KeyRecord
	err := s.doRetry(ctx, opts, func(ctx context.Context) error {
		var err error
		rec, err = s.CompleteKey(ctx, Completion{KeyRef: ref, Token: token, Outcome: out, Retain: opts.Retain})
		return err
	})
	r.stop()
	if err != nil {
		return DoResult{Outcome: out}, err
	}
	res := DoResult{Outcome: out, Record: rec}
	if rec.Outcome != nil {
		res.Outcome = *rec.Outcome
	}
	return res, nil
}

// doRelease releases the claim, even when ctx has ended. A failure is only
// logged: the claim then expires after its TTL.
func (s *Store) doRelease(ctx context.Context, ref KeyRef, token string, opts DoOptions) {
	err := s.doRetry(ctx, opts, func(ctx context.Context) error {
		_, err := s.ReleaseKey(ctx, ref, token)
		return err
	})
	if err != nil {
		s.cfg.logger.Warn("durable: releasing an idempotency claim failed; it will expire", "err", err)
	}
}

// doRetry calls f on a context detached from ctx's cancellation (see
// detach), each attempt bounded by opts.CallTimeout (or
// detachedCallTimeout), and again after a pause on a retryable error or
// when the attempt timed out, until opts.CompleteWithin has passed. It
// returns the last attempt's error.
//
// On an in-process backend (see [contract.InProcess]) an attempt cannot
// hang, so no attempt gets a timer of its own, and the first attempt, which
// usually settles it, runs without the CompleteWithin timer too: that timer
// is armed, for what is left of CompleteWithin, only when a retryable
// failure calls for a pause.
func (s *Store) doRetry(ctx context.Context, opts DoOptions, f func(context.Context) error) error {
	var err error
	start := time.Now()
	retrying := false
	if s.local {
		if err = f(context.WithoutCancel(ctx)); err == nil || !Retryable(err) {
			return err
		}
		retrying = true // pause before the next attempt
	}
	bctx, cancel := detach(ctx, opts.CompleteWithin-time.Since(start))
	defer cancel()
	per := opts.CallTimeout
	if per == 0 {
		per = detachedCallTimeout
	}
	bo := backoff{first: doBackoff, max: doMaxBackoff}
	_ = bo.retry(bctx, "Do", func() bool {
		if retrying {
			retrying = false
			return true
		}
		if s.local {
			err = f(bctx)
			return err != nil && Retryable(err)
		}
		actx, cancel := context.WithTimeout(bctx, per)
		err = f(actx)
		timedOut := actx.Err() != nil
		cancel()
		return err != nil && (Retryable(err) || timedOut && CodeOf(err) == contract.Canceled)
	})
	return err
}
