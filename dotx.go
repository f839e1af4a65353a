package durable

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/durable-go/durable/contract"
)

// DoTx is [Store.Do] for an effect written to the store's own database: it
// runs fn with a transaction and stores fn's outcome in that same
// transaction, so that the effect and the outcome commit together or not
// at all. It closes Do's hazard (an effect committed whose outcome was
// never stored, so that a retry after the claim's TTL runs fn again) for
// every effect written through tx:
//
//	res, err := durable.DoTx(ctx, store, req, durable.DoOptions{},
//		func(ctx context.Context, tx pgx.Tx) (durable.Outcome, error) {
//			if _, err := tx.Exec(ctx, "INSERT INTO payments …", …); err != nil {
//				return durable.Outcome{}, err
//			}
//			return durable.Outcome{Code: 201, Body: receipt}, nil
//		})
//
// T is the type of the client library's transaction that the backend
// begins (Tx.Raw): pgx.Tx on a Postgres backend over pgx, *sql.Tx over
// lib/pq, pgx's stdlib or SQLite, *redis.Tx on Redis; [Tx] or any give the transaction as
// begun. A T that the transaction is not is ErrInvalidArgument, naming
// both types; fn then does not run.
//
// DoTx claims the key as Do does (replays, waits, tokens, time bounds and
// ErrOutcomeExpired alike). Once the key is the caller's, it begins a
// transaction ([Store.BeginTx]), runs fn with it while renewing the claim,
// then stops renewing (the completion locks the key's record until the
// transaction ends, which a renewal would wait for), stores the outcome
// with [Store.CompleteKeyTx] and commits. Then:
//
//   - fn returns an error or panics, beginning fails, or the completion
//     fails: DoTx rolls the transaction back and releases the claim, so
//     that a retry runs fn again (nothing was committed), and returns the
//     error (a panic continues).
//   - The claim was lost while fn ran (see Do): DoTx rolls back and
//     returns an error with Code Fenced; nothing was committed.
//   - The commit fails and certainly did not apply (Unavailable): DoTx
//     releases the claim and returns the error.
//   - The commit fails with Fenced (Redis: the claim was lost after the
//     completion was checked, and nothing was applied): DoTx returns the
//     error; the claim is no longer the call's.
//   - The commit's reply is lost (or the commit fails in a way that does
//     not say whether it applied): DoTx returns an error with Code
//     OutcomeUnknown and keeps the claim. The effect and the outcome were
//     both committed or both not: a retry with the key replays the stored
//     outcome, or, once the claim has expired, runs fn again; never both.
//   - The commit succeeds: DoTx returns the stored outcome, Replayed false.
//
// The transaction is begun, completed, committed and rolled back on
// contexts detached from ctx's cancellation, each call bounded by
// opts.CallTimeout (5 s when 0) and the Store's operation timeout; fn's
// context is derived from ctx and cancelled when the claim is lost.
// opts.CompleteWithin bounds releasing the claim.
//
// DoTx returns ErrUnimplemented, before claiming anything, when the
// backend has no transaction the caller can share (memory, etcd; it does
// not implement contract.TxCompleter): use Do there.
func DoTx[T any](ctx context.Context, s *Store, req ClaimRequest, opts DoOptions, fn func(ctx context.Context, tx T) (Outcome, error)) (DoResult, error) {
	const op = "DoTx"
	switch {
	case s == nil:
		return DoResult{}, invalid(op, "store must not be nil")
	case fn == nil:
		return DoResult{}, invalid(op, "function must not be nil")
	}
	if _, err := s.txCompleter(op); err != nil {
		return DoResult{}, err
	}
	return s.claimThen(ctx, op, req, opts, func(req ClaimRequest, token string, sent time.Time, opts DoOptions) (DoResult, error) {
		return s.runClaimedTx(ctx, req, token, sent, opts, func(ctx context.Context, tx Tx) (Outcome, error) {
			t, err := TxAs[T](tx)
			if err != nil {
				return Outcome{}, err
			}
			return fn(ctx, t)
		})
	})
}

// TxAs returns tx's client-library transaction (Tx.Raw) as a T, or tx
// itself when T is [Tx] (or any interface tx satisfies and Raw does not).
// A T that neither is returns ErrInvalidArgument naming both types.
func TxAs[T any](tx Tx) (T, error) {
	var zero T
	if tx == nil {
		return zero, invalid("DoTx", "transaction must not be nil")
	}
	raw := tx.Raw()
	if t, ok := raw.(T); ok && raw != nil {
		return t, nil
	}
	if t, ok := any(tx).(T); ok {
		return t, nil
	}
	return zero, invalid("DoTx", "the function takes a transaction of type "+reflect.TypeFor[T]().String()+
		", but the backend's transaction is a "+typeName(raw)+": use that type (or durable.Tx)")
}

func typeName(v any) string {
	if v == nil {
		return "nil"
	}
	return reflect.TypeOf(v).String()
}

