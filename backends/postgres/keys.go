package postgres

import (
	"context"
	"time"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/claimrule"
)

// maxStaleRetries bounds how often CompleteKey (and WaitKey's read) run
// their statement again when its snapshot could not explain the result (a row
// committed by another client while the statement ran). Each retry takes a
// new snapshot, so a second attempt almost always decides.
const maxStaleRetries = 5

// keyColumns are the columns of a key record, as keyRow scans them.
var keyColumns = []string{"scope", "key", "fingerprint", "workflow_id", "state", "lease_until", "created_at",
	"completed_at", "expires_at", "forget_at", "outcome_code", "outcome_header", "outcome_body", "outcome_ref"}

// keyRow is the scan target of keyColumns. state is "expired" for a
// completed key past its retention when the statement reports it so
// (keyColumnsAt); its payload columns are then NULL.
type keyRow struct {
	scope, key, fingerprint, workflowID, state string
	leaseUntil                                 pgclient.NullTime
	created                                    time.Time
	completed, expires, forget                 pgclient.NullTime
	code                                       pgclient.NullInt64
	header, body                               []byte
	ref                                        pgclient.NullString
}

func (r *keyRow) dest() []any { return r.destAfter() }

// destAfter returns the scan targets of a row that has the columns of
// prefix first.
func (r *keyRow) destAfter(prefix ...any) []any {
	return append(append(make([]any, 0, len(prefix)+len(keyColumns)), prefix...),
		&r.scope, &r.key, &r.fingerprint, &r.workflowID, &r.state, &r.leaseUntil, &r.created,
		&r.completed, &r.expires, &r.forget, &r.code, &r.header, &r.body, &r.ref)
}

func (r *keyRow) record() (contract.KeyRecord, error) {
	rec := contract.KeyRecord{
		KeyRef:      contract.KeyRef{Scope: contract.Scope(r.scope), Key: r.key},
		Fingerprint: r.fingerprint, WorkflowID: r.workflowID, State: contract.KeyState(r.state),
		LeaseUntil: r.leaseUntil.UTC(), CreatedAt: utc(r.created),
		CompletedAt: r.completed.UTC(), ExpiresAt: r.expires.UTC(),
	}
	if rec.State == contract.KeyCompleted || rec.State == contract.KeyExpired {
		// A key completed before migration 5 has no forget_at: its
		// tombstone ends with its retention.
		rec.ForgetAt = r.forget.UTC()
		if !r.forget.Valid {
			rec.ForgetAt = rec.ExpiresAt
		}
	}
	if rec.State == contract.KeyExpired {
		// A tombstone: the status code alone.
		o := &contract.Outcome{}
		if r.code.Valid {
			o.Code = int(r.code.Int64)
		}
		rec.Outcome = o
	}
	if rec.State == contract.KeyCompleted {
		h, err := decodeHeader(r.header)
		if err != nil {
			// Fail closed: replaying a damaged outcome, or running the
			// request again, could both be wrong. An operator inspects and
			// deletes the record (durable inspect, durable delete).
			return contract.KeyRecord{}, &contract.Error{Code: contract.Corrupt, Msg: "the stored outcome header of this key cannot be decoded: inspect it and delete it with the durable CLI", Err: err,
				Record: &contract.RecordRef{Kind: contract.KindKey, Scope: contract.Scope(r.scope), ID: r.key}}
		}
		o := &contract.Outcome{Header: h, Body: r.body}
		if r.code.Valid {
			o.Code = int(r.code.Int64)
		}
		if r.ref.Valid {
			o.Ref = r.ref.String
		}
		rec.Outcome = o
	}
	return rec, nil
}

func errFencedKey() error {
	return &contract.Error{Code: contract.Fenced, Msg: "claim token does not hold the key"}
}

func errKeyNotFound() error {
	return &contract.Error{Code: contract.NotFound, Msg: "key not found"}
}

func errContention() error {
	return &contract.Error{Code: contract.Unavailable, Msg: "key changed concurrently on every attempt"}
}

