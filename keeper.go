package durable

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/renewal"
)

// renewRetryDivisor: a failed renewal is retried after
// RenewEvery/renewRetryDivisor (plus 1 ms, never more than RenewEvery).
const renewRetryDivisor = renewal.RetryDivisor

// renewPeriod applies the renewal rule of [Store.Do] and
// [Store.RunWithLease] (stated once in internal/renewal) to a TTL and a
// requested period (0 for the default, TTL/3), for op's invalid-argument
// error.
func renewPeriod(op string, ttl, every, tol time.Duration) (time.Duration, error) {
	every, ok := renewal.Period(ttl, every, tol)
	if !ok {
		return 0, invalid(op, "renew period must be positive and shorter than TTL minus the clock tolerance")
	}
	return every, nil
}

// keeper keeps a claim or a lease alive while a function runs, following
// the renewal rule (package internal/renewal), and cancels the function's
// context when it can no longer prove it held: when a renewal is rejected,
// or when none has succeeded within TTL minus the clock tolerance of the
// last successful one. Renewals run from timers, so a function that
// returns before the first renewal costs no goroutine.
//
// On an in-process backend (Store.local) a renewal cannot hang, so start
// arms one timer that does both jobs: it fires at the next renewal or at
// the end of the proven validity, whichever comes first, and a renewal
// that finds the validity ended fails the claim instead of renewing.
// Elsewhere a second timer watches the validity, since a renewal may hang
// past it.
type keeper struct {
	s      *Store
	op     string // the operation reported in the loss error, e.g. "Do"
	what   string // "claim" or "lease", for messages
	key    KeyRef // Do: the claimed key, renewed with token
	token  string
	ctx    context.Context // the caller's; renewals run detached from its cancellation
	ttl    time.Duration
	tol    time.Duration
	every  time.Duration
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	stopped  bool
	lost     error
	next     *time.Timer    // fires the next renewal
	deadline *time.Timer    // fires at the end of proven validity; nil when local
	until    time.Time      // the end of proven validity, when deadline is nil
	inflight sync.WaitGroup // renewals running
}

func (r *keeper) fail(msg string, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failLocked(msg, cause)
}

func (r *keeper) failLocked(msg string, cause error) {
	if r.lost == nil {
		r.lost = &contract.Error{Code: contract.Fenced, Op: r.op, Msg: r.what + " lost: " + msg, Err: cause}
		r.cancel(r.lost)
		r.s.cfg.logger.Warn("durable: "+r.what+" lost; the function's context is cancelled", "op", r.op, "reason", msg)
		r.s.obs().lost(r.what)
	}
}

// validity is how much longer a claim or lease renewed (or granted) by a
// request sent at local time sent is proven live: until sent + TTL −
// tolerance.
func (r *keeper) validity(sent time.Time) time.Duration {
	return time.Until(sent.Add(r.ttl - r.tol))
}

// start arms the timers that renew Do's claim on r.key. The claim was
// requested at local time sent. The renewals run detached from ctx's
// cancellation: the claim must stay held as long as the function runs,
// even if the function ignores its context.
func (r *keeper) start(ctx context.Context, sent time.Time) {
	r.ctx = ctx
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s.local {
		r.until = sent.Add(r.ttl - r.tol)
		r.next = time.AfterFunc(r.due(r.every), r.renewOnce)
		return
	}
	r.deadline = time.AfterFunc(r.validity(sent), func() {
		r.fail("no successful renewal before expiry", nil)
	})
	r.next = time.AfterFunc(r.every, r.renewOnce)
}

// due returns when the renewal timer must fire for a renewal wanted in d:
// d, or, when one timer also watches the validity (deadline is nil), the
// end of the proven validity if that comes first. r.mu must be held.
func (r *keeper) due(d time.Duration) time.Duration {
	if r.deadline != nil {
		return d
	}
	return max(min(d, time.Until(r.until)), 0)
}

// renewOnce runs one renewal and schedules the next.
func (r *keeper) renewOnce() {
	r.mu.Lock()
	if r.stopped || r.lost != nil {
		r.mu.Unlock()
		return
	}
	if r.deadline == nil && !time.Now().Before(r.until) {
		// The renewal timer also watches the validity (see keeper).
		r.failLocked("no successful renewal before expiry", nil)
		r.mu.Unlock()
		return
	}
	r.inflight.Add(1)
	r.mu.Unlock()
	defer r.inflight.Done()

	sent := time.Now()
	// No renewal is useful past the proven validity, so bound the call.
	rctx, cancel := detach(r.ctx, r.validity(sent))
	_, err := r.s.RenewKey(rctx, r.key, r.token, r.ttl)
	cancel()

	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		switch {
		case r.lost != nil:
		case r.deadline != nil:
			r.deadline.Reset(r.validity(sent))
		default:
			r.until = sent.Add(r.ttl - r.tol)
		}
		if !r.stopped {
			r.next.Reset(r.due(r.every))
		}
	case errors.Is(err, ErrFenced):
		r.failLocked("renewal rejected", err)
	default:
		// Unavailable, outcome unknown, timeout: try again soon; the
		// deadline timer (when local, this timer, see due) ends fn's
		// context if this never succeeds.
		r.s.cfg.logger.Warn("durable: renewal failed; retrying", "op", r.op, "what", r.what, "err", err)
		if !r.stopped {
			r.next.Reset(r.due(min(r.every/renewRetryDivisor+time.Millisecond, r.every)))
		}
	}
}

// stop ends the renewals, waits for one in progress and reports the loss
// error if the claim or lease was lost. Call it once.
func (r *keeper) stop() error {
	r.mu.Lock()
	r.stopped = true
	r.next.Stop()
	r.mu.Unlock()
	r.inflight.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deadline != nil {
		r.deadline.Stop()
	}
	return r.lost
}