// runClaimedTx runs fn in a transaction under the claim held by token,
// which was requested at local time sent, and completes the key in it.
func (s *Store) runClaimedTx(ctx context.Context, req ClaimRequest, token string, sent time.Time, opts DoOptions, fn func(context.Context, Tx) (Outcome, error)) (DoResult, error) {
	const op = "DoTx"
	ref := req.KeyRef
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := s.keepClaim(ctx, op, req, token, sent, opts, cancel)

	per := opts.CallTimeout
	if per == 0 {
		per = detachedCallTimeout
	}
	// The transaction must live until it commits, even if the caller gives
	// up meanwhile: it is begun on a detached context.
	bctx, bcancel := detach(ctx, per)
	tx, err := s.BeginTx(bctx)
	bcancel()
	if err != nil {
		if r.stop() == nil {
			s.doRelease(ctx, ref, token, opts)
		}
		return DoResult{}, err
	}

	returned := false
	defer func() {
		if !returned {
			// fn panicked or called runtime.Goexit: nothing was committed.
			s.txRollback(ctx, tx, per)
			if r.stop() == nil {
				s.doRelease(ctx, ref, token, opts)
			}
		}
	}()
	out, fnErr := fn(runCtx, tx)
	returned = true

	if fnErr != nil {
		s.txRollback(ctx, tx, per)
		if lost := r.stop(); lost != nil {
			return DoResult{}, &contract.Error{Code: contract.Fenced, Op: op, Msg: "claim lost while the function ran; its transaction was rolled back", Err: fnErr}
		}
		s.doRelease(ctx, ref, token, opts)
		return DoResult{}, fnErr
	}
	// Stop renewing before completing: CompleteKeyTx locks the key's
	// record until the transaction ends, and a renewal would wait for it.
	if lost := r.stop(); lost != nil {
		s.txRollback(ctx, tx, per)
		return DoResult{}, &contract.Error{Code: contract.Fenced, Op: op, Msg: "claim lost while the function ran; its transaction was rolled back", Err: lost}
	}
	cctx, ccancel := detach(ctx, per)
	rec, err := s.CompleteKeyTx(cctx, tx, Completion{KeyRef: ref, Token: token, Outcome: out, Retain: opts.Retain})
	ccancel()
	if err != nil {
		// Nothing is committed: give the key back, unless it is no longer
		// this call's.
		s.txRollback(ctx, tx, per)
		if !errors.Is(err, ErrFenced) {
			s.doRelease(ctx, ref, token, opts)
		}
		return DoResult{}, err
	}
	mctx, mcancel := detach(ctx, per)
	err = tx.Commit(mctx)
	mcancel()
	if err != nil {
		switch CodeOf(err) {
		case contract.Fenced:
			// Nothing applied, and the claim is another's.
			s.txRollback(ctx, tx, per)
			return DoResult{}, &contract.Error{Code: contract.Fenced, Op: op, Msg: "claim lost before the commit; nothing was committed", Err: err}
		case contract.Unavailable, contract.Closed, contract.InvalidArgument, contract.Unimplemented:
			// Certainly not applied: a retry may run fn again.
			s.txRollback(ctx, tx, per)
			s.doRelease(ctx, ref, token, opts)
			return DoResult{}, err
		}
		// It may have applied: keep the claim, so that a retry meanwhile
		// finds it in flight, and later replays or runs again, never both.
		s.cfg.logger.Warn("durable: committing the transaction of an idempotent call failed and may have applied; kept the claim until it expires", "err", err)
		return DoResult{Outcome: out}, &contract.Error{Code: contract.OutcomeUnknown, Op: op,
			Msg: "commit failed and may have applied: a retry replays the stored outcome or runs again, never both", Err: err}
	}
	res := DoResult{Outcome: out, Record: rec}
	if rec.Outcome != nil {
		res.Outcome = *rec.Outcome
	}
	return res, nil
}

// txRollback rolls tx back on a context detached from ctx's cancellation;
// a failure is only logged (a transaction that is not committed does not
// apply).
func (s *Store) txRollback(ctx context.Context, tx Tx, per time.Duration) {
	rctx, cancel := detach(ctx, per)
	defer cancel()
	if err := tx.Rollback(rctx); err != nil {
		s.cfg.logger.Warn("durable: rolling back a transaction failed", "err", err)
	}
}

// storeTx is the Tx that Store.BeginTx returns: the backend's, with its
// errors wrapped and its calls bounded and instrumented like every other
// Store call. Store.CompleteKeyTx hands the backend its own Tx back.
type storeTx struct {
	s  *Store
	tx contract.Tx
}

func (t *storeTx) Raw() any { return t.tx.Raw() }

func (t *storeTx) Commit(ctx context.Context) error {
	if ctx == nil {
		return invalid("Tx.Commit", "context must not be nil")
	}
	_, err := bounded(t.s, ctx, "Tx.Commit", func(ctx context.Context) (struct{}, error) {
		err := t.tx.Commit(ctx)
		if err != nil && (CodeOf(err) == contract.Canceled || CodeOf(err) == contract.Unknown) {
			// A commit cut short, or failed without saying how, may
			// have applied.
			err = &contract.Error{Code: contract.OutcomeUnknown, Msg: "commit did not complete; it may have applied", Err: err}
		}
		return struct{}{}, err
	})
	return err
}

func (t *storeTx) Rollback(ctx context.Context) error {
	if ctx == nil {
		return invalid("Tx.Rollback", "context must not be nil")
	}
	_, err := bounded(t.s, ctx, "Tx.Rollback", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, t.tx.Rollback(ctx)
	})
	return err
}

// backendTx returns the transaction to hand the backend: the backend's
// own for a Tx from Store.BeginTx, the caller's otherwise.
func backendTx(tx any) any {
	if t, ok := tx.(*storeTx); ok {
		return t.tx
	}
	return tx
}
