package etcd

import (
	"context"
	"time"

	"github.com/durable-go/durable/contract"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseKeys are the etcd keys of one lease.
type leaseKeys struct{ rec, hold, busy string }

func (b *Backend) leaseKeys(scope contract.Scope, resource string) leaseKeys {
	return leaseKeys{
		rec:  b.key(nsLease, scope, resource),
		hold: b.key(nsLeaseHold, scope, resource),
		busy: b.key(nsLeaseBusy, scope, resource),
	}
}

// leaseTTLs returns the etcd lease TTLs (seconds) of a grant of ttl: the
// holder key lives while more than the tolerance is left (rounded down:
// never longer), the busy marker until the tolerance has passed after
// expiry (rounded up: never shorter).
func (b *Backend) leaseTTLs(ttl time.Duration) (hold, busy int64) {
	return floorSec(ttl - b.tol), ceilSec(ttl + b.tol)
}

// grantLease grants the holder and busy leases of a grant of ttl at now and
// returns them with the ExpiresAt to report: now + ttl, or later when etcd
// granted the holder key a longer TTL than asked (its minimum lease TTL),
// in which case the busy marker is made to outlive it by twice the
// tolerance too.
func (b *Backend) grantLease(ctx context.Context, ttl time.Duration, now time.Time) (hold, busy clientv3.LeaseID, expires time.Time, err error) {
	hs, bs := b.leaseTTLs(ttl)
	hold, hg, busy, bg, err := b.grant2(ctx, hs, bs, now)
	if err != nil {
		return 0, 0, time.Time{}, b.fail(ctx, err, false)
	}
	expires = now.Add(ttl)
	if hg > hs {
		expires = now.Add(max(ttl, time.Duration(hg)*time.Second+b.tol))
		if need := ceilSec(expires.Sub(now) + b.tol); bg < need {
			b.revokeLater(busy)
			if busy, _, err = b.grant(ctx, need, now); err != nil {
				b.revokeLater(hold)
				return 0, 0, time.Time{}, b.fail(ctx, err, false)
			}
		}
	}
	return hold, busy, expires, nil
}

// AcquireLease implements contract.LeaseStore: two etcd lease grants (sent
// together) and one transaction that creates the lease record, the holder
// key and the busy marker when the resource has no record. The fencing
// token is the record's CreateRevision: the cluster revision of that
// transaction, greater than every revision before it. A record whose busy
// marker expired (more than the tolerance past ExpiresAt) is deleted by one
// more conditional transaction first.
func (b *Backend) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	now := b.clockNow()
	lk := b.leaseKeys(req.Scope, req.Resource)
	holdID, busyID, expires, err := b.grantLease(ctx, req.TTL, now)
	if err != nil {
		return contract.Lease{}, err
	}
	used := false
	defer func() {
		if !used {
			b.revokeLater(holdID, busyID)
		}
	}()
	for {
		r, err := b.txn(ctx, true, []clientv3.Cmp{absent(lk.rec)}, []clientv3.Op{
			clientv3.OpPut(lk.rec, string(encodeLease(req.Owner, now, expires, req.Value))),
			clientv3.OpPut(lk.hold, req.Owner, clientv3.WithLease(holdID)),
			clientv3.OpPut(lk.busy, "", clientv3.WithLease(busyID)),
		}, []clientv3.Op{
			clientv3.OpGet(lk.rec, clientv3.WithKeysOnly()),
			clientv3.OpGet(lk.busy, clientv3.WithKeysOnly()),
		})
		if err != nil {
			return contract.Lease{}, err
		}
		if r.Succeeded {
			used = true
			return contract.Lease{
				Scope: req.Scope, Resource: req.Resource, Owner: req.Owner,
				Token: r.Header.Revision, AcquiredAt: now, ExpiresAt: expires, Value: req.Value,
			}, nil
		}
		rec, busy := rangeKV(r, 0), rangeKV(r, 1)
		if busy != nil {
			return contract.Lease{}, &contract.Error{Code: contract.LeaseBusy, Msg: "lease is held"}
		}
		// Expired beyond the tolerance: remove the old grant (its holder
		// key too, should it still exist), unless it changed meanwhile.
		if _, err := b.txn(ctx, true, []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(lk.rec), "=", rec.ModRevision),
			absent(lk.busy),
		}, []clientv3.Op{clientv3.OpDelete(lk.rec), clientv3.OpDelete(lk.hold)}, nil); err != nil {
			return contract.Lease{}, err
		}
		if err := ctx.Err(); err != nil {
			return contract.Lease{}, &contract.Error{Code: contract.Canceled, Err: err}
		}
	}
}

