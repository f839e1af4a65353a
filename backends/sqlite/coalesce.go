package sqlite

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/coalesce"
)

// Coalesced writes (see "Coalesced writes" in the package documentation).
//
// The write operations that are one short transaction go through
// b.writes, a coalesce.Batcher with one batch in flight (SQLite has one
// writer). A write that is alone runs exactly as without it: write's
// transaction, on the caller's goroutine, under its context. Writes that
// queued while a batch was in flight run as the next batch: one BEGIN
// IMMEDIATE, each member's body inside a SAVEPOINT of its own (rolled back
// to when the body fails, so that a failure undoes that member's writes
// only), one COMMIT. Each member's after, its effects
// once its transaction has ended (the hub's signals), runs after that.

// writeOp is one write operation handed to the batcher.
type writeOp struct {
	ctx   context.Context             // the caller's
	body  func(context.Context) error // the operation's statements, in a transaction
	after func(err error)             // its effects once the transaction ended with err; may be nil
	state atomic.Int32                // opPending, opStarted or opDropped
}

const (
	opPending int32 = iota // its body has not run
	opStarted              // its body ran (in this or an earlier attempt)
	opDropped              // it will never run: its caller left, or its context ended, before
)

// start marks op's body as running; false when op was dropped.
func (op *writeOp) start() bool {
	return op.state.CompareAndSwap(opPending, opStarted) || op.state.Load() == opStarted
}

// drop marks op as never to run; false when its body has started.
func (op *writeOp) drop() bool {
	return op.state.CompareAndSwap(opPending, opDropped) || op.state.Load() == opDropped
}

// admit decides, just before op's body would run, whether it runs: not
// when its context has ended before it started (or its caller left).
func (op *writeOp) admit() bool {
	if op.ctx.Err() != nil && op.drop() {
		return false
	}
	return op.start()
}

// errDropped ends the transaction of a write whose body will not run.
var errDropped = &contract.Error{Code: contract.Canceled, Msg: "the write was not sent: its context ended while it waited", Err: context.Canceled}

func canceled(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return errDropped
	}
	return &contract.Error{Code: contract.Canceled, Err: err}
}

// runOp is op's body as a transaction's function: nothing when op is
// not admitted (Canceled), else the body, then the test hook.
func (b *Backend) runOp(ctx context.Context, op *writeOp) error {
	if !op.admit() {
		return canceled(op.ctx)
	}
	if err := op.body(ctx); err != nil {
		return err
	}
	if b.testAfterBody != nil {
		return b.testAfterBody(ctx)
	}
	return nil
}

// write runs one write operation: body in a BEGIN IMMEDIATE transaction
// of its own (writeTx) or as a member of a batch, then after with the
// operation's result. It returns gone when the caller's context ended
// while its write was in a batch being applied: body may then still run
// on the batch's goroutine, so the caller must not read what body writes,
// and err is Canceled (it never ran) or OutcomeUnknown (it may have).
func (b *Backend) write(ctx context.Context, body func(context.Context) error, after func(error)) (gone bool, err error) {
	if b.writes == nil {
		err := b.writeTx(ctx, body)
		if after != nil {
			after(err)
		}
		return false, err
	}
	if err := b.check(ctx); err != nil {
		return false, err
	}
	op := &writeOp{ctx: ctx, body: body, after: after}
	_, err = b.writes.Do(ctx, op)
	var le *coalesce.LeftError
	if !errors.As(err, &le) {
		return false, err
	}
	if !le.Sent || op.drop() {
		return true, &contract.Error{Code: contract.Canceled, Err: le.Err}
	}
	return true, &contract.Error{Code: contract.OutcomeUnknown,
		Msg: "the context ended while the write was being applied in a batch; it may have been applied", Err: le.Err}
}

