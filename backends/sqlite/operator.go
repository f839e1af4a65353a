package sqlite

import (
	"context"
	"database/sql"

	"github.com/durable-go/durable/contract"
)

// Cleanup's statements: each kind's candidates are selected in one
// statement (up to limit+1, so that More is known) and deleted (or, for
// outcomes, reduced to their tombstone) by key.
const (
	condWorkflows = `status IN ('succeeded', 'failed', 'closed') AND updated_at <= ?`
	// condKeys: tombstones past forget_at and abandoned claims, deleted.
	condKeys = `(state = 'completed' AND forget_at <= ?) OR (state = 'claimed' AND lease_until < ?)`
	// condOutcomes: completed keys past expires_at whose payload is still
	// stored (outcome_ref IS NULL marks a tombstone; see migration 2) and
	// whose tombstone has not ended (those are condKeys').
	condOutcomes = `state = 'completed' AND outcome_ref IS NOT NULL AND expires_at <= ? AND forget_at > ?`
	condLeases   = `expires_at < ?`

	sqlCountWorkflows = `SELECT count(*) FROM (SELECT 1 FROM workflows WHERE ` + condWorkflows + ` LIMIT ?)`
	sqlCountKeys      = `SELECT count(*) FROM (SELECT 1 FROM idempotency_keys WHERE ` + condKeys + ` LIMIT ?)`
	sqlCountOutcomes  = `SELECT count(*) FROM (SELECT 1 FROM idempotency_keys WHERE ` + condOutcomes + ` LIMIT ?)`
	sqlCountLeases    = `SELECT count(*) FROM (SELECT 1 FROM leases WHERE ` + condLeases + ` LIMIT ?)`

	sqlCleanWorkflows = `DELETE FROM workflows WHERE rowid IN (SELECT rowid FROM workflows WHERE ` + condWorkflows + ` LIMIT ?)`
	sqlCleanKeys      = `DELETE FROM idempotency_keys WHERE rowid IN (SELECT rowid FROM idempotency_keys WHERE ` + condKeys + ` LIMIT ?) RETURNING scope, key`
	sqlCleanOutcomes  = `UPDATE idempotency_keys SET outcome_header = NULL, outcome_body = NULL, outcome_ref = NULL WHERE rowid IN (SELECT rowid FROM idempotency_keys WHERE ` + condOutcomes + ` LIMIT ?)`
	sqlCleanLeases    = `DELETE FROM leases WHERE (scope, resource) IN (SELECT scope, resource FROM leases WHERE ` + condLeases + ` LIMIT ?) RETURNING scope, resource`

	sqlDeleteWorkflow = `DELETE FROM workflows WHERE scope = ? AND id = ?`
	sqlDeleteKey      = `DELETE FROM idempotency_keys WHERE scope = ? AND key = ?`
	sqlDeleteLease    = `DELETE FROM leases WHERE scope = ? AND resource = ?`

	// ListKeys lists what GetKey reads: claims, outcomes before
	// expires_at, tombstones before forget_at; with a state, those of it.
	sqlListKeys          = `SELECT ` + keyCols + ` FROM idempotency_keys WHERE scope = ? AND key > ? AND (state = 'claimed' OR forget_at > ?) ORDER BY key LIMIT ?`
	sqlListKeysClaimed   = `SELECT ` + keyCols + ` FROM idempotency_keys WHERE scope = ? AND key > ? AND state = 'claimed' ORDER BY key LIMIT ?`
	sqlListKeysCompleted = `SELECT ` + keyCols + ` FROM idempotency_keys WHERE scope = ? AND key > ? AND state = 'completed' AND expires_at > ? ORDER BY key LIMIT ?`
	sqlListKeysExpired   = `SELECT ` + keyCols + ` FROM idempotency_keys WHERE scope = ? AND key > ? AND state = 'completed' AND expires_at <= ? AND forget_at > ? ORDER BY key LIMIT ?`
	sqlListLeases        = `SELECT ` + leaseCols + ` FROM leases WHERE scope = ? AND resource > ? ORDER BY resource LIMIT ?`
	sqlListLeasesHeld    = `SELECT ` + leaseCols + ` FROM leases WHERE scope = ? AND resource > ? AND expires_at > ? ORDER BY resource LIMIT ?`
)

// cleanupArgs returns the arguments of each kind's condition at now.
func (b *Backend) cleanupArgs(req contract.CleanupRequest, now int64) (wf, keys, outcomes, leases []any) {
	tol := micros(b.tol)
	return []any{now - micros(req.TerminalAge)}, []any{now, now - tol}, []any{now, now}, []any{now - tol}
}

