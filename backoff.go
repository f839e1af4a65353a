package durable

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/durable-go/durable/contract"
)

// backoff is the one retry loop of the package: Step's conflicts,
// RunWithLease's acquisition, WaitKey's polling and Do's completion and
// release all go through [backoff.retry].
//
// The pause starts at first and doubles up to max. With jitter, each pause
// is a random time in (0, pause] ("full jitter"), for callers that compete
// for one record (Step, RunWithLease), so that they do not retry in
// lockstep. Without it the pauses are exact, for a caller retrying its own
// call (Do's completion, WaitKey's polling), whose timing then stays
// predictable.
type backoff struct {
	first, max time.Duration
	jitter     bool
}

// retry calls attempt, and calls it again after a pause while it returns
// true. When ctx ends during a pause, retry returns an error with Code
// Canceled and Op op that wraps ctx's error, without calling attempt again;
// otherwise it returns nil. attempt reports its results through its
// closure.
func (b backoff) retry(ctx context.Context, op string, attempt func() (again bool)) error {
	pause := max(b.first, 1)
	var t *time.Timer
	for attempt() {
		d := pause
		if b.jitter {
			d = time.Duration(rand.Int64N(int64(pause))) + 1
		}
		if t == nil {
			t = time.NewTimer(d)
			defer t.Stop()
		} else {
			t.Reset(d)
		}
		select {
		case <-ctx.Done():
			return &contract.Error{Code: contract.Canceled, Op: op, Err: ctx.Err()}
		case <-t.C:
		}
		pause = min(2*pause, max(b.max, 1))
	}
	return nil
}

// detachedCallTimeout bounds a call made on a detached context (see detach)
// when the caller gave no bound of its own: releasing a lease after
// RunWithLease, and each attempt to complete or release in Do.
const detachedCallTimeout = 5 * time.Second

// detach returns a context that keeps ctx's values (trace spans, request
// loggers) but not its cancellation, and ends after d. It is the one way
// the package makes the calls that must happen even when the caller has
// given up: renewing a claim or lease while the function still runs,
// storing an outcome the function already produced, and releasing a claim
// or lease.
func detach(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}
