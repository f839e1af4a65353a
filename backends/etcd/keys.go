package etcd

import (
	"context"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/claimrule"
	"github.com/durable-go/durable/internal/outcomecodec"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keyKeys are the etcd keys of one idempotency key.
type keyKeys struct{ rec, tok, out, busy, tomb string }

func (b *Backend) keyKeys(ref contract.KeyRef) keyKeys {
	return keyKeys{
		rec:  b.key(nsKey, ref.Scope, ref.Key),
		tok:  b.key(nsKeyToken, ref.Scope, ref.Key),
		out:  b.key(nsKeyOut, ref.Scope, ref.Key),
		busy: b.key(nsKeyBusy, ref.Scope, ref.Key),
		tomb: b.key(nsKeyTomb, ref.Scope, ref.Key),
	}
}

// keyState is what one read of a key found.
type keyState struct {
	exists bool
	tok    tokenRec
	tokRev int64 // the token record's ModRevision
	busy   bool  // the claim's busy marker is alive (less than TTL + tolerance old)
	// live: claimed, or completed and its outcome's retention lease or its
	// tombstone's lease is alive.
	live bool
	// expired: completed and only the tombstone is left (the outcome
	// record's lease expired, or its reported ExpiresAt passed).
	expired bool
	rec     contract.KeyRecord
}

// readOps reads a key's records, in this order: record, token, outcome,
// busy marker (key only), tombstone.
func (kk keyKeys) readOps() []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpGet(kk.rec), clientv3.OpGet(kk.tok), clientv3.OpGet(kk.out),
		clientv3.OpGet(kk.busy, clientv3.WithKeysOnly()), clientv3.OpGet(kk.tomb),
	}
}

// keyStateOf decodes the five reads of readOps starting at response i, at
// now (the local clock, see keyStateFrom).
func keyStateOf(ref contract.KeyRef, r *clientv3.TxnResponse, i int, now time.Time) (keyState, error) {
	return keyStateFrom(ref, rangeKV(r, i), rangeKV(r, i+1), rangeKV(r, i+2), rangeKV(r, i+3), rangeKV(r, i+4), now)
}

// keyStateFrom decodes a key's records. A completed key reads as its
// outcome while the outcome record lives (on its etcd lease of Retain), as
// its tombstone while only the tombstone record lives (on its lease of
// max(Retain, Tombstone)), and as absent once both are gone. Records
// stored before tombstones existed have no tombstone record: their
// ForgetAt is their ExpiresAt. The payload is never returned once the
// reported ExpiresAt has passed on the local clock (now), even if an etcd
// leader change kept the outcome record a little longer: the key then
// reads as its tombstone. That only ever hides a payload early; whether
// the key still binds its request is etcd's timers' decision alone.
func keyStateFrom(ref contract.KeyRef, rec, tok, out, busy, tomb *mvccpb.KeyValue, now time.Time) (keyState, error) {
	if rec == nil {
		return keyState{}, nil
	}
	if tok == nil {
		return keyState{}, corrupt("idempotency key")
	}
	t, err := decodeToken(tok.Value)
	if err != nil {
		return keyState{}, err
	}
	st := keyState{exists: true, tok: t, tokRev: tok.ModRevision, busy: busy != nil}
	if t.state == stateCompleted && out == nil && tomb == nil {
		// Past its tombstone (or, for a record without one, past
		// retention): the etcd leases expired. The record counts as
		// absent until Cleanup (or a new claim) removes it.
		return st, nil
	}
	st.live = true
	if t.state != stateCompleted {
		st.rec, err = decodeKeyRec(ref, rec.Value, t, nil)
		return st, err
	}
	var ts *tombstone
	if tomb != nil {
		x, err := decodeTombstone(tomb.Value)
		if err != nil {
			return keyState{}, err
		}
		ts = &x
	}
	if out != nil {
		st.rec, err = decodeKeyRec(ref, rec.Value, t, out.Value)
		if err != nil {
			return keyState{}, err
		}
		if ts != nil {
			st.rec.ForgetAt = ts.forget
		}
		if now.Before(st.rec.ExpiresAt) {
			return st, nil
		}
		st.rec.Outcome = &contract.Outcome{Code: st.rec.Outcome.Code}
	} else {
		st.rec, err = decodeKeyRec(ref, rec.Value, tokenRec{state: stateClaimed}, nil)
		if err != nil {
			return keyState{}, err
		}
		st.rec.LeaseUntil = time.Time{}
		st.rec.CompletedAt, st.rec.ExpiresAt, st.rec.ForgetAt = ts.completed, ts.expires, ts.forget
		st.rec.Outcome = &contract.Outcome{Code: ts.code}
	}
	st.expired = true
	st.rec.State = contract.KeyExpired
	return st, nil
}

