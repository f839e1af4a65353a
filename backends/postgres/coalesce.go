package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/coalesce"
)

// CoalesceMode says whether a backend coalesces the writes its callers
// send at the same time (see the package documentation, "Coalesced
// writes").
type CoalesceMode int

const (
	// CoalesceOn (the default) coalesces where the client library can
	// send a pipeline: pgx's own pool and pgx's stdlib. On lib/pq (or any
	// other database/sql driver) and behind a transaction pooler
	// (PoolerTransaction, or a pooler Open detected) every write runs
	// alone whatever this says.
	CoalesceOn CoalesceMode = iota
	// CoalesceOff runs every write alone, one statement each.
	CoalesceOff
)

// DefaultCoalesceInFlight is how many batches of coalesced writes a
// backend keeps in flight at once when [Options].CoalesceInFlight is 0
// (the DSN's coalesce_inflight). See BENCHMARKS.md, "Coalesced writes".
const DefaultCoalesceInFlight = 2

// maxCoalesceInFlight bounds Options.CoalesceInFlight (and the DSN's
// coalesce_inflight): each batch in flight holds a pooled connection.
const maxCoalesceInFlight = 64

// CoalesceStats counts a backend's coalesced writes: the batches flushed
// (a write alone is a batch of one), the writes they held, the largest
// batch, and the writes that went in a statement shared with others of
// their kind (Merged: runs of RenewLease and of UpdateWorkflow, see the
// package documentation), and the batches that a server error rolled back,
// whose writes then ran again alone (RolledBack: a deadlock with an
// application's transaction, a statement's own error; a count that grows
// with Batches means batches cost their writes twice). All are zero when
// the backend does not coalesce.
type CoalesceStats struct{ Batches, Calls, Largest, Merged, RolledBack int64 }

// CoalesceStats returns the counts of b's coalesced writes so far.
func (b *Backend) CoalesceStats() CoalesceStats {
	if b.batcher == nil {
		return CoalesceStats{}
	}
	s := b.batcher.Stats()
	return CoalesceStats{Batches: s.Batches, Calls: s.Calls, Largest: s.Largest, Merged: b.merged.Load(), RolledBack: b.rolledBack.Load()}
}

// Coalescing reports whether b coalesces writes.
func (b *Backend) Coalescing() bool { return b.batcher != nil }

// lockTable ranks the tables of the rows coalesced statements lock, for
// lockKey's order.
type lockTable int

const (
	lockLeases lockTable = iota
	lockKeys
	lockWorkflows
	lockLast // the tests' statements, after every real one
)

// lockKey names the one row a coalesced statement locks (the row it
// updates, deletes or inserts). A batch runs its statements in the order
// of their lockKeys, so that every batch, of this process or another,
// takes its row locks in one global order: two batches cannot deadlock.
// Statements that lock more than one row (a fenced UpdateWorkflow or
// CompleteKey also locks the fencing lease FOR SHARE) are not coalesced.
type lockKey struct {
	table lockTable
	scope contract.Scope
	id    string
}

func (a lockKey) compare(b lockKey) int {
	return cmp.Or(cmp.Compare(a.table, b.table), strings.Compare(string(a.scope), string(b.scope)), strings.Compare(a.id, b.id))
}

// batchItem is one coalesced write: its statement and its arguments, the
// scan targets of its row (the caller's own buffer, not its result: see
// query.coalesced) and the row it locks.
type batchItem struct {
	text string
	args []any
	dest []any
	lock lockKey
	// rows is the statement's many-rows form (nil: none), rowsText its
	// text for the backend's schema.
	rows     *rowsForm
	rowsText string
}

// batchResult is a write's result from its batch: whether it returned a
// row; or rerun, that its batch certainly failed (a statement's error
// rolled the whole transaction back) and it must run again alone.
type batchResult struct {
	found bool
	rerun bool
}

type batcher = coalesce.Batcher[batchItem, batchResult]

// coalesced marks q as a statement that may be coalesced; lock returns the
// row a call locks, or false when the call must run alone.
func (q *query[P, R]) coalesced(lock func(P) (lockKey, bool)) *query[P, R] {
	q.lock = lock
	q.statement.coalesce = true
	return q
}

// setupCoalescing gives b a batcher when opts ask for one and b's querier
// can send pipelines.
func (b *Backend) setupCoalescing(opts Options) {
	b.batcher, b.pipe = nil, nil
	if opts.Coalesce != CoalesceOn {
		return
	}
	p := pgclient.PipelinerOf(b.q)
	if p == nil {
		return
	}
	n := opts.CoalesceInFlight
	if n == 0 {
		n = DefaultCoalesceInFlight
	}
	b.pipe = p
	b.batcher = coalesce.New(b.flushBatch, coalesce.Options{MaxInFlight: n})
}

// errBatchUnknown is the message of a coalesced write whose batch's commit
// outcome is unknown.
const errBatchUnknown = "connection failed or context ended while the write's batch was in flight"