// optimisticClaims is how many times ClaimKey runs its statement (a read
// that writes only when the key can be taken) before it falls back to the
// locked form, which cannot lose a race. Each run takes a new snapshot, so
// a second run almost always decides; only claims racing a stream of
// claims, releases and reclaims of the same key need the fallback.
const optimisticClaims = 3

// ClaimKey implements contract.IdempotencyStore. One statement reads the
// key and, only when it can be taken, claims, reclaims or hands back the
// caller's own claim (see qClaimKey); it runs again only when its snapshot
// missed a concurrent commit, and after optimisticClaims such rounds
// ClaimKey decides in a transaction that holds the row's lock
// (claimLocked), so it always ends in an answer.
func (b *Backend) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	token := req.Token
	if token == "" {
		token = newToken()
	}
	p := b.claimKeyParams(req, token)
	for attempt := 0; attempt < b.claimRounds; attempt++ {
		p.Now = b.nowParam()
		var r claimKeyRow
		if _, err := qClaimKey.one(ctx, b, p, &r); err != nil {
			return contract.Claim{}, err
		}
		if c, err, decided := claimResult(req, &r, p.Token); decided {
			return c, err
		}
	}
	p.Now = b.nowParam()
	b.lockedClaims.Add(1)
	return b.claimLocked(ctx, req, p)
}

// claimLocked is ClaimKey's fallback: in one transaction, qClaimKeyLock
// inserts the claim or locks the stored row, claimrule.Decide decides on
// that row's latest version, and, when the rule takes the key,
// qClaimKeyTake writes it under the lock before COMMIT. A concurrent
// writer of the row waits for the transaction, or the transaction for it:
// nothing can change the row between the decision and the write. An answer
// that takes nothing rolls the transaction back.
func (b *Backend) claimLocked(ctx context.Context, req contract.ClaimRequest, p claimKeyParams) (c contract.Claim, err error) {
	err = b.do(ctx, write, func() error {
		tx, err := b.client.Begin(ctx, b.execMode())
		if err != nil {
			return err
		}
		var done bool
		defer func() {
			if !done {
				rollback(ctx, tx)
			}
		}()
		var r claimKeyRow
		if _, err := tx.QueryRow(ctx, qClaimKeyLock.kind, qClaimKeyLock.sql(b.st), qClaimKeyLock.args(p), qClaimKeyLock.dest(&r)...); err != nil {
			return err
		}
		var o claimrule.Outcome
		if r.taken == claimTakenNew {
			o = claimrule.New
		} else {
			o = claimrule.Decide(r.facts())
		}
		switch {
		case r.taken == claimTakenNew:
			c = contract.Claim{Kind: contract.ClaimNew, Token: p.Token, Record: contract.KeyRecord{
				KeyRef: req.KeyRef, Fingerprint: req.Fingerprint, WorkflowID: req.WorkflowID,
				State: contract.KeyClaimed, LeaseUntil: utc(r.until), CreatedAt: utc(r.now),
			}}
		case o.Takes():
			var k keyRow
			tp := claimTakeParams{Now: r.now, Scope: p.Scope, Key: p.Key, Fingerprint: p.Fingerprint,
				WorkflowID: p.WorkflowID, Token: p.Token, TTL: p.TTL}
			found, err := tx.QueryRow(ctx, qClaimKeyTake.kind, qClaimKeyTake.sql(b.st), qClaimKeyTake.args(tp), qClaimKeyTake.dest(&k)...)
			if err != nil {
				return err
			}
			if !found {
				return errLockLost()
			}
			rec, err := k.record()
			if err != nil {
				return err
			}
			kind := contract.ClaimNew
			if o == claimrule.Reclaim {
				kind = contract.ClaimReclaimed
			}
			c = contract.Claim{Kind: kind, Token: p.Token, Record: rec}
		default:
			// Nothing to write: the answer is the locked row's.
			var decided bool
			c, err, decided = claimResult(req, &r, p.Token)
			if !decided {
				return errLockLost()
			}
			done = true
			rollback(ctx, tx)
			return err
		}
		done = true
		return tx.Commit(ctx)
	})
	if err != nil {
		return contract.Claim{}, err
	}
	return c, nil
}

