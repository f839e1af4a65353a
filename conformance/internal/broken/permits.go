package broken

import (
	"context"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// Fenced semaphores, lease values and lease watches (issue 30).
func init() {
	register("permits-admit-extra", variant{
		doc:  "AcquirePermit admits an N+1th holder when all N permits are held (it grants permit N+1)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return admitsExtra{b} },
	})
	register("permit-tokens-reused", variant{
		doc: "tokens come from a counter per lease resource, so each permit \"R#n\" (and R itself) counts on its own and a token is reused across the permits of one semaphore",
		wrap: leaseTokens(func(st *state, k leaseKey, _ *contract.Lease, _ contract.LeaseRequest) int64 {
			st.next[k]++ // the bug: not keyed by contract.TokenResource
			return st.next[k]
		}, nil),
	})
	register("expired-permit-stuck", variant{
		doc:  "AcquirePermit grants only permits that have no lease record: an expired permit is never granted again (until Cleanup or DeleteRecord deletes it)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return expiredPermitStuck{b} },
	})
	register("lease-value-dropped-on-renew", variant{
		doc:  "a renewal (RenewLease, RenewLeases) loses the lease's value: the renewed lease reads back with an empty Value",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return valueDroppedOnRenew{b, st} },
	})
	register("watch-misses-release", variant{
		doc:  "WatchLease signals grants, DeleteRecord and Cleanup, but not ReleaseLease",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return &ownWatch{b, st, false, true} },
	})
	register("watch-base-misses-permits", variant{
		doc:  "WatchLease on a resource hears only that lease, not its permits \"resource#n\"",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return &ownWatch{b, st, true, false} },
	})
}

// admitsExtra grants permit N+1 when the N permits are held.
type admitsExtra struct{ *exactmem.Backend }

func (b admitsExtra) AcquirePermit(ctx context.Context, req contract.PermitRequest) (contract.Lease, error) {
	l, err := b.Backend.AcquirePermit(ctx, req)
	if contract.CodeOf(err) == contract.LeaseBusy {
		return b.Backend.AcquireLease(ctx, req.Lease(req.Permits+1)) // the bug
	}
	return l, err
}

// AcquirePermit of a tokenMapper declines the capability, so that the
// Store grants permits through its AcquireLease, which maps the tokens.
func (b *tokenMapper) AcquirePermit(context.Context, contract.PermitRequest) (contract.Lease, error) {
	return contract.Lease{}, &contract.Error{Code: contract.Unimplemented, Msg: "permits are granted lease by lease here"}
}

// expiredPermitStuck looks for a permit without a record.
type expiredPermitStuck struct{ *exactmem.Backend }

func (b expiredPermitStuck) AcquirePermit(ctx context.Context, req contract.PermitRequest) (contract.Lease, error) {
	for n := 1; n <= req.Permits; n++ {
		_, err := b.Backend.GetLease(ctx, req.Scope, contract.PermitResource(req.Resource, n))
		switch {
		case err == nil:
			continue // the bug: held or expired alike
		case contract.CodeOf(err) != contract.NotFound:
			return contract.Lease{}, err
		}
		l, err := b.Backend.AcquireLease(ctx, req.Lease(n))
		if contract.CodeOf(err) != contract.LeaseBusy {
			return l, err
		}
	}
	return contract.Lease{}, &contract.Error{Code: contract.LeaseBusy, Msg: "every permit is held"}
}

// valueDroppedOnRenew forgets the value of every grant it renews.
type valueDroppedOnRenew struct {
	*exactmem.Backend
	st *state
}

func (b valueDroppedOnRenew) drop(l contract.Lease) contract.Lease {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if b.st.valueDropped == nil {
		b.st.valueDropped = map[leaseKey]int64{}
	}
	b.st.valueDropped[leaseKey{l.Scope, l.Resource}] = l.Token
	l.Value = ""
	return l
}

func (b valueDroppedOnRenew) show(l contract.Lease) contract.Lease {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if t, ok := b.st.valueDropped[leaseKey{l.Scope, l.Resource}]; ok && t == l.Token {
		l.Value = ""
	}
	return l
}

func (b valueDroppedOnRenew) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	out, err := b.Backend.RenewLease(ctx, l, ttl)
	if err != nil {
		return out, err
	}
	return b.drop(out), nil
}

