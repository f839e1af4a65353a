package durable

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/durable-go/durable/contract"
)

// jitterSleep pauses for a random time in (0, max] ("full jitter", so that
// competing callers do not retry in lockstep), or until ctx ends, which it
// reports as a Canceled error for op.
func jitterSleep(ctx context.Context, op string, max time.Duration) error {
	t := time.NewTimer(time.Duration(rand.Int64N(int64(max))) + 1)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return &contract.Error{Code: contract.Canceled, Op: op, Err: ctx.Err()}
	case <-t.C:
		return nil
	}
}