func errOutcomeExpired() error {
	return &contract.Error{Code: contract.OutcomeExpired, Msg: "the key's outcome is no longer retained; the request must not run again"}
}

// ClaimKey implements contract.IdempotencyStore. The fast path is one
// etcd lease grant (the claim's busy marker, TTL + tolerance) and one
// transaction that creates the key when it has no record and otherwise
// reads it. Reclaiming an abandoned claim (its busy marker expired on
// etcd's timer), handing a caller its own claim back (the same
// ClaimRequest.Token, compared byte for byte) or replacing a record past
// its tombstone takes one more transaction, conditional on what was read.
func (b *Backend) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	now := b.clockNow()
	kk := b.keyKeys(req.KeyRef)
	busyID, _, err := b.grant(ctx, ceilSec(req.TTL+b.tol), now)
	if err != nil {
		return contract.Claim{}, b.fail(ctx, err, false)
	}
	used := false
	defer func() {
		if !used {
			b.revokeLater(busyID)
		}
	}()
	leaseUntil := now.Add(req.TTL)
	for attempt := 0; ; attempt++ {
		token := req.Token
		if token == "" {
			token = newToken()
		}
		r, err := b.txn(ctx, true, []clientv3.Cmp{absent(kk.rec)}, []clientv3.Op{
			clientv3.OpPut(kk.rec, string(encodeKey(now, req.Fingerprint, req.WorkflowID))),
			clientv3.OpPut(kk.tok, string(encodeToken(token, stateClaimed, leaseUntil))),
			clientv3.OpPut(kk.busy, "", clientv3.WithLease(busyID)),
			clientv3.OpDelete(kk.out),
			clientv3.OpDelete(kk.tomb),
		}, kk.readOps())
		if err != nil {
			return contract.Claim{}, err
		}
		if r.Succeeded {
			used = true
			return contract.Claim{Kind: contract.ClaimNew, Token: token, Record: contract.KeyRecord{
				KeyRef: req.KeyRef, Fingerprint: req.Fingerprint, WorkflowID: req.WorkflowID,
				State: contract.KeyClaimed, LeaseUntil: leaseUntil, CreatedAt: now,
			}}, nil
		}
		st, err := keyStateOf(req.KeyRef, r, 0, now)
		if err != nil {
			return contract.Claim{}, err
		}
		var f claimrule.Facts // no record
		if st.exists {
			claimed := st.tok.state == stateClaimed
			f = claimrule.Stored{
				Live:      st.live,
				Lapsed:    claimed && !st.busy, // the busy marker expired on etcd's timer
				Match:     claimrule.SameRequest(st.rec.Fingerprint, st.rec.WorkflowID, req.Fingerprint, req.WorkflowID),
				Completed: st.tok.state == stateCompleted,
				Expired:   st.expired,
				Own:       claimed && req.Token != "" && st.tok.token == req.Token,
			}.Facts()
		}
		switch claimrule.Decide(f) {
		case claimrule.Conflict:
			return contract.Claim{}, &contract.Error{Code: contract.KeyConflict, Msg: "key is bound to another request"}
		case claimrule.Gone:
			return contract.Claim{}, errOutcomeExpired()
		case claimrule.Replay:
			return contract.Claim{Kind: contract.ClaimCompleted, Record: st.rec}, nil
		case claimrule.InFlight:
			return contract.Claim{Kind: contract.ClaimInFlight, Record: st.rec}, nil
		case claimrule.Held:
			// The caller's own claim, whose reply it lost: a new lease
			// and busy marker for it, unless it changed since the read
			// (a reclaim changes the token record).
			r, err := b.txn(ctx, true, []clientv3.Cmp{
				clientv3.Compare(clientv3.ModRevision(kk.tok), "=", st.tokRev),
			}, []clientv3.Op{
				clientv3.OpGet(kk.busy, clientv3.WithKeysOnly()),
				clientv3.OpPut(kk.tok, string(encodeToken(req.Token, stateClaimed, leaseUntil))),
				clientv3.OpPut(kk.busy, "", clientv3.WithLease(busyID)),
			}, nil)
			if err != nil {
				return contract.Claim{}, err
			}
			if r.Succeeded {
				used = true
				if old := rangeKV(r, 0); old != nil {
					b.revokeLater(clientv3.LeaseID(old.Lease))
				}
				rec := st.rec
				rec.LeaseUntil = leaseUntil
				return contract.Claim{Kind: contract.ClaimNew, Token: req.Token, Record: rec}, nil
			}
		case claimrule.Reclaim:
			// Abandoned: its busy marker expired. Take it over with a new
			// token, unless someone else changed it first.
			r, err := b.txn(ctx, true, []clientv3.Cmp{
				clientv3.Compare(clientv3.ModRevision(kk.tok), "=", st.tokRev),
				absent(kk.busy),
			}, []clientv3.Op{
				clientv3.OpPut(kk.tok, string(encodeToken(token, stateClaimed, leaseUntil))),
				clientv3.OpPut(kk.busy, "", clientv3.WithLease(busyID)),
			}, nil)
			if err != nil {
				return contract.Claim{}, err
			}
			if r.Succeeded {
				used = true
				rec := st.rec
				rec.LeaseUntil = leaseUntil
				return contract.Claim{Kind: contract.ClaimReclaimed, Token: token, Record: rec}, nil
			}
		case claimrule.New:
			// No record, or a completed record past its tombstone, which
			// counts as absent: delete it (unless it changed) and claim
			// again.
			_, err := b.txn(ctx, true, []clientv3.Cmp{
				clientv3.Compare(clientv3.ModRevision(kk.tok), "=", st.tokRev),
				absent(kk.out),
				absent(kk.tomb),
			}, []clientv3.Op{clientv3.OpDelete(kk.rec), clientv3.OpDelete(kk.tok), clientv3.OpDelete(kk.busy)}, nil)
			if err != nil {
				return contract.Claim{}, err
			}
		}
		if err := ctx.Err(); err != nil {
			return contract.Claim{}, &contract.Error{Code: contract.Canceled, Err: err}
		}
	}
}

