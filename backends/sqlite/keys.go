package sqlite

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/claimrule"
	"github.com/durable-go/durable/internal/outcomecodec"
)

const keyCols = `scope, key, fingerprint, workflow_id, state, token, lease_until, created_at, completed_at, expires_at, forget_at, outcome_code, outcome_header, outcome_body, outcome_ref`

const (
	sqlInsertClaim = `INSERT INTO idempotency_keys (scope, key, fingerprint, workflow_id, state, token, lease_until, created_at)
VALUES (?, ?, ?, ?, 'claimed', ?, ?, ?) ON CONFLICT (scope, key) DO NOTHING`
	sqlGetKeyAny = `SELECT ` + keyCols + ` FROM idempotency_keys WHERE scope = ? AND key = ?`
	// sqlGetKey is what GetKey sees: a completed record past its
	// forget_at (the end of its tombstone) counts as absent.
	sqlGetKey       = `SELECT ` + keyCols + ` FROM idempotency_keys WHERE scope = ? AND key = ? AND (state = 'claimed' OR forget_at > ?)`
	sqlReplaceClaim = `UPDATE idempotency_keys SET fingerprint = ?, workflow_id = ?, state = 'claimed', token = ?, lease_until = ?, created_at = ?, completed_at = NULL, expires_at = NULL, forget_at = NULL, outcome_code = NULL, outcome_header = NULL, outcome_body = NULL, outcome_ref = NULL WHERE scope = ? AND key = ?`
	sqlReclaim      = `UPDATE idempotency_keys SET token = ?, lease_until = ? WHERE scope = ? AND key = ? AND state = 'claimed'`
	// sqlCompleteKey is the completion, plain or in a transaction: one
	// statement that checks the token holds the claim (and the fence, if
	// any) and writes the outcome.
	sqlCompleteKey = `UPDATE idempotency_keys SET state = 'completed', outcome_code = ?, outcome_header = ?, outcome_body = ?, outcome_ref = ?, completed_at = ?, expires_at = ?, forget_at = ?, lease_until = NULL
WHERE scope = ? AND key = ? AND state = 'claimed' AND token = ?
AND (? = 0 OR EXISTS (SELECT 1 FROM leases l WHERE l.scope = ? AND l.resource = ? AND l.owner = ? AND l.token = ? AND l.expires_at > ?))
RETURNING fingerprint, workflow_id, created_at`
	// sqlRenewKey renews a claim, and hands a caller's own claim back
	// (ClaimKey's Held).
	sqlRenewKey   = `UPDATE idempotency_keys SET lease_until = ? WHERE scope = ? AND key = ? AND state = 'claimed' AND token = ? RETURNING fingerprint, workflow_id, created_at`
	sqlReleaseKey = `DELETE FROM idempotency_keys WHERE scope = ? AND key = ? AND state = 'claimed' AND token = ?`
)

// keyRow is a row of idempotency_keys.
type keyRow struct {
	scope, key, fingerprint, workflowID, state, token  string
	leaseUntil, completedAt, expiresAt, forgetAt, code sql.NullInt64
	createdAt                                          int64
	header, body                                       []byte
	ref                                                sql.NullString
}

func (r *keyRow) dest() []any {
	return []any{&r.scope, &r.key, &r.fingerprint, &r.workflowID, &r.state, &r.token, &r.leaseUntil, &r.createdAt,
		&r.completedAt, &r.expiresAt, &r.forgetAt, &r.code, &r.header, &r.body, &r.ref}
}

func (r *keyRow) completed() bool { return r.state == string(contract.KeyCompleted) }

// forget is the end of a completed record's tombstone: forget_at, which
// migration 2 fills for older rows (expires_at, as a NULL would be).
func (r *keyRow) forget() int64 {
	if r.forgetAt.Valid {
		return r.forgetAt.Int64
	}
	return r.expiresAt.Int64
}

// live reports whether the record counts at now: a completed record past
// its tombstone counts as absent.
func (r *keyRow) live(now int64) bool {
	return !r.completed() || now < r.forget()
}

// expired reports whether the record is completed and its outcome's
// retention ended at now: it reads as its tombstone.
func (r *keyRow) expired(now int64) bool {
	return r.completed() && r.expiresAt.Int64 <= now
}