func (b valueDroppedOnRenew) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	out, err := b.Backend.RenewLeases(ctx, leases, ttl)
	for i := range out {
		if out[i].Err == nil {
			out[i].Lease = b.drop(out[i].Lease)
		}
	}
	return out, err
}

func (b valueDroppedOnRenew) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	l, err := b.Backend.GetLease(ctx, scope, resource)
	return b.show(l), err
}

func (b valueDroppedOnRenew) ListLeases(ctx context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	out, err := b.Backend.ListLeases(ctx, q)
	for i := range out {
		out[i] = b.show(out[i])
	}
	return out, err
}

// ownWatch replaces the memory backend's watches with its own, signalled
// by this decorator's calls (on every client of the storage), with a bug
// in which calls signal: release false misses ReleaseLease, base false
// does not tell a resource's watchers about its permits.
type ownWatch struct {
	*exactmem.Backend
	st      *state
	release bool
	base    bool
}

// watchHub is the watches of one storage.
type watchHub struct {
	mu sync.Mutex
	ws map[leaseKey]map[chan struct{}]struct{}
}

func (b *ownWatch) hub() *watchHub {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if b.st.watches == nil {
		b.st.watches = &watchHub{ws: map[leaseKey]map[chan struct{}]struct{}{}}
	}
	return b.st.watches
}

func (b *ownWatch) WatchLease(ctx context.Context, scope contract.Scope, resource string) (<-chan struct{}, error) {
	h := b.hub()
	k := leaseKey{scope, resource}
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.ws[k] == nil {
		h.ws[k] = map[chan struct{}]struct{}{}
	}
	h.ws[k][ch] = struct{}{}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		delete(h.ws[k], ch)
		h.mu.Unlock()
	})
	return ch, nil
}

// signal signals the watches of (scope, resource), and of its semaphore's
// resource when it names a permit and base is set; every watch when all.
func (b *ownWatch) signal(scope contract.Scope, resource string, all bool) {
	h := b.hub()
	h.mu.Lock()
	defer h.mu.Unlock()
	send := func(k leaseKey) {
		for ch := range h.ws[k] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	if all {
		for k := range h.ws {
			send(k)
		}
		return
	}
	send(leaseKey{scope, resource})
	if base, _, ok := contract.SplitPermit(resource); ok && b.base {
		send(leaseKey{scope, base})
	}
}

func (b *ownWatch) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	l, err := b.Backend.AcquireLease(ctx, req)
	if err == nil {
		b.signal(l.Scope, l.Resource, false)
	}
	return l, err
}

func (b *ownWatch) AcquirePermit(ctx context.Context, req contract.PermitRequest) (contract.Lease, error) {
	l, err := b.Backend.AcquirePermit(ctx, req)
	if err == nil {
		b.signal(l.Scope, l.Resource, false)
	}
	return l, err
}

func (b *ownWatch) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	ok, err := b.Backend.ReleaseLease(ctx, l)
	if ok && b.release {
		b.signal(l.Scope, l.Resource, false)
	}
	return ok, err
}

func (b *ownWatch) DeleteRecord(ctx context.Context, kind contract.RecordKind, scope contract.Scope, id string) (bool, error) {
	found, err := b.Backend.DeleteRecord(ctx, kind, scope, id)
	if found && kind == contract.KindLease {
		b.signal(scope, id, false)
	}
	return found, err
}

func (b *ownWatch) Cleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	res, err := b.Backend.Cleanup(ctx, req)
	if res.Leases > 0 {
		b.signal("", "", true) // spurious signals are allowed
	}
	return res, err
}

// The controls offer or decline the capabilities.

func (p partial) AcquirePermit(ctx context.Context, req contract.PermitRequest) (contract.Lease, error) {
	return p.m.AcquirePermit(ctx, req)
}

func (p partial) WatchLease(ctx context.Context, scope contract.Scope, resource string) (<-chan struct{}, error) {
	return p.m.WatchLease(ctx, scope, resource)
}

func (d declines) AcquirePermit(context.Context, contract.PermitRequest) (contract.Lease, error) {
	return contract.Lease{}, &contract.Error{Code: contract.Unimplemented, Msg: "permits are not supported here"}
}

func (d declines) WatchLease(context.Context, contract.Scope, string) (<-chan struct{}, error) {
	return nil, &contract.Error{Code: contract.Unimplemented, Msg: "watching is not supported here"}
}
