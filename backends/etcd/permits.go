package etcd

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var _ contract.PermitAcquirer = (*Backend)(nil)

// permitKeys are the key prefixes under which the permits of a semaphore
// on (scope, resource) keep their lease records and busy markers: the
// lease keys of "resource#1", "resource#2", … A resource is an identifier,
// which cannot contain "#" or "/", so nothing but the semaphore's permits
// lies under them.
func (b *Backend) permitKeys(scope contract.Scope, resource string) (rec, busy string) {
	return b.key(nsLease, scope, resource+contract.PermitSeparator), b.key(nsLeaseBusy, scope, resource+contract.PermitSeparator)
}

// permitReads reads, at one revision, the record keys and the busy markers
// of every permit of the semaphore (keys only): two range reads.
func (b *Backend) permitReads(scope contract.Scope, resource string) []clientv3.Op {
	rec, busy := b.permitKeys(scope, resource)
	return []clientv3.Op{
		clientv3.OpGet(rec, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(busy, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	}
}

// permitState is what permitReads found for permits 1 to n: rec[i] is the
// ModRevision of permit i's lease record (0: none), busy[i] whether its
// busy marker exists.
type permitState struct {
	rec  []int64
	busy []bool
}

// permitNum returns the number of the permit named by the key k under
// prefix p (resource "#"), or 0 when it is not one of permits 1 to n.
func permitNum(k []byte, p string, n int) int {
	base, num, ok := contract.SplitPermit("x" + contract.PermitSeparator + strings.TrimPrefix(string(k), p))
	if !ok || base != "x" || num > n {
		return 0
	}
	return num
}

// permitStateOf decodes permitReads' two responses starting at response i.
func (b *Backend) permitStateOf(scope contract.Scope, resource string, r *clientv3.TxnResponse, i, n int) permitState {
	rec, busy := b.permitKeys(scope, resource)
	st := permitState{rec: make([]int64, n+1), busy: make([]bool, n+1)}
	kvs := func(j int) []*mvccpb.KeyValue {
		if j >= len(r.Responses) {
			return nil
		}
		return r.Responses[j].GetResponseRange().GetKvs()
	}
	for _, kv := range kvs(i) {
		if k := permitNum(kv.Key, rec, n); k > 0 {
			st.rec[k] = kv.ModRevision
		}
	}
	for _, kv := range kvs(i + 1) {
		if k := permitNum(kv.Key, busy, n); k > 0 {
			st.busy[k] = true
		}
	}
	return st
}

// lowestFree returns the lowest permit AcquireLease would grant — no
// record, or a record whose busy marker expired (more than the tolerance
// past its ExpiresAt) — and that record's ModRevision (0: none); n = 0
// when every permit is held.
func (st permitState) lowestFree() (n int, rev int64) {
	for i := 1; i < len(st.rec); i++ {
		if st.rec[i] == 0 || !st.busy[i] {
			return i, st.rec[i]
		}
	}
	return 0, 0
}

// AcquirePermit implements contract.PermitAcquirer. It grants the holder
// and busy etcd leases (two grants, sent together) while it reads, in one
// transaction sent at the same time, the records and busy markers of every
// permit of the semaphore (two range reads, keys only); then one
// transaction creates the lowest free permit n's record, holder key and
// busy marker, as AcquireLease does, conditional on permit n having no
// record and on permits 1 to n−1 being held (their busy markers exist), so
// that at the revision of the grant n is the lowest permit AcquireLease
// would grant. etcd allows 128 comparisons in a transaction: of the lower
// permits the first 127 are compared, so a grant of permit 129 or above
// may pass over a permit from 128 up freed between the read and the grant
// (it stays free for the next caller). A permit whose busy marker expired
// takes one more transaction first, which deletes its old grant unless it
// changed since the read. So the fast path costs what AcquireLease's does,
// with the read alongside the grants. Each permit is a lease record of its
// own, created only where none exists, so no more than Permits holders are
// ever admitted; the token is the record's CreateRevision, a cluster
// revision, so tokens of all permits (and of a lease on the resource
// itself) form one increasing sequence.
//
// When the transaction fails (another caller took permit n, or a lower
// permit was released, deleted or expired, after the read), it reads the
// permits again in its else branch, at its own revision, and the lowest
// free one is tried: LeaseBusy is returned only when a read found every
// permit held. After 2×Permits+16 such failures in one call, each a change
// of the permits by someone else, AcquirePermit gives up with Unavailable
// (nothing was granted).
func (b *Backend) AcquirePermit(ctx context.Context, req contract.PermitRequest) (contract.Lease, error) {
	if err := b.check(); err != nil {
		return contract.Lease{}, err
	}
	now := b.clockNow()
	reads := b.permitReads(req.Scope, req.Resource)
	var (
		holdID, busyID clientv3.LeaseID
		expires        time.Time
		gerr           error
		wg             sync.WaitGroup
	)
	wg.Go(func() { holdID, busyID, expires, gerr = b.grantLease(ctx, req.TTL, now) })
	r, err := b.get(ctx, reads...)
	wg.Wait()
	if gerr != nil {
		return contract.Lease{}, gerr
	}
	used := false
	defer func() {
		if !used {
			b.revokeLater(holdID, busyID)
		}
	}()
	if err != nil {
		return contract.Lease{}, err
	}
	st := b.permitStateOf(req.Scope, req.Resource, r, 0, req.Permits)
	for attempt := 0; attempt < 2*req.Permits+16; attempt++ {
		n, rev := st.lowestFree()
		if n == 0 {
			return contract.Lease{}, &contract.Error{Code: contract.LeaseBusy, Msg: "every permit is held"}
		}
		res := contract.PermitResource(req.Resource, n)
		lk := b.leaseKeys(req.Scope, res)
		if rev != 0 {
			// Expired beyond the tolerance: remove the old grant first
			// (etcd cannot delete and create one key in one transaction,
			// and the new grant needs a new CreateRevision), unless it
			// changed meanwhile.
			r, err := b.txn(ctx, true, []clientv3.Cmp{
				clientv3.Compare(clientv3.ModRevision(lk.rec), "=", rev),
				absent(lk.busy),
			}, []clientv3.Op{clientv3.OpDelete(lk.rec), clientv3.OpDelete(lk.hold)}, reads)
			if err != nil {
				return contract.Lease{}, err
			}
			if !r.Succeeded {
				st = b.permitStateOf(req.Scope, req.Resource, r, 0, req.Permits)
				continue
			}
		}
		r, err := b.grantPermitTxn(ctx, req.Scope, req.Resource, n, []clientv3.Op{
			clientv3.OpPut(lk.rec, string(encodeLease(req.Owner, now, expires, req.Value))),
			clientv3.OpPut(lk.hold, req.Owner, clientv3.WithLease(holdID)),
			clientv3.OpPut(lk.busy, "", clientv3.WithLease(busyID)),
		}, reads)
		if err != nil {
			return contract.Lease{}, err
		}
		if r.Succeeded {
			used = true
			return contract.Lease{
				Scope: req.Scope, Resource: res, Owner: req.Owner,
				Token: r.Header.Revision, AcquiredAt: now, ExpiresAt: expires, Value: req.Value,
			}, nil
		}
		st = b.permitStateOf(req.Scope, req.Resource, r, 0, req.Permits)
		if err := ctx.Err(); err != nil {
			return contract.Lease{}, &contract.Error{Code: contract.Canceled, Err: err}
		}
	}
	return contract.Lease{}, &contract.Error{Code: contract.Unavailable, Msg: "the permits changed hands on every attempt; nothing was granted"}
}

// maxLowerCmps is how many lower permits the grant's transaction checks:
// etcd bounds a transaction's comparisons (--max-txn-ops, 128 by default,
// which nested transactions share), and the grant compares the permit's
// own record too.
const maxLowerCmps = 127

// grantPermitTxn grants permit n with the writes puts, conditional on the
// grant being, at its revision, the lowest one AcquireLease would make:
// permit n has no record, and permits 1 to n−1 are held — their busy
// markers exist (a busy marker exists only with its record: every write
// that deletes a record deletes it too, and a record is only ever created
// with it). Of the lower permits it checks the first maxLowerCmps. When the
// comparison fails, the transaction reads the permits again (reads).
func (b *Backend) grantPermitTxn(ctx context.Context, scope contract.Scope, resource string, n int, puts, reads []clientv3.Op) (*clientv3.TxnResponse, error) {
	cmps := []clientv3.Cmp{absent(b.key(nsLease, scope, contract.PermitResource(resource, n)))}
	for m := 1; m < n && m <= maxLowerCmps; m++ {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(b.key(nsLeaseBusy, scope, contract.PermitResource(resource, m))), ">", 0))
	}
	return b.txn(ctx, true, cmps, puts, reads)
}