// Cleanup implements contract.Backend: one transaction deletes up to
// req.Limit records of each kind (tombstones past ForgetAt and abandoned
// claims are Keys) and drops the payload of up to req.Limit outcomes past
// ExpiresAt (Outcomes), which leaves their tombstones. Waiters on deleted
// keys are woken, and the watches of deleted leases signalled.
func (b *Backend) Cleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	var res contract.CleanupResult
	var gone []contract.KeyRef
	var goneLeases []leaseRef
	// Cleanup is not coalesced: its transaction may be long (req.Limit
	// rows of each kind).
	err := b.writeTx(ctx, func(ctx context.Context) error {
		res, gone, goneLeases = contract.CleanupResult{}, gone[:0], goneLeases[:0]
		now := b.now()
		wf, keys, outcomes, leases := b.cleanupArgs(req, now)
		counts, err := b.countCleanup(ctx, b.ws, req, now)
		if err != nil {
			return err
		}
		res.More = counts.More
		if counts.Workflows > 0 {
			r, err := b.ws.exec(ctx, sqlCleanWorkflows, append(wf, req.Limit)...)
			if err != nil {
				return err
			}
			n, _ := r.RowsAffected()
			res.Workflows = int(n)
		}
		if counts.Keys > 0 {
			err := b.ws.query(ctx, sqlCleanKeys, append(keys, req.Limit), func(r *sql.Rows) error {
				var scope, key string
				if err := r.Scan(&scope, &key); err != nil {
					return err
				}
				gone = append(gone, contract.KeyRef{Scope: contract.Scope(scope), Key: key})
				return nil
			})
			if err != nil {
				return err
			}
			res.Keys = len(gone)
		}
		if counts.Outcomes > 0 {
			r, err := b.ws.exec(ctx, sqlCleanOutcomes, append(outcomes, req.Limit)...)
			if err != nil {
				return err
			}
			n, _ := r.RowsAffected()
			res.Outcomes = int(n)
		}
		if counts.Leases > 0 {
			err := b.ws.query(ctx, sqlCleanLeases, append(leases, req.Limit), func(r *sql.Rows) error {
				var scope, resource string
				if err := r.Scan(&scope, &resource); err != nil {
					return err
				}
				goneLeases = append(goneLeases, leaseRef{contract.Scope(scope), resource})
				return nil
			})
			if err != nil {
				return err
			}
			res.Leases = len(goneLeases)
		}
		return nil
	})
	for _, l := range goneLeases {
		b.signalLease(err, l.scope, l.resource)
	}
	if err != nil {
		return contract.CleanupResult{}, err
	}
	for _, k := range gone {
		b.hub.notify(k)
	}
	return res, nil
}

// CountCleanup implements contract.CleanupCounter.
func (b *Backend) CountCleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	var res contract.CleanupResult
	err := b.read(ctx, func(ctx context.Context) error {
		var err error
		res, err = b.countCleanup(ctx, b.rs, req, b.now())
		return err
	})
	return res, err
}

func (b *Backend) countCleanup(ctx context.Context, s *stmts, req contract.CleanupRequest, now int64) (contract.CleanupResult, error) {
	var res contract.CleanupResult
	wf, keys, outcomes, leases := b.cleanupArgs(req, now)
	for _, k := range []struct {
		query string
		args  []any
		n     *int
	}{
		{sqlCountWorkflows, wf, &res.Workflows},
		{sqlCountKeys, keys, &res.Keys},
		{sqlCountOutcomes, outcomes, &res.Outcomes},
		{sqlCountLeases, leases, &res.Leases},
	} {
		if _, err := s.queryRow(ctx, k.query, append(k.args, req.Limit+1), k.n); err != nil {
			return res, err
		}
		if *k.n > req.Limit {
			*k.n, res.More = req.Limit, true
		}
	}
	return res, nil
}

// DeleteRecord implements contract.RecordDeleter. Tokens come from the
// lease_tokens counter, so a deleted lease never lets a later grant reuse
// a token.
func (b *Backend) DeleteRecord(ctx context.Context, kind contract.RecordKind, scope contract.Scope, id string) (bool, error) {
	var query string
	switch kind {
	case contract.KindWorkflow:
		query = sqlDeleteWorkflow
	case contract.KindKey:
		query = sqlDeleteKey
	case contract.KindLease:
		query = sqlDeleteLease
	default:
		return false, invalid("unknown record kind")
	}
	var found bool
	gone, err := b.write(ctx, func(ctx context.Context) error {
		r, err := b.ws.exec(ctx, query, string(scope), id)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		found = n > 0
		return err
	}, func(err error) {
		if kind == contract.KindLease && (found || err != nil) {
			b.signalLease(err, scope, id)
		}
		if err == nil && kind == contract.KindKey {
			b.hub.notify(contract.KeyRef{Scope: scope, Key: id})
		}
	})
	if gone || err != nil {
		return false, err
	}
	return found, nil
}

// ListKeys implements contract.RecordLister.
func (b *Backend) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	var out []contract.KeyRecord
	err := b.read(ctx, func(ctx context.Context) error {
		out = out[:0]
		now := b.now()
		var query string
		var args []any
		switch q.State {
		case "":
			query, args = sqlListKeys, []any{string(q.Scope), q.After, now, limit(q.Limit)}
		case contract.KeyClaimed:
			query, args = sqlListKeysClaimed, []any{string(q.Scope), q.After, limit(q.Limit)}
		case contract.KeyCompleted:
			query, args = sqlListKeysCompleted, []any{string(q.Scope), q.After, now, limit(q.Limit)}
		case contract.KeyExpired:
			query, args = sqlListKeysExpired, []any{string(q.Scope), q.After, now, now, limit(q.Limit)}
		default:
			return nil // no key is in an unknown state
		}
		return b.rs.query(ctx, query, args, func(r *sql.Rows) error {
			var k keyRow
			if err := r.Scan(k.dest()...); err != nil {
				return err
			}
			rec, err := k.record(now)
			if err != nil {
				return err
			}
			out = append(out, rec)
			return nil
		})
	})
	return out, err
}

// ListLeases implements contract.RecordLister.
func (b *Backend) ListLeases(ctx context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	var out []contract.Lease
	err := b.read(ctx, func(ctx context.Context) error {
		out = out[:0]
		query, args := sqlListLeases, []any{string(q.Scope), q.After, limit(q.Limit)}
		if q.Held {
			query, args = sqlListLeasesHeld, []any{string(q.Scope), q.After, b.now(), limit(q.Limit)}
		}
		return b.rs.query(ctx, query, args, func(r *sql.Rows) error {
			l, err := scanLease(r)
			if err != nil {
				return err
			}
			out = append(out, l)
			return nil
		})
	})
	return out, err
}

// limit is a page size for LIMIT: 0 means none.
func limit(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