func errFencedKey() error {
	return &contract.Error{Code: contract.Fenced, Msg: "claim token does not hold the key"}
}

// CompleteKey implements contract.IdempotencyStore: one lease grant (the
// retention), or two sent together when the tombstone outlasts it (the
// retention and the tombstone), and one transaction that, while the token
// holds the claim (and the fence, if any, is valid), marks it completed
// and stores the outcome on the retention lease and the tombstone on its
// own. A failed comparison reads why in the same transaction.
func (b *Backend) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	now := b.clockNow()
	kk := b.keyKeys(c.KeyRef)
	withTomb := ceilSec(c.Tombstone) > ceilSec(c.Retain)
	var retID, tombID clientv3.LeaseID
	var granted, tombGranted int64
	var err error
	if withTomb {
		retID, granted, tombID, tombGranted, err = b.grant2(ctx, ceilSec(c.Retain), ceilSec(c.Tombstone), now)
	} else {
		retID, granted, err = b.grant(ctx, ceilSec(c.Retain), now)
	}
	if err != nil {
		return contract.KeyRecord{}, b.fail(ctx, err, false)
	}
	// The outcome and the tombstone are kept as long as etcd keeps their
	// leases: report that.
	expires := now.Add(time.Duration(granted) * time.Second)
	forget := expires
	if withTomb {
		forget = now.Add(time.Duration(max(granted, tombGranted)) * time.Second)
	}
	cmps := hasPrefix(kk.tok, tokenPrefix(c.Token, stateClaimed))
	els := kk.readOps()
	if c.Fence != nil {
		cmps = append(cmps, b.fenceCmps(c.Scope, c.Fence)...)
	}
	then := []clientv3.Op{
		clientv3.OpPut(kk.tok, string(encodeToken(c.Token, stateCompleted, time.Time{}))),
		clientv3.OpPut(kk.out, string(encodeOutcome(now, expires, &c.Outcome)), clientv3.WithLease(retID)),
		clientv3.OpDelete(kk.busy),
		clientv3.OpGet(kk.rec),
	}
	if withTomb {
		then = append(then, clientv3.OpPut(kk.tomb, string(encodeTombstone(now, expires, forget, c.Outcome.Code)), clientv3.WithLease(tombID)))
	} else {
		then = append(then, clientv3.OpDelete(kk.tomb))
	}
	r, err := b.txn(ctx, true, cmps, then, els)
	if err != nil {
		b.revokeLater(retID, tombID)
		return contract.KeyRecord{}, err
	}
	if r.Succeeded {
		kv := rangeKV(r, 3)
		if kv == nil {
			return contract.KeyRecord{}, corrupt("idempotency key")
		}
		rec, err := decodeKeyRec(c.KeyRef, kv.Value, tokenRec{state: stateClaimed}, nil)
		if err != nil {
			return contract.KeyRecord{}, err
		}
		rec.State, rec.LeaseUntil, rec.Outcome = contract.KeyCompleted, time.Time{}, outcomecodec.Clone(&c.Outcome)
		rec.CompletedAt, rec.ExpiresAt, rec.ForgetAt = now, expires, forget
		return rec, nil
	}
	b.revokeLater(retID, tombID)
	st, err := keyStateOf(c.KeyRef, r, 0, now)
	if err != nil {
		return contract.KeyRecord{}, err
	}
	if !st.live || st.tok.token != c.Token {
		return contract.KeyRecord{}, errFencedKey()
	}
	if st.tok.state == stateCompleted {
		return st.rec, nil // a retry after a lost reply: the outcome, or its tombstone
	}
	return contract.KeyRecord{}, &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
}

