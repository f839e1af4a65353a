package broken

import (
	"context"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// Renewal and late completion (conformance/grant.go).
func init() {
	register("renewal-unbinds-fence", variant{
		doc: "a renewal (RenewLease, RenewLeases) keeps the token but loses the fence's binding to the grant, " +
			"as a backend that moves a renewed lease onto a new storage lease and checks fences against the old one: fenced writes after it are Fenced",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend {
			return renewalUnbindsFence{b, renewedOf(st)}
		},
	})
	register("reclaim-overwrites-completion", variant{
		doc: "ClaimKey reads an abandoned claim, then writes its reclaim blindly: a late completion by the old holder that lands in between " +
			"is overwritten and the completed record turned back into a claim",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return reclaimOverwrites{b, st} },
	})
}

// renewed is the grants renewed so far on one storage, shared by its
// clients.
type renewed struct {
	mu     sync.Mutex
	grants map[renewedGrant]bool
}

type renewedGrant struct {
	scope    contract.Scope
	resource string
	token    int64
}

var (
	renewedMu  sync.Mutex
	renewedFor = map[*state]*renewed{}
)

// renewedOf returns the renewed grants of st's storage.
func renewedOf(st *state) *renewed {
	renewedMu.Lock()
	defer renewedMu.Unlock()
	r := renewedFor[st]
	if r == nil {
		r = &renewed{grants: map[renewedGrant]bool{}}
		renewedFor[st] = r
	}
	return r
}

func (r *renewed) add(l contract.Lease) {
	r.mu.Lock()
	r.grants[renewedGrant{l.Scope, l.Resource, l.Token}] = true
	r.mu.Unlock()
}

// unbound reports whether f names a grant that was renewed.
func (r *renewed) unbound(scope contract.Scope, f *contract.Fence) bool {
	if f == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.grants[renewedGrant{scope, f.Resource, f.Token}]
}

var errUnbound = &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}

type renewalUnbindsFence struct {
	*exactmem.Backend
	r *renewed
}

func (b renewalUnbindsFence) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	out, err := b.Backend.RenewLease(ctx, l, ttl)
	if err == nil {
		b.r.add(out)
	}
	return out, err
}

func (b renewalUnbindsFence) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	out, err := b.Backend.RenewLeases(ctx, leases, ttl)
	for _, o := range out {
		if o.Err == nil {
			b.r.add(o.Lease)
		}
	}
	return out, err
}

func (b renewalUnbindsFence) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	if b.r.unbound(u.Scope, u.Fence) {
		return contract.Workflow{}, errUnbound // the bug
	}
	return b.Backend.UpdateWorkflow(ctx, u)
}

func (b renewalUnbindsFence) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	if b.r.unbound(c.Scope, c.Fence) {
		return contract.KeyRecord{}, errUnbound // the bug
	}
	return b.Backend.CompleteKey(ctx, c)
}

func (b renewalUnbindsFence) CompleteKeyTx(ctx context.Context, tx any, c contract.Completion) (contract.KeyRecord, error) {
	if b.r.unbound(c.Scope, c.Fence) {
		return contract.KeyRecord{}, errUnbound // the bug
	}
	return b.Backend.CompleteKeyTx(ctx, tx, c)
}

// reclaimOverwrites reclaims in two steps, read then write, and the write
// does not check what it overwrites.
type reclaimOverwrites struct {
	*exactmem.Backend
	st *state
}

func (b reclaimOverwrites) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	rec, err := b.Backend.GetKey(ctx, req.KeyRef)
	abandoned := err == nil && rec.State == contract.KeyClaimed && rec.LeaseUntil.Add(Tolerance).Before(b.st.now())
	if abandoned {
		time.Sleep(raceWindow) // widen the window
	}
	c, err := b.Backend.ClaimKey(ctx, req)
	if err != nil || !abandoned || c.Kind != contract.ClaimCompleted {
		return c, err
	}
	// The bug: the blind write replaces the completion that landed
	// between the read and the write.
	if _, err := b.Backend.DeleteRecord(ctx, contract.KindKey, req.Scope, req.Key); err != nil {
		return contract.Claim{}, err
	}
	c, err = b.Backend.ClaimKey(ctx, req)
	if err == nil && c.Kind == contract.ClaimNew {
		c.Kind = contract.ClaimReclaimed
	}
	return c, err
}