// record returns the record as it reads at now: past ExpiresAt a completed
// record is its tombstone (KeyExpired, the code alone), whether or not
// Cleanup has dropped its payload yet.
func (r *keyRow) record(now int64) (contract.KeyRecord, error) {
	k := contract.KeyRecord{
		KeyRef:      contract.KeyRef{Scope: contract.Scope(r.scope), Key: r.key},
		Fingerprint: r.fingerprint, WorkflowID: r.workflowID, State: contract.KeyState(r.state),
		LeaseUntil: nullMicros(r.leaseUntil), CreatedAt: fromMicros(r.createdAt),
		CompletedAt: nullMicros(r.completedAt), ExpiresAt: nullMicros(r.expiresAt),
	}
	if !r.completed() {
		return k, nil
	}
	k.ForgetAt = fromMicros(r.forget())
	if r.expired(now) {
		k.State = contract.KeyExpired
		k.Outcome = &contract.Outcome{Code: int(r.code.Int64)}
		return k, nil
	}
	h, err := decodeHeader(r.header)
	if err != nil {
		return contract.KeyRecord{}, &contract.Error{Code: contract.Corrupt,
			Msg: "the stored outcome header of this key cannot be decoded: inspect it and delete the key (durable delete)", Err: err,
			Record: &contract.RecordRef{Kind: contract.KindKey, Scope: k.Scope, ID: k.Key}}
	}
	k.Outcome = &contract.Outcome{Code: int(r.code.Int64), Header: h, Body: r.body, Ref: r.ref.String}
	return k, nil
}

func errFencedKey() error {
	return &contract.Error{Code: contract.Fenced, Msg: "claim token does not hold the key"}
}

func errKeyNotFound() error { return &contract.Error{Code: contract.NotFound, Msg: "key not found"} }

func errOutcomeExpired() error {
	return &contract.Error{Code: contract.OutcomeExpired, Msg: "the key's outcome is no longer retained; the request must not run again"}
}

// ClaimKey implements contract.IdempotencyStore. A request with its own
// token (ClaimRequest.Token) stores it, and gets its own claim back while
// nobody has reclaimed or completed it (claimrule's Held).
func (b *Backend) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	var out contract.Claim
	gone, err := b.write(ctx, func(ctx context.Context) error {
		out = contract.Claim{}
		now := b.now()
		token := req.Token
		if token == "" {
			token = newToken()
		}
		until := now + micros(req.TTL)
		newClaim := func() {
			out = contract.Claim{Kind: contract.ClaimNew, Token: token, Record: contract.KeyRecord{
				KeyRef: req.KeyRef, Fingerprint: req.Fingerprint, WorkflowID: req.WorkflowID,
				State: contract.KeyClaimed, LeaseUntil: fromMicros(until), CreatedAt: fromMicros(now),
			}}
		}
		res, err := b.ws.exec(ctx, sqlInsertClaim, string(req.Scope), req.Key, req.Fingerprint, req.WorkflowID, token, until, now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			newClaim()
			return nil
		}
		var r keyRow
		found, err := b.ws.queryRow(ctx, sqlGetKeyAny, []any{string(req.Scope), req.Key}, r.dest()...)
		if err != nil {
			return err
		}
		var f claimrule.Facts // no record
		if found {
			completed := r.completed()
			f = claimrule.Stored{
				Live:      r.live(now),
				Lapsed:    !completed && r.leaseUntil.Int64+micros(b.tol) < now,
				Match:     claimrule.SameRequest(r.fingerprint, r.workflowID, req.Fingerprint, req.WorkflowID),
				Completed: completed,
				Expired:   r.expired(now),
				Own:       !completed && req.Token != "" && r.token == req.Token,
			}.Facts()
		}
		o := claimrule.Decide(f)
		switch o {
		case claimrule.New:
			// A completed record past its tombstone: forgotten, and
			// replaced by a new claim.
			if _, err := b.ws.exec(ctx, sqlReplaceClaim, req.Fingerprint, req.WorkflowID, token, until, now, string(req.Scope), req.Key); err != nil {
				return err
			}
			newClaim()
			return nil
		case claimrule.Conflict:
			return &contract.Error{Code: contract.KeyConflict, Msg: "key is bound to another request"}
		case claimrule.Gone:
			return errOutcomeExpired()
		}
		rec, err := r.record(now)
		if err != nil {
			return err
		}
		switch o {
		case claimrule.Replay:
			out = contract.Claim{Kind: contract.ClaimCompleted, Record: rec}
			return errNoop
		case claimrule.InFlight:
			out = contract.Claim{Kind: contract.ClaimInFlight, Record: rec}
			return errNoop
		case claimrule.Held:
			// The caller's own claim, whose reply it lost: its lease
			// starts again.
			var fp, wf string
			var created int64
			found, err := b.ws.queryRow(ctx, sqlRenewKey, []any{until, string(req.Scope), req.Key, req.Token}, &fp, &wf, &created)
			if err != nil {
				return err
			}
			if !found {
				return errFencedKey() // cannot happen: the row was read in this transaction
			}
			rec.LeaseUntil = fromMicros(until)
			out = contract.Claim{Kind: contract.ClaimNew, Token: req.Token, Record: rec}
			return nil
		}
		// Reclaim: an abandoned claim: take it over with a new token.
		if _, err := b.ws.exec(ctx, sqlReclaim, token, until, string(req.Scope), req.Key); err != nil {
			return err
		}
		rec.LeaseUntil = fromMicros(until)
		out = contract.Claim{Kind: contract.ClaimReclaimed, Token: token, Record: rec}
		return nil
	}, nil)
	if gone {
		return contract.Claim{}, err
	}
	if err == errNoop {
		err = nil
	}
	return out, err
}