// flushBatch applies a batch of coalesced writes. One write is run exactly
// as it would be without coalescing: one statement on b's querier, with
// the context flush got (the caller's own, when it was alone). Several
// are sent as one pipeline (pgclient.Pipeliner.QueryBatch: one implicit
// transaction, one commit), in the order of their lockKeys. Then:
//
//   - committed: each gets its row;
//   - failed before anything was sent (acquiring a connection): each gets
//     that error, which classify reports as for a statement not sent;
//   - a server error (severity ERROR): the transaction rolled back, so each
//     is run again alone (rerun) and gets its own honest result;
//   - anything else (the connection broke, the server ended the session,
//     the batch's context ended): the commit's outcome is unknown, and each
//     gets OutcomeUnknown.
func (b *Backend) flushBatch(ctx context.Context, items []batchItem) []coalesce.Result[batchResult] {
	out := make([]coalesce.Result[batchResult], len(items))
	if len(items) == 1 {
		it := items[0]
		found, err := b.q.QueryRow(ctx, write, it.text, it.args, it.dest...)
		out[0] = coalesce.Result[batchResult]{Val: batchResult{found: found}, Err: err}
		return out
	}
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return items[i].lock.compare(items[j].lock) })
	batch, setup := batchStatements(items, order, func(f *rowsForm, n int) {
		b.merged.Add(int64(n))
		if h := b.rowsHook; h != nil {
			h(f.name, n)
		}
	})
	if h := b.batchHook; h != nil {
		h(len(items))
	}
	found, err := b.pipe.QueryBatch(ctx, batch)
	if err == nil && setup {
		found = found[1:]
	}
	safe := err != nil && pgclient.SafeToRetry(err)
	rolledBack := err != nil && !safe && pgclient.RolledBack(err)
	if rolledBack {
		b.rolledBack.Add(1)
	}
	for k, i := range order {
		switch {
		case err == nil:
			out[i].Val.found = found[k]
		case safe:
			out[i].Err = err
		case rolledBack:
			out[i].Val.rerun = true
		default:
			out[i].Err = &contract.Error{Code: contract.OutcomeUnknown, Msg: errBatchUnknown, Err: err}
		}
	}
	return out
}

// batchStatements returns the statements of a batch of several calls, in
// order (by lockKey): a run of consecutive calls of one statement with a
// many-rows form, whose lockKeys all differ, is one statement (see
// rowsForm); every other call is its own. The calls' results come back in
// order, one per call, whatever the statements. merged is told of each
// many-rows statement and how many calls it holds. When there is one, the
// batch begins with rowsPlanSetup, and setup is true.
func batchStatements(items []batchItem, order []int, merged func(f *rowsForm, n int)) (batch []pgclient.BatchItem, setup bool) {
	batch = make([]pgclient.BatchItem, 1, len(items)+1)
	batch[0] = rowsPlanSetup
	for k := 0; k < len(order); {
		it := items[order[k]]
		end := k + 1
		if it.rows != nil {
			for end < len(order) && items[order[end]].rows == it.rows && items[order[end]].lock != items[order[end-1]].lock {
				end++
			}
		}
		if end-k < 2 {
			batch = append(batch, pgclient.BatchItem{SQL: it.text, Args: it.args, Dest: it.dest})
			k++
			continue
		}
		calls := make([][]any, end-k)
		dests := make([][]any, end-k)
		for j := k; j < end; j++ {
			calls[j-k], dests[j-k] = items[order[j]].args, items[order[j]].dest
		}
		batch = append(batch, pgclient.BatchItem{SQL: it.rowsText, Args: it.rows.args(calls), Rows: dests})
		merged(it.rows, end-k)
		setup = true
		k = end
	}
	if !setup {
		return batch[1:], false
	}
	return batch, true
}

// rowsPlanSetup is the statement a batch with a many-rows statement
// begins with: for the rest of the batch's transaction the planner may
// not scan a table or join by hash or merge. A many-rows statement must
// reach each call's row by its primary key (a nested loop over the calls,
// which also takes the row locks in the batch's order); its plan is made
// when it runs, always after this, inside the batch. Without it, the
// generic plan of a table that was small when the session cached it (a
// fresh schema: EXPLAIN shows a sequential scan and a hash join) would be
// kept as the table grew. The other statements of a batch find their rows
// by primary key whatever the setting.
var rowsPlanSetup = pgclient.BatchItem{
	SQL: `SELECT set_config('enable_seqscan', 'off', true) || set_config('enable_hashjoin', 'off', true)
  || set_config('enable_mergejoin', 'off', true)`,
	Dest: []any{nil},
}

// runCoalesced runs a call of q as one does, through b's batcher, with
// the same retries and error mapping. The batch scans into a buffer of the call's
// own, copied into r only here, on the caller's goroutine, once the
// result is known: a caller that left its batch never has r written
// behind its back.
func (q *query[P, R]) runCoalesced(ctx context.Context, b *Backend, text string, args []any, lk lockKey, r *R) (found bool, err error) {
	err = b.do(ctx, q.kind, func() error {
		var buf R
		it := batchItem{text: text, args: args, dest: q.dest(&buf), lock: lk, rows: q.rows}
		if b.singleOnly {
			it.rows = nil
		}
		if it.rows != nil {
			it.rowsText = b.st.rows[q.rows.index]
		}
		res, err := b.batcher.Do(ctx, it)
		var left *coalesce.LeftError
		switch {
		case errors.As(err, &left):
			if left.Sent {
				// It may have been applied: classify reports a write
				// whose context ended in flight as OutcomeUnknown.
				return pgclient.InFlight(left.Err)
			}
			return pgclient.NotSent(left.Err)
		case err != nil:
			return err
		case res.rerun:
			// Its batch rolled back: nothing of it was applied.
			found, err = b.q.QueryRow(ctx, q.kind, text, args, q.dest(r)...)
			return err
		}
		found = res.found
		if found {
			*r = buf
		}
		return nil
	})
	return found, err
}

// parseCoalesceInFlight reads the DSN's coalesce_inflight.
func parseCoalesceInFlight(v string) (int, bool) {
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 1 && n <= maxCoalesceInFlight
}