// flushWrites is the batcher's flush: a batch of one is write's own
// transaction under the caller's context; a larger one is writeBatch.
func (b *Backend) flushWrites(ctx context.Context, ops []*writeOp) []coalesce.Result[struct{}] {
	res := make([]coalesce.Result[struct{}], len(ops))
	if b.testFlush != nil {
		b.testFlush(ctx, len(ops))
	}
	if len(ops) == 1 {
		op := ops[0]
		err := b.writeTx(op.ctx, func(ctx context.Context) error { return b.runOp(ctx, op) })
		if op.after != nil {
			op.after(err)
		}
		res[0].Err = err
		return res
	}
	errs := b.writeBatch(ctx, ops)
	for i, op := range ops {
		if op.after != nil {
			op.after(errs[i])
		}
		res[i].Err = errs[i]
	}
	return res
}

// Savepoint statements of a batch's members. Every member's savepoint has
// the same name, and none is released: each nests in the one before, and
// ROLLBACK TO goes back to the most recent, the failed member's own (and
// leaves it, empty, on the stack). COMMIT ends them all. That is one
// statement per member that succeeds, instead of two.
const (
	sqlSavepoint  = `SAVEPOINT durable_op`
	sqlRollbackTo = `ROLLBACK TO durable_op`
)

// writeBatch applies ops, under ctx (the batch's: ended only once every
// member has left), in one transaction, and returns each member's error:
//
//   - a member whose context has ended before its turn is not run
//     (Canceled);
//   - a member whose body fails is rolled back to its savepoint and gets
//     its error as write would give it, once the others have committed;
//   - when the transaction cannot begin, after the retries write makes,
//     every member gets the error write gives (nothing was applied);
//   - when a savepoint cannot be set or rolled back to, or a
//     body fails with SQLITE_BUSY or SQLITE_LOCKED, or the COMMIT fails
//     with them, the whole transaction is rolled back and each member runs
//     again alone (writeLocked), as write would run it;
//   - when the COMMIT fails otherwise, every member that ran gets what
//     write says of a failed COMMIT: OutcomeUnknown for an I/O error, the
//     classified error (nothing applied) for any other.
func (b *Backend) writeBatch(ctx context.Context, ops []*writeOp) []error {
	errs := make([]error, len(ops))
	if err := b.lockWriter(ctx); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer b.unlockWriter()
	if err := b.retryBusy(ctx, func() error { return b.begin(ctx) }); err != nil {
		for i, op := range ops {
			errs[i] = b.writeErr(op.ctx, err, false)
		}
		return errs
	}
	qctx := context.WithoutCancel(ctx)
	ran := make([]bool, len(ops))
	alone := func() []error {
		b.rollback()
		for i, op := range ops {
			if ran[i] || op.admit() {
				errs[i] = b.writeLocked(op.ctx, func(ctx context.Context) error { return b.runOp(ctx, op) })
			} else {
				errs[i] = canceled(op.ctx)
			}
		}
		return errs
	}
	some := false
	for i, op := range ops {
		if !op.admit() {
			errs[i] = canceled(op.ctx)
			continue
		}
		ran[i], some = true, true
		if _, err := b.ws.exec(qctx, sqlSavepoint); err != nil {
			return alone()
		}
		err := b.runOp(context.WithoutCancel(op.ctx), op)
		if err == nil {
			continue
		}
		if isBusy(err) {
			return alone()
		}
		if _, rerr := b.ws.exec(qctx, sqlRollbackTo); rerr != nil {
			return alone()
		}
		errs[i] = err
	}
	if !some {
		b.rollback()
		return errs
	}
	if _, err := b.wc.ExecContext(qctx, "COMMIT"); err != nil {
		// As in writeLocked: roll back whatever the failed COMMIT left.
		b.rollback()
		if isBusy(err) {
			return alone()
		}
		for i, op := range ops {
			if ran[i] {
				errs[i] = b.writeErr(op.ctx, err, true)
			}
		}
		return errs
	}
	for i, op := range ops {
		if ran[i] && errs[i] != nil {
			errs[i] = b.writeErr(op.ctx, errs[i], false)
		}
	}
	return errs
}

// writeStats returns the write batcher's counts (zero when coalescing is
// off).
func (b *Backend) writeStats() coalesce.Stats {
	if b.writes == nil {
		return coalesce.Stats{}
	}
	return b.writes.Stats()
}
