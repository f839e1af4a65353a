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

// Defaults of [Store.Step].
const (
	// DefaultStepMaxAttempts is the default of StepOptions.MaxAttempts:
	// enough rounds to get through a burst of concurrent writers, few
	// enough that a workflow written in a hot loop by someone else fails
	// fast with ErrConflict.
	DefaultStepMaxAttempts = 10
	// DefaultStepMaxBackoff is the default of StepOptions.MaxBackoff.
	DefaultStepMaxBackoff = 100 * time.Millisecond
	// stepFirstBackoff is the largest pause before the second round; it
	// doubles up to StepOptions.MaxBackoff (see backoff). A conflict means
	// another writer has just committed, so the next read is likely to
	// succeed at once.
	stepFirstBackoff = time.Millisecond
)

// StepOptions configures [Store.Step].
type StepOptions struct {
	// Fence, if set, makes every write conditional on that lease grant.
	Fence *Fence
	// MaxAttempts bounds the read-apply-write rounds; 0 means
	// DefaultStepMaxAttempts (10).
	MaxAttempts int
	// MaxBackoff caps the jittered pause between rounds; 0 means
	// DefaultStepMaxBackoff (100 ms).
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
	const op = "Step"
	if apply == nil {
		return Workflow{}, invalid(op, "apply must not be nil")
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = DefaultStepMaxAttempts
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = DefaultStepMaxBackoff
	}
	if opts.MaxAttempts < 0 || opts.MaxBackoff < 0 {
		return Workflow{}, invalid(op, "max attempts and max backoff must not be negative")
	}
	var (
		out Workflow
		err error
	)
	attempts := 0
	bo := backoff{first: min(stepFirstBackoff, opts.MaxBackoff), max: opts.MaxBackoff, jitter: true}
	if cerr := bo.retry(ctx, op, func() bool {
		attempts++
		out, err = s.stepOnce(ctx, scope, id, opts.Fence, apply)
		return errors.Is(err, ErrConflict) && attempts < opts.MaxAttempts
	}); cerr != nil {
		return Workflow{}, cerr
	}
	return out, err
}

// stepOnce is one round of Step: read, apply, compare-and-set.
func (s *Store) stepOnce(ctx context.Context, scope Scope, id string, fence *Fence, apply func(cur Workflow) (Change, error)) (Workflow, error) {
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
		Scope: scope, ID: id, Fence: fence,
		ExpectStatus: cur.Status, ExpectRevision: cur.Revision,
		Status: ch.Status, Snapshot: ch.Snapshot, RequestID: ch.RequestID,
	})
	if err != nil {
		return Workflow{}, err
	}
	return next, nil
}