// errLockLost: the locked form found the row changed under its lock, which
// PostgreSQL rules out; it fails rather than answer from a row it does not
// hold.
func errLockLost() error {
	return &contract.Error{Code: contract.Unavailable, Msg: "key changed under the claim's row lock"}
}

// rollback ends tx, which failed or has nothing to commit. It runs after
// ctx may have ended, bounded on its own.
func rollback(ctx context.Context, tx *pgclient.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// rollbackTimeout bounds a rollback the backend sends itself.
const rollbackTimeout = 10 * time.Second

// execMode reports whether the backend's statements in a transaction run
// in pgx's exec mode: behind a transaction pooler, as its other statements
// do (unless the DSN chose the mode).
func (b *Backend) execMode() bool {
	return pgclient.ModeOf(b.q).Exec
}

// claimResult says what ClaimKey's row r means for the claim req with
// token: what durable_claim_key took, or else the answer of the claim rule
// (claimrule.Decide) on the facts the statement read. decided is false
// when the row's snapshot missed a concurrent commit: the statement must
// run again.
func claimResult(req contract.ClaimRequest, r *claimKeyRow, token string) (c contract.Claim, err error, decided bool) {
	switch r.taken {
	case claimTakenNew, claimTakenReclaim, claimTakenHeld:
		rec := contract.KeyRecord{
			KeyRef: req.KeyRef, Fingerprint: req.Fingerprint, WorkflowID: req.WorkflowID,
			State: contract.KeyClaimed, LeaseUntil: utc(r.until), CreatedAt: utc(r.now),
		}
		kind := contract.ClaimNew
		switch r.taken {
		case claimTakenReclaim:
			// The claim the row shows (durable_claim_key checked its
			// token), with a new token and lease.
			kind, rec.WorkflowID, rec.CreatedAt = contract.ClaimReclaimed, r.workflowID, utc(r.created)
		case claimTakenHeld:
			// The caller's own claim the row shows (durable_claim_key
			// checked its token), with a new lease.
			rec.WorkflowID, rec.CreatedAt = r.workflowID, utc(r.created)
		}
		return contract.Claim{Kind: kind, Token: token, Record: rec}, nil, true
	}
	// A record that cannot be decoded fails closed whatever the rule
	// says (an empty row, of no record, always decodes).
	rec, err := r.record()
	if err != nil {
		return contract.Claim{}, err, true
	}
	switch claimrule.Decide(r.facts()) {
	case claimrule.Conflict:
		return contract.Claim{}, &contract.Error{Code: contract.KeyConflict, Msg: "key is bound to another request"}, true
	case claimrule.Gone:
		return contract.Claim{}, errOutcomeExpired(), true
	case claimrule.Replay:
		return contract.Claim{Kind: contract.ClaimCompleted, Record: rec}, nil, true
	case claimrule.InFlight:
		return contract.Claim{Kind: contract.ClaimInFlight, Record: rec}, nil, true
	}
	// Takeable in our snapshot (absent, past its tombstone, abandoned, or
	// the caller's own claim), yet not taken: a row committed after our
	// snapshot, or someone else got it. Look again.
	return contract.Claim{}, nil, false
}

func errOutcomeExpired() error {
	return &contract.Error{Code: contract.OutcomeExpired, Msg: "the key's outcome is no longer kept: only its tombstone is left"}
}

// CompleteKey implements contract.IdempotencyStore. One statement stores
// the outcome (and notifies waiters), or returns the record as its snapshot
// saw it to explain why not: a stale token or an expired record → Fenced, a
// record already completed with this token → that record (a retry after a
// lost reply), an invalid fence → Fenced.
func (b *Backend) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	p := b.completeKeyParams(c)
	for attempt := 0; attempt < maxStaleRetries; attempt++ {
		p.Now = b.nowParam()
		var r completeKeyRow
		found, err := qCompleteKey.one(ctx, b, p, &r)
		if err != nil {
			return contract.KeyRecord{}, err
		}
		if rec, err, decided := completeResult(c, found, &r); decided {
			return rec, err
		}
	}
	return contract.KeyRecord{}, errContention()
}

