package durable

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
)

// keeper keeps a claim or a lease alive while a function runs, and cancels
// the function's context when it can no longer prove it held: when a
// renewal is rejected, or when none has succeeded within TTL minus the
// clock tolerance of the last successful one (measured locally from when
// that request was sent, so it errs early). Renewals run from timers, so a
// function that returns before the first renewal costs no goroutine.
// [Store.Do] and [Store.RunWithLease] share it.
type keeper struct {
	s      *Store
	op     string // the operation reported in the loss error, e.g. "Do"
	what   string // "claim" or "lease", for messages
	renew  func(ctx context.Context) error
	ctx    context.Context // detached from the caller's cancellation
	ttl    time.Duration
	tol    time.Duration
	every  time.Duration
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	stopped  bool
	lost     error
	next     *time.Timer    // fires the next renewal
	deadline *time.Timer    // fires at the end of proven validity
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
	}
}

// validity is how long a claim or lease renewed (or granted) by a request sent at
// sent is proven live: TTL minus the clock tolerance, from sent.
func (r *keeper) validity(sent time.Time) time.Duration {
	return time.Until(sent.Add(r.ttl - r.tol))
}

// start arms the timers. The claim or lease was requested at local time
// sent. The renewals run on a context detached from ctx's cancellation: it
// must stay held as long as the function runs, even if the function ignores
// its context.
func (r *keeper) start(ctx context.Context, sent time.Time) {
	r.ctx = context.WithoutCancel(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deadline = time.AfterFunc(r.validity(sent), func() {
		r.fail("no successful renewal before expiry", nil)
	})
	r.next = time.AfterFunc(r.every, r.renewOnce)
}

// renewOnce runs one renewal and schedules the next.
func (r *keeper) renewOnce() {
	r.mu.Lock()
	if r.stopped || r.lost != nil {
		r.mu.Unlock()
		return
	}
	r.inflight.Add(1)
	r.mu.Unlock()
	defer r.inflight.Done()

	sent := time.Now()
	// No renewal is useful past the proven validity, so bound the call.
	rctx, cancel := context.WithDeadline(r.ctx, sent.Add(r.validity(sent)))
	err := r.renew(rctx)
	cancel()

	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		if r.lost == nil {
			r.deadline.Reset(r.validity(sent))
		}
		if !r.stopped {
			r.next.Reset(r.every)
		}
	case errors.Is(err, ErrFenced):
		r.failLocked("renewal rejected", err)
	default:
		// Unavailable, outcome unknown, timeout: try again soon; the
		// deadline timer ends fn's context if this never succeeds.
		r.s.cfg.logger.Warn("durable: renewal failed; retrying", "op", r.op, "what", r.what, "err", err)
		if !r.stopped {
			r.next.Reset(min(r.every/4+time.Millisecond, r.every))
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
	r.deadline.Stop()
	return r.lost
}