// rowQuery runs a statement that returns at most one row into dest and
// reports whether it returned one: on the write connection's prepared
// statements (b.ws.queryRow), or in a transaction (see tx.go).
type rowQuery func(ctx context.Context, query string, args []any, dest ...any) (bool, error)

// CompleteKey implements contract.IdempotencyStore.
func (b *Backend) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	var out contract.KeyRecord
	header := encodeHeader(c.Outcome.Header)
	notify := false
	gone, err := b.write(ctx, func(ctx context.Context) error {
		var err error
		out, notify, err = b.complete(ctx, b.ws.queryRow, c, header, b.now())
		return err
	}, func(err error) {
		if notify {
			b.hub.notify(c.KeyRef)
		}
	})
	if gone {
		return contract.KeyRecord{}, err
	}
	if err == errNoop {
		err = nil
	}
	return out, err
}

// complete stores c's outcome with q, at now: sqlCompleteKey, and when it
// changes nothing, a read of the record to say why. completed reports
// whether this call completed the key (its waiters are to be woken once
// that commits). A retry with the same token on the record it completed
// returns that record (its outcome, or past ExpiresAt its tombstone) with
// errNoop.
func (b *Backend) complete(ctx context.Context, q rowQuery, c contract.Completion, header []byte, now int64) (out contract.KeyRecord, completed bool, err error) {
	expires := now + micros(c.Retain)
	forget := now + micros(max(c.Retain, c.Tombstone))
	args := []any{c.Outcome.Code, header, blob(c.Outcome.Body), c.Outcome.Ref, now, expires, forget, string(c.Scope), c.Key, c.Token}
	args = append(args, b.fenceArgs(c.Scope, c.Fence, now)...)
	var fp, wf string
	var created int64
	found, err := q(ctx, sqlCompleteKey, args, &fp, &wf, &created)
	if err != nil {
		return out, false, err
	}
	if found {
		out = contract.KeyRecord{KeyRef: c.KeyRef, Fingerprint: fp, WorkflowID: wf, State: contract.KeyCompleted,
			Outcome: outcomecodec.Clone(&c.Outcome), CreatedAt: fromMicros(created), CompletedAt: fromMicros(now),
			ExpiresAt: fromMicros(expires), ForgetAt: fromMicros(forget)}
		if expires <= now { // Retain 0 (the Store never sends it): already a tombstone
			out.State, out.Outcome = contract.KeyExpired, &contract.Outcome{Code: c.Outcome.Code}
		}
		return out, true, nil
	}
	var r keyRow
	found, err = q(ctx, sqlGetKeyAny, []any{string(c.Scope), c.Key}, r.dest()...)
	switch {
	case err != nil:
		return out, false, err
	case !found || !r.live(now) || r.token != c.Token:
		return out, false, errFencedKey()
	case r.completed():
		out, err = r.record(now) // a retry after a lost reply
		if err != nil {
			return out, false, err
		}
		return out, false, errNoop
	}
	return out, false, &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
}