// completeResult says what CompleteKey's row r (found: there was one)
// means for c. decided is false when the row changed after the
// statement's snapshot: the statement must run again.
func completeResult(c contract.Completion, found bool, r *completeKeyRow) (rec contract.KeyRecord, err error, decided bool) {
	switch {
	case !found || !r.live || !r.tokenOK:
		return contract.KeyRecord{}, errFencedKey(), true
	case r.applied:
		rec, err := r.record()
		return rec, err, true
	case r.state == string(contract.KeyCompleted), r.state == string(contract.KeyExpired):
		rec, err := r.record() // a retry after a lost reply (the tombstone, once the outcome expired)
		return rec, err, true
	case c.Fence != nil && !r.fenceOK:
		return contract.KeyRecord{}, &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}, true
	}
	// Claimed with our token in our snapshot, yet not updated: the row
	// changed after the snapshot (completed by a concurrent retry,
	// reclaimed or released). Look again.
	return contract.KeyRecord{}, nil, false
}

// RenewKey implements contract.IdempotencyStore. One statement.
func (b *Backend) RenewKey(ctx context.Context, k contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	var r keyRow
	found, err := qRenewKey.one(ctx, b, b.renewKeyParams(k, token, ttl), &r)
	if err != nil {
		return contract.KeyRecord{}, err
	}
	if !found {
		return contract.KeyRecord{}, errFencedKey()
	}
	return r.record()
}

// ReleaseKey implements contract.IdempotencyStore. One statement deletes
// the claim and notifies waiters.
func (b *Backend) ReleaseKey(ctx context.Context, k contract.KeyRef, token string) (bool, error) {
	var r countRow
	_, err := qReleaseKey.one(ctx, b, b.releaseKeyParams(k, token), &r)
	return r.n > 0, err
}

// GetKey implements contract.IdempotencyStore. One statement.
func (b *Backend) GetKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	var r keyRow
	found, err := qGetKey.one(ctx, b, b.getKeyParams(k), &r)
	if err != nil {
		return contract.KeyRecord{}, err
	}
	if !found {
		return contract.KeyRecord{}, errKeyNotFound()
	}
	return r.record()
}

// --- the parameters of each statement, from the request (see
// workflows.go) ---

// claimKeyParams: token is the claim's (the request's own, or newToken).
// ClaimKey sets Now again before every attempt.
func (b *Backend) claimKeyParams(req contract.ClaimRequest, token string) claimKeyParams {
	return claimKeyParams{
		Now: b.nowParam(), Tol: b.tol, Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint,
		WorkflowID: req.WorkflowID, Token: token, TTL: req.TTL,
	}
}

// completeKeyParams: CompleteKey sets Now again before every attempt.
func (b *Backend) completeKeyParams(c contract.Completion) completeKeyParams {
	return completeKeyParams{
		Now: b.nowParam(), Tol: b.tol, Scope: c.Scope, Key: c.Key, Token: c.Token, Code: int64(c.Outcome.Code),
		Header: encodeHeader(c.Outcome.Header), Body: c.Outcome.Body, Ref: c.Outcome.Ref, Retain: c.Retain,
		Tombstone: c.Tombstone, fenceParams: fenceOf(c.Fence), Channel: b.channel,
	}
}

func (b *Backend) renewKeyParams(k contract.KeyRef, token string, ttl time.Duration) renewKeyParams {
	return renewKeyParams{Now: b.nowParam(), Scope: k.Scope, Key: k.Key, Token: token, TTL: ttl}
}

func (b *Backend) releaseKeyParams(k contract.KeyRef, token string) releaseKeyParams {
	return releaseKeyParams{Scope: k.Scope, Key: k.Key, Token: token, Channel: b.channel}
}

func (b *Backend) getKeyParams(k contract.KeyRef) getKeyParams {
	return getKeyParams{Now: b.nowParam(), Scope: k.Scope, Key: k.Key}
}
