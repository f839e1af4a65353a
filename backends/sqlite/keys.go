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

const keyCols = `scope, key, fingerprint, workflow_id, state, token, lease_until, created_at, completed_at, expires_at, outcome_code, outcome_header, outcome_body, outcome_ref`

const (
	sqlInsertClaim = `INSERT INTO idempotency_keys (scope, key, fingerprint, workflow_id, state, token, lease_until, created_at)
VALUES (?, ?, ?, ?, 'claimed', ?, ?, ?) ON CONFLICT (scope, key) DO NOTHING`
	sqlGetKeyAny = `SELECT ` + keyCols + ` FROM idempotency_keys WHERE scope = ? AND key = ?`
	// sqlGetKey is what GetKey sees: a completed record past its
	// expires_at counts as absent.
	sqlGetKey       = `SELECT ` + keyCols + ` FROM idempotency_keys WHERE scope = ? AND key = ? AND (state = 'claimed' OR expires_at > ?)`
	sqlReplaceClaim = `UPDATE idempotency_keys SET fingerprint = ?, workflow_id = ?, state = 'claimed', token = ?, lease_until = ?, created_at = ?, completed_at = NULL, expires_at = NULL, outcome_code = NULL, outcome_header = NULL, outcome_body = NULL, outcome_ref = NULL WHERE scope = ? AND key = ?`
	sqlReclaim      = `UPDATE idempotency_keys SET token = ?, lease_until = ? WHERE scope = ? AND key = ? AND state = 'claimed'`
	sqlCompleteKey  = `UPDATE idempotency_keys SET state = 'completed', outcome_code = ?, outcome_header = ?, outcome_body = ?, outcome_ref = ?, completed_at = ?, expires_at = ?, lease_until = NULL
WHERE scope = ? AND key = ? AND state = 'claimed' AND token = ?
AND (? = 0 OR EXISTS (SELECT 1 FROM leases l WHERE l.scope = ? AND l.resource = ? AND l.owner = ? AND l.token = ? AND l.expires_at > ?))
RETURNING fingerprint, workflow_id, created_at`
	sqlRenewKey   = `UPDATE idempotency_keys SET lease_until = ? WHERE scope = ? AND key = ? AND state = 'claimed' AND token = ? RETURNING fingerprint, workflow_id, created_at`
	sqlReleaseKey = `DELETE FROM idempotency_keys WHERE scope = ? AND key = ? AND state = 'claimed' AND token = ?`
)

// keyRow is a row of idempotency_keys.
type keyRow struct {
	scope, key, fingerprint, workflowID, state, token string
	leaseUntil, completedAt, expiresAt, code          sql.NullInt64
	createdAt                                         int64
	header, body                                      []byte
	ref                                               sql.NullString
}

func (r *keyRow) dest() []any {
	return []any{&r.scope, &r.key, &r.fingerprint, &r.workflowID, &r.state, &r.token, &r.leaseUntil, &r.createdAt,
		&r.completedAt, &r.expiresAt, &r.code, &r.header, &r.body, &r.ref}
}

// live reports whether the record counts at now.
func (r *keyRow) live(now int64) bool {
	return r.state != string(contract.KeyCompleted) || (r.expiresAt.Valid && now < r.expiresAt.Int64)
}

func (r *keyRow) record() (contract.KeyRecord, error) {
	k := contract.KeyRecord{
		KeyRef:      contract.KeyRef{Scope: contract.Scope(r.scope), Key: r.key},
		Fingerprint: r.fingerprint, WorkflowID: r.workflowID, State: contract.KeyState(r.state),
		LeaseUntil: nullMicros(r.leaseUntil), CreatedAt: fromMicros(r.createdAt),
		CompletedAt: nullMicros(r.completedAt), ExpiresAt: nullMicros(r.expiresAt),
	}
	if k.State == contract.KeyCompleted {
		h, err := decodeHeader(r.header)
		if err != nil {
			return contract.KeyRecord{}, &contract.Error{Code: contract.Corrupt,
				Msg: "the stored outcome header of this key cannot be decoded: inspect it and delete the key (durable delete)", Err: err}
		}
		k.Outcome = &contract.Outcome{Code: int(r.code.Int64), Header: h, Body: r.body, Ref: r.ref.String}
	}
	return k, nil
}

func errFencedKey() error {
	return &contract.Error{Code: contract.Fenced, Msg: "claim token does not hold the key"}
}

func errKeyNotFound() error { return &contract.Error{Code: contract.NotFound, Msg: "key not found"} }