// RenewKey implements contract.IdempotencyStore.
func (b *Backend) RenewKey(ctx context.Context, ref contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	var out contract.KeyRecord
	gone, err := b.write(ctx, func(ctx context.Context) error {
		now := b.now()
		until := now + micros(ttl)
		var fp, wf string
		var created int64
		found, err := b.ws.queryRow(ctx, sqlRenewKey, []any{until, string(ref.Scope), ref.Key, token}, &fp, &wf, &created)
		if err != nil {
			return err
		}
		if !found {
			return errFencedKey()
		}
		out = contract.KeyRecord{KeyRef: ref, Fingerprint: fp, WorkflowID: wf, State: contract.KeyClaimed,
			LeaseUntil: fromMicros(until), CreatedAt: fromMicros(created)}
		return nil
	}, nil)
	if gone {
		return contract.KeyRecord{}, err
	}
	return out, err
}

// ReleaseKey implements contract.IdempotencyStore.
func (b *Backend) ReleaseKey(ctx context.Context, ref contract.KeyRef, token string) (bool, error) {
	var released bool
	gone, err := b.write(ctx, func(ctx context.Context) error {
		res, err := b.ws.exec(ctx, sqlReleaseKey, string(ref.Scope), ref.Key, token)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		released = n > 0
		return err
	}, func(err error) {
		if released && err == nil {
			b.hub.notify(ref)
		}
	})
	if gone {
		return false, err
	}
	return released && err == nil, err
}

// GetKey implements contract.IdempotencyStore.
func (b *Backend) GetKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	var out contract.KeyRecord
	err := b.read(ctx, func(ctx context.Context) error {
		var r keyRow
		now := b.now()
		found, err := b.rs.queryRow(ctx, sqlGetKey, []any{string(ref.Scope), ref.Key, now}, r.dest()...)
		if err != nil {
			return err
		}
		if !found {
			return errKeyNotFound()
		}
		out, err = r.record(now)
		return err
	})
	return out, err
}

// WaitKey implements contract.KeyWaiter. A completion, release, cleanup or
// delete through any backend of this process on the same file wakes the
// waiter at once; one by another process is seen by polling, from 5 ms
// doubling to 500 ms (with jitter).
func (b *Backend) WaitKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	delay := waitPollMin
	for {
		ch := b.hub.subscribe(ref)
		rec, err := b.GetKey(ctx, ref)
		if err != nil || rec.State != contract.KeyClaimed { // completed, or its tombstone
			b.hub.unsubscribe(ref, ch)
			if err != nil && b.closed.Load() {
				return contract.KeyRecord{}, errClosed()
			}
			return rec, err
		}
		t := time.NewTimer(delay/2 + rand.N(delay))
		select {
		case <-ch:
			delay = waitPollMin
		case <-t.C:
			delay = min(2*delay, waitPollMax)
		case <-b.done:
			t.Stop()
			b.hub.unsubscribe(ref, ch)
			return contract.KeyRecord{}, errClosed()
		case <-ctx.Done():
			t.Stop()
			b.hub.unsubscribe(ref, ch)
			return contract.KeyRecord{}, &contract.Error{Code: contract.Canceled, Err: ctx.Err()}
		}
		t.Stop()
		b.hub.unsubscribe(ref, ch)
	}
}

// The polling bounds of WaitKey, for changes made by other processes.
const (
	waitPollMin = 5 * time.Millisecond
	waitPollMax = 500 * time.Millisecond
)

// --- outcome headers ---

// Outcome headers are stored in the outcome_header column as a zero byte
// and the shared, versioned header encoding of internal/outcomecodec; the
// backend's first, untagged encoding is still read. A nil map is NULL.

func encodeHeader(h map[string][]string) []byte { return outcomecodec.EncodeTaggedHeader(h) }

func decodeHeader(p []byte) (map[string][]string, error) { return outcomecodec.DecodeTaggedHeader(p) }
