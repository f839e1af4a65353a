package broken

import (
	"context"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// Batched reads and coarse time.
func init() {
	register("list-filters-one-batch", variant{
		doc:  "ListWorkflows, ListKeys and ListLeases read one batch of 100 records after the cursor, filter it, and return what matched: a match past the first 100 records is never found",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return listOneBatch{b, st} },
	})
	register("lease-ttl-rounded-up", variant{
		doc:  "a lease stays valid for fenced writes and renewals until its TTL rounded up to whole seconds, minus the tolerance, while reporting ExpiresAt = now + TTL",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return &roundedUp{b, st} },
	})
}

// listBatch is the internal batch of list-filters-one-batch.
const listBatch = 100

type listOneBatch struct {
	*exactmem.Backend
	st *state
}

func (b listOneBatch) ListWorkflows(ctx context.Context, q contract.ListQuery) ([]contract.Workflow, error) {
	status, limit := q.Status, q.Limit
	q.Status, q.Limit = "", listBatch
	batch, err := b.Backend.ListWorkflows(ctx, q)
	var out []contract.Workflow
	for _, w := range batch {
		if status == "" || w.Status == status {
			out = append(out, w)
		}
	}
	return trim(out, limit), err
}

func (b listOneBatch) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	state, limit := q.State, q.Limit
	q.State, q.Limit = "", listBatch
	batch, err := b.Backend.ListKeys(ctx, q)
	var out []contract.KeyRecord
	for _, r := range batch {
		if state == "" || r.State == state {
			out = append(out, r)
		}
	}
	return trim(out, limit), err
}

func (b listOneBatch) ListLeases(ctx context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	held, limit := q.Held, q.Limit
	q.Held, q.Limit = false, listBatch
	batch, err := b.Backend.ListLeases(ctx, q)
	now := b.st.now()
	var out []contract.Lease
	for _, l := range batch {
		if !held || l.ExpiresAt.After(now) {
			out = append(out, l)
		}
	}
	return trim(out, limit), err
}

// roundedUp keeps, for each grant, the end of its validity as if its TTL
// had been rounded up to whole seconds, and lets a fenced write or a
// renewal the memory backend fences through while that end is more than
// the tolerance away.
type roundedUp struct {
	*exactmem.Backend
	st *state
}

// grantKey names one grant of one storage.
type grantKey struct {
	st       *state
	scope    contract.Scope
	resource string
	owner    string
	token    int64
}

// roundedUntil is the rounded-up end of each grant, for every storage.
var roundedUntil = struct {
	sync.Mutex
	m map[grantKey]time.Time
}{m: map[grantKey]time.Time{}}

func (b *roundedUp) key(scope contract.Scope, f contract.Fence) grantKey {
	return grantKey{b.st, scope, f.Resource, f.Owner, f.Token}
}

func (b *roundedUp) remember(l contract.Lease, from time.Time, ttl time.Duration) {
	up := ttl.Truncate(time.Second)
	if up < ttl {
		up += time.Second
	}
	roundedUntil.Lock()
	roundedUntil.m[b.key(l.Scope, *l.Fence())] = from.Add(up)
	roundedUntil.Unlock()
}

// valid says whether the fence is still current and its rounded-up end
// is more than the tolerance away.
func (b *roundedUp) valid(ctx context.Context, scope contract.Scope, f *contract.Fence) bool {
	if f == nil {
		return false
	}
	cur, err := b.Backend.GetLease(ctx, scope, f.Resource)
	if err != nil || cur.Owner != f.Owner || cur.Token != f.Token {
		return false
	}
	roundedUntil.Lock()
	until, ok := roundedUntil.m[b.key(scope, *f)]
	roundedUntil.Unlock()
	return ok && until.Sub(b.st.now()) > Tolerance
}

func (b *roundedUp) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	l, err := b.Backend.AcquireLease(ctx, req)
	if err == nil {
		b.remember(l, l.AcquiredAt, req.TTL)
	}
	return l, err
}

func (b *roundedUp) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	r, err := b.Backend.RenewLease(ctx, l, ttl)
	now := b.st.now()
	if contract.CodeOf(err) == contract.Fenced && b.valid(ctx, l.Scope, l.Fence()) {
		r, err = l, nil // the bug: reported renewed, as the rounded-up TTL says
		r.ExpiresAt = now.Add(ttl)
	}
	if err == nil {
		b.remember(r, now, ttl)
	}
	return r, err
}

func (b *roundedUp) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	out := make([]contract.LeaseRenewal, len(leases))
	for i, l := range leases {
		r, err := b.RenewLease(ctx, l, ttl)
		if err != nil {
			if contract.CodeOf(err) != contract.Fenced {
				return nil, err
			}
			out[i] = contract.LeaseRenewal{Err: err}
			continue
		}
		out[i] = contract.LeaseRenewal{Lease: r}
	}
	return out, nil
}

func (b *roundedUp) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	w, err := b.Backend.UpdateWorkflow(ctx, u)
	if contract.CodeOf(err) == contract.Fenced && b.valid(ctx, u.Scope, u.Fence) {
		u.Fence = nil // the bug
		return b.Backend.UpdateWorkflow(ctx, u)
	}
	return w, err
}

func (b *roundedUp) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	r, err := b.Backend.CompleteKey(ctx, c)
	if contract.CodeOf(err) == contract.Fenced && b.valid(ctx, c.Scope, c.Fence) {
		c.Fence = nil // the bug
		return b.Backend.CompleteKey(ctx, c)
	}
	return r, err
}