// ClaimKey implements contract.IdempotencyStore.
func (b *Backend) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	var out contract.Claim
	err := b.write(ctx, func(ctx context.Context) error {
		now := b.now()
		token := newToken()
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
			completed := r.state == string(contract.KeyCompleted)
			f = claimrule.Stored{
				Live:      r.live(now),
				Lapsed:    !completed && r.leaseUntil.Int64+micros(b.tol) < now,
				Match:     claimrule.SameRequest(r.fingerprint, r.workflowID, req.Fingerprint, req.WorkflowID),
				Completed: completed,
			}.Facts()
		}
		o := claimrule.Decide(f)
		switch o {
		case claimrule.New:
			// A completed record past its retention: forgotten, and
			// replaced by a new claim.
			if _, err := b.ws.exec(ctx, sqlReplaceClaim, req.Fingerprint, req.WorkflowID, token, until, now, string(req.Scope), req.Key); err != nil {
				return err
			}
			newClaim()
			return nil
		case claimrule.Conflict:
			return &contract.Error{Code: contract.KeyConflict, Msg: "key is bound to another request"}
		}
		rec, err := r.record()
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
		}
		// Reclaim: an abandoned claim: take it over with a new token.
		if _, err := b.ws.exec(ctx, sqlReclaim, token, until, string(req.Scope), req.Key); err != nil {
			return err
		}
		rec.LeaseUntil = fromMicros(until)
		out = contract.Claim{Kind: contract.ClaimReclaimed, Token: token, Record: rec}
		return nil
	})
	if err == errNoop {
		err = nil
	}
	return out, err
}

// CompleteKey implements contract.IdempotencyStore.
func (b *Backend) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	var out contract.KeyRecord
	header := encodeHeader(c.Outcome.Header)
	notify := false
	err := b.write(ctx, func(ctx context.Context) error {
		now := b.now()
		expires := now + micros(c.Retain)
		args := []any{c.Outcome.Code, header, blob(c.Outcome.Body), c.Outcome.Ref, now, expires, string(c.Scope), c.Key, c.Token}
		args = append(args, b.fenceArgs(c.Scope, c.Fence, now)...)
		var fp, wf string
		var created int64
		found, err := b.ws.queryRow(ctx, sqlCompleteKey, args, &fp, &wf, &created)
		if err != nil {
			return err
		}
		if found {
			notify = true
			out = contract.KeyRecord{KeyRef: c.KeyRef, Fingerprint: fp, WorkflowID: wf, State: contract.KeyCompleted,
				Outcome: outcomecodec.Clone(&c.Outcome), CreatedAt: fromMicros(created), CompletedAt: fromMicros(now), ExpiresAt: fromMicros(expires)}
			return nil
		}
		var r keyRow
		found, err = b.ws.queryRow(ctx, sqlGetKeyAny, []any{string(c.Scope), c.Key}, r.dest()...)
		switch {
		case err != nil:
			return err
		case !found || !r.live(now) || r.token != c.Token:
			return errFencedKey()
		case r.state == string(contract.KeyCompleted):
			out, err = r.record() // a retry after a lost reply
			if err != nil {
				return err
			}
			return errNoop
		}
		return &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
	})
	if err == errNoop {
		err = nil
	}
	if notify {
		b.hub.notify(c.KeyRef)
	}
	return out, err
}

// RenewKey implements contract.IdempotencyStore.
func (b *Backend) RenewKey(ctx context.Context, ref contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	var out contract.KeyRecord
	err := b.write(ctx, func(ctx context.Context) error {
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
	})
	return out, err
}

// ReleaseKey implements contract.IdempotencyStore.
func (b *Backend) ReleaseKey(ctx context.Context, ref contract.KeyRef, token string) (bool, error) {
	var released bool
	err := b.write(ctx, func(ctx context.Context) error {
		res, err := b.ws.exec(ctx, sqlReleaseKey, string(ref.Scope), ref.Key, token)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		released = n > 0
		return err
	})
	if released && err == nil {
		b.hub.notify(ref)
	}
	return released && err == nil, err
}

// GetKey implements contract.IdempotencyStore.
func (b *Backend) GetKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	var out contract.KeyRecord
	err := b.read(ctx, func(ctx context.Context) error {
		var r keyRow
		found, err := b.rs.queryRow(ctx, sqlGetKey, []any{string(ref.Scope), ref.Key, b.now()}, r.dest()...)
		if err != nil {
			return err
		}
		if !found {
			return errKeyNotFound()
		}
		out, err = r.record()
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
		if err != nil || rec.State == contract.KeyCompleted {
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