// RenewKey implements contract.IdempotencyStore: one lease grant (the new
// busy marker) and one transaction, conditional on the token holding the
// claim.
func (b *Backend) RenewKey(ctx context.Context, ref contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	now := b.clockNow()
	kk := b.keyKeys(ref)
	busyID, _, err := b.grant(ctx, ceilSec(ttl+b.tol), now)
	if err != nil {
		return contract.KeyRecord{}, b.fail(ctx, err, false)
	}
	leaseUntil := now.Add(ttl)
	r, err := b.txn(ctx, true, hasPrefix(kk.tok, tokenPrefix(token, stateClaimed)), []clientv3.Op{
		clientv3.OpGet(kk.busy, clientv3.WithKeysOnly()),
		clientv3.OpPut(kk.tok, string(encodeToken(token, stateClaimed, leaseUntil))),
		clientv3.OpPut(kk.busy, "", clientv3.WithLease(busyID)),
		clientv3.OpGet(kk.rec),
	}, nil)
	if err != nil {
		b.revokeLater(busyID)
		return contract.KeyRecord{}, err
	}
	if !r.Succeeded {
		b.revokeLater(busyID)
		return contract.KeyRecord{}, errFencedKey()
	}
	if old := rangeKV(r, 0); old != nil {
		b.revokeLater(clientv3.LeaseID(old.Lease))
	}
	kv := rangeKV(r, 3)
	if kv == nil {
		return contract.KeyRecord{}, corrupt("idempotency key")
	}
	return decodeKeyRec(ref, kv.Value, tokenRec{token: token, state: stateClaimed, leaseUntil: leaseUntil}, nil)
}

// ReleaseKey implements contract.IdempotencyStore: one transaction that
// deletes the claim while token holds it.
func (b *Backend) ReleaseKey(ctx context.Context, ref contract.KeyRef, token string) (bool, error) {
	kk := b.keyKeys(ref)
	r, err := b.txn(ctx, true, hasPrefix(kk.tok, tokenPrefix(token, stateClaimed)), []clientv3.Op{
		clientv3.OpDelete(kk.rec), clientv3.OpDelete(kk.tok), clientv3.OpDelete(kk.busy), clientv3.OpDelete(kk.out), clientv3.OpDelete(kk.tomb),
	}, nil)
	if err != nil {
		return false, err
	}
	return r.Succeeded, nil
}

// GetKey implements contract.IdempotencyStore: one read.
func (b *Backend) GetKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	st, _, err := b.readKey(ctx, ref)
	if err != nil {
		return contract.KeyRecord{}, err
	}
	if !st.live {
		return contract.KeyRecord{}, notFound("key")
	}
	return st.rec, nil
}

// readKey reads a key and returns the revision read at.
func (b *Backend) readKey(ctx context.Context, ref contract.KeyRef) (keyState, int64, error) {
	r, err := b.get(ctx, b.keyKeys(ref).readOps()...)
	if err != nil {
		return keyState{}, 0, err
	}
	st, err := keyStateOf(ref, r, 0, b.clockNow())
	return st, r.Header.Revision, err
}

// WaitKey implements contract.KeyWaiter with an etcd watch on the key's
// token record (every completion, release, reclaim and cleanup changes or
// deletes it), started at the revision just after a read.
func (b *Backend) WaitKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	kk := b.keyKeys(ref)
	for {
		if err := b.check(); err != nil {
			return contract.KeyRecord{}, err
		}
		st, rev, err := b.readKey(ctx, ref)
		if err != nil {
			return contract.KeyRecord{}, err
		}
		if !st.live {
			return contract.KeyRecord{}, notFound("key")
		}
		if st.rec.State != contract.KeyClaimed { // completed, or its tombstone
			return st.rec, nil
		}
		if err := b.watchOnce(ctx, kk.tok, rev+1); err != nil {
			return contract.KeyRecord{}, err
		}
	}
}

// watchOnce waits for a change of key at or after rev, for the end of the
// watch (no leader, compaction: then it pauses briefly), or for ctx or
// Close.
func (b *Backend) watchOnce(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := b.cli.Watch(wctx, key, clientv3.WithRev(rev))
	select {
	case _, ok := <-wch:
		if !ok {
			t := time.NewTimer(50 * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			case <-b.done:
			}
		}
		return nil
	case <-b.done:
		return &contract.Error{Code: contract.Closed, Msg: "backend is closed"}
	case <-ctx.Done():
		return &contract.Error{Code: contract.Canceled, Err: ctx.Err()}
	}
}