// heldCmps holds while l is the current, valid grant: its holder key
// (alive while more than the tolerance is left) was created by l's grant
// and names l's owner.
func (b *Backend) heldCmps(lk leaseKeys, l contract.Lease) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(lk.hold), "=", l.Token),
		clientv3.Compare(clientv3.Value(lk.hold), "=", l.Owner),
		clientv3.Compare(clientv3.CreateRevision(lk.rec), "=", l.Token),
	}
}

// RenewLease implements contract.LeaseStore: two lease grants and one
// transaction, conditional on l holding a valid lease, that moves the
// holder key and busy marker to the new etcd leases (keeping their
// CreateRevision, so the token is unchanged) and rewrites the record's
// ExpiresAt, keeping its AcquiredAt and Value.
func (b *Backend) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	now := b.clockNow()
	lk := b.leaseKeys(l.Scope, l.Resource)
	holdID, busyID, expires, err := b.grantLease(ctx, ttl, now)
	if err != nil {
		return contract.Lease{}, err
	}
	// The record must be rewritten with its AcquiredAt and Value, which
	// the caller's l gives (as the backend returned them); the comparison
	// on the record's value makes sure they are the stored ones (see
	// leasePrefix), and a mismatch reads the stored ones and tries again.
	acquired, value := l.AcquiredAt.UTC(), l.Value
	for attempt := 0; ; attempt++ {
		pfx := leasePrefix(l.Owner, acquired, value)
		cmps := append(b.heldCmps(lk, l),
			clientv3.Compare(clientv3.Value(lk.rec), ">", pfx),
			clientv3.Compare(clientv3.Value(lk.rec), "<", pfx+"\x01"))
		r, err := b.txn(ctx, true, cmps, []clientv3.Op{
			clientv3.OpGet(lk.hold, clientv3.WithKeysOnly()),
			clientv3.OpGet(lk.busy, clientv3.WithKeysOnly()),
			clientv3.OpPut(lk.rec, string(encodeLease(l.Owner, acquired, expires, value))),
			clientv3.OpPut(lk.hold, l.Owner, clientv3.WithLease(holdID)),
			clientv3.OpPut(lk.busy, "", clientv3.WithLease(busyID)),
		}, []clientv3.Op{clientv3.OpGet(lk.rec), clientv3.OpGet(lk.hold)})
		if err != nil {
			b.revokeLater(holdID, busyID)
			return contract.Lease{}, err
		}
		if r.Succeeded {
			var old []clientv3.LeaseID
			for i := 0; i < 2; i++ {
				if kv := rangeKV(r, i); kv != nil {
					old = append(old, clientv3.LeaseID(kv.Lease))
				}
			}
			b.revokeLater(old...)
			out := l
			out.AcquiredAt, out.ExpiresAt, out.Value = acquired, expires, value
			return out, nil
		}
		rec, hold := rangeKV(r, 0), rangeKV(r, 1)
		if attempt == 0 && rec != nil && hold != nil && rec.CreateRevision == l.Token &&
			hold.CreateRevision == l.Token && string(hold.Value) == l.Owner {
			cur, err := decodeLease(l.Scope, l.Resource, rec.Value, l.Token)
			if err == nil && cur.Owner == l.Owner && (!cur.AcquiredAt.Equal(acquired) || cur.Value != value) {
				acquired, value = cur.AcquiredAt, cur.Value
				continue
			}
		}
		b.revokeLater(holdID, busyID)
		return contract.Lease{}, &contract.Error{Code: contract.Fenced, Msg: "lease is no longer held"}
	}
}

// ReleaseLease implements contract.LeaseStore: one transaction that deletes
// the grant while l's owner and token hold it (expired or not, until it is
// taken over or cleaned up).
func (b *Backend) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	lk := b.leaseKeys(l.Scope, l.Resource)
	cmps := append(hasPrefix(lk.rec, ownerPrefix(l.Owner)),
		clientv3.Compare(clientv3.CreateRevision(lk.rec), "=", l.Token))
	r, err := b.txn(ctx, true, cmps, []clientv3.Op{
		clientv3.OpDelete(lk.rec), clientv3.OpDelete(lk.hold), clientv3.OpDelete(lk.busy),
	}, nil)
	if err != nil {
		return false, err
	}
	return r.Succeeded, nil
}

// GetLease implements contract.LeaseStore: one read of the record, which
// outlives expiry until a takeover or Cleanup.
func (b *Backend) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	r, err := b.get(ctx, clientv3.OpGet(b.key(nsLease, scope, resource)))
	if err != nil {
		return contract.Lease{}, err
	}
	kv := rangeKV(r, 0)
	if kv == nil {
		return contract.Lease{}, notFound("lease")
	}
	return decodeLease(scope, resource, kv.Value, kv.CreateRevision)
}
