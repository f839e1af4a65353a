package durable

import (
	"context"
	"errors"
	"time"

	"github.com/durable-go/durable/contract"
)

// Change is what a step function wants a workflow to become.
type Change struct {
	Status    Status
	Snapshot  []byte
	RequestID string
}

// StepOptions configures [Store.Step].
type StepOptions struct {
	// Fence, if set, makes every write conditional on that lease grant.
	Fence *Fence
	// MaxAttempts bounds the read-apply-write rounds; 0 means 10.
	MaxAttempts int
	// MaxBackoff caps the jittered pause between rounds; 0 means 100 ms.
	MaxBackoff time.Duration
}

// Step advances a workflow by one change with optimistic concurrency:
// read the record, call apply with it, write the result with
// compare-and-set on the status and revision that were read (and the fence,
// if given), and start over on a conflict, up to MaxAttempts times with a
// short jittered backoff.
//
// apply may run several times, so it must be a pure function of the record
// it is given. Step stops without calling apply when the workflow is
// terminal (ErrTerminal) and returns at once on ErrFenced, ErrNotFound, an
// error from apply (returned unchanged) or ctx ending. After MaxAttempts
// conflicts it returns the last ErrConflict.
func (s *Store) Step(ctx context.Context, scope Scope, id string, opts StepOptions, apply func(cur Workflow) (Change, error)) (Workflow, error) {
	if apply == nil {
		return Workflow{}, invalid("Step", "apply must not be nil")
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = 10
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = 100 * time.Millisecond
	}
	if opts.MaxAttempts < 0 || opts.MaxBackoff < 0 {
		return Workflow{}, invalid("Step", "max attempts and max backoff must not be negative")
	}
	backoff := time.Millisecond
	var lastErr error
	for attempt := 0; attempt < opts.MaxAttempts; attempt++ {
		if attempt > 0 {
			if err := jitterSleep(ctx, "Step", backoff); err != nil {
				return Workflow{}, err
			}
			backoff = min(backoff*2, opts.MaxBackoff)
		}
		cur, err := s.GetWorkflow(ctx, scope, id)
		if err != nil {
			return Workflow{}, err
		}
		if cur.Status.Terminal() {
			return cur, &contract.Error{Code: contract.Terminal, Op: "Step", Msg: "workflow is in a terminal status"}
		}
		ch, err := apply(cur)
		if err != nil {
			return cur, err
		}
		next, err := s.UpdateWorkflow(ctx, Update{
			Scope: scope, ID: id, Fence: opts.Fence,
			ExpectStatus: cur.Status, ExpectRevision: cur.Revision,
			Status: ch.Status, Snapshot: ch.Snapshot, RequestID: ch.RequestID,
		})
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, ErrConflict) {
			return Workflow{}, err
		}
		lastErr = err
	}
	return Workflow{}, lastErr
}
