package broken

import (
	"context"
	"strings"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// Counting what Cleanup deletes, and exact matches of names: the bugs of a
// backend that scans ranges of keys and filters afterwards.
func init() {
	register("count-cleanup-counts-live", variant{
		doc:  "CountCleanup counts every claim and lease its scan reads, live ones too (Cleanup deletes only the expired ones)",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return countsLive{b, st, true} },
	})
	register("count-cleanup-counts-live-leases", variant{
		doc:  "CountCleanup counts every lease its scan reads, live ones too (claims are counted right; Cleanup deletes only the expired leases)",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return countsLive{b, st, false} },
	})
	register("cleanup-more-while-claims-live", variant{
		doc:  "Cleanup reports More whenever its scan of claims read Limit of them, live ones included, so More stays true while live claims remain",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return moreWhileLive{b, st} },
	})
	register("expect-status-prefix", variant{
		doc:  "UpdateWorkflow's ExpectStatus matches any stored status it is a prefix of (run matches running)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return expectStatusPrefix{b} },
	})
	register("status-filter-prefix", variant{
		doc:  "ListWorkflows's status filter matches every status it is a prefix of (run lists running too)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return statusFilterPrefix{b} },
	})
	register("get-key-prefix", variant{
		doc:  "GetKey of a key with no record returns the first key it is a prefix of (k finds k1), as a prefix range read would",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return getKeyPrefix{b} },
	})
	register("get-lease-prefix", variant{
		doc:  "GetLease of a resource with no lease returns the first resource it is a prefix of (a finds ab), as a prefix range read would",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return getLeasePrefix{b} },
	})
	register("release-key-prefix", variant{
		doc:  "ReleaseKey of a key the token does not hold releases the first claimed key it is a prefix of that the token does hold (k releases k1), as a range read would",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return releaseKeyPrefix{b} },
	})
	register("renew-lease-prefix", variant{
		doc:  "RenewLease of a resource with no such grant renews the grant, with that owner and token, on the first resource it is a prefix of (a renews ab)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return renewLeasePrefix{b} },
	})
	register("scope-prefix-reads", variant{
		doc:  "a read in a non-empty scope that finds nothing looks in the scopes it is a prefix of (a finds ab) for GetWorkflow, GetKey and GetLease",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return scopePrefix{b, st} },
	})
}

// liveClaims and liveLeases count the unscoped claims and leases that
// Cleanup may not delete yet.
func liveClaims(ctx context.Context, b *exactmem.Backend, st *state) int {
	keys, _ := b.ListKeys(ctx, contract.KeyListQuery{State: contract.KeyClaimed})
	n := 0
	for _, r := range keys {
		if r.LeaseUntil.Add(Tolerance).After(st.now()) {
			n++
		}
	}
	return n
}

func liveLeases(ctx context.Context, b *exactmem.Backend, st *state) int {
	leases, _ := b.ListLeases(ctx, contract.LeaseListQuery{})
	n := 0
	for _, l := range leases {
		if l.ExpiresAt.Add(Tolerance).After(st.now()) {
			n++
		}
	}
	return n
}

type countsLive struct {
	*exactmem.Backend
	st     *state
	claims bool // count live claims too, not only live leases
}

func (b countsLive) CountCleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	res, err := b.Backend.CountCleanup(ctx, req)
	if err != nil {
		return res, err
	}
	limit := func(n int) int {
		if n > req.Limit {
			res.More = true
			return req.Limit
		}
		return n
	}
	if b.claims {
		res.Keys = limit(res.Keys + liveClaims(ctx, b.Backend, b.st))
	}
	res.Leases = limit(res.Leases + liveLeases(ctx, b.Backend, b.st))
	return res, nil
}

type moreWhileLive struct {
	*exactmem.Backend
	st *state
}

func (b moreWhileLive) Cleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	res, err := b.Backend.Cleanup(ctx, req)
	if err == nil && res.Keys+liveClaims(ctx, b.Backend, b.st) >= req.Limit {
		res.More = true
	}
	return res, err
}

type expectStatusPrefix struct{ *exactmem.Backend }

func (b expectStatusPrefix) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	if w, err := b.Backend.GetWorkflow(ctx, u.Scope, u.ID); err == nil && strings.HasPrefix(string(w.Status), string(u.ExpectStatus)) {
		u.ExpectStatus = w.Status
	}
	return b.Backend.UpdateWorkflow(ctx, u)
}

type statusFilterPrefix struct{ *exactmem.Backend }

func (b statusFilterPrefix) ListWorkflows(ctx context.Context, q contract.ListQuery) ([]contract.Workflow, error) {
	status, limit := q.Status, q.Limit
	q.Status, q.Limit = "", 0
	all, err := b.Backend.ListWorkflows(ctx, q)
	var out []contract.Workflow
	for _, w := range all {
		if strings.HasPrefix(string(w.Status), string(status)) {
			out = append(out, w)
		}
	}
	return trim(out, limit), err
}

type getKeyPrefix struct{ *exactmem.Backend }

func (b getKeyPrefix) GetKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	r, err := b.Backend.GetKey(ctx, k)
	if contract.CodeOf(err) == contract.NotFound {
		keys, _ := b.Backend.ListKeys(ctx, contract.KeyListQuery{Scope: k.Scope, After: k.Key})
		if len(keys) > 0 && strings.HasPrefix(keys[0].Key, k.Key) {
			return keys[0], nil
		}
	}
	return r, err
}

type getLeasePrefix struct{ *exactmem.Backend }

func (b getLeasePrefix) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	l, err := b.Backend.GetLease(ctx, scope, resource)
	if contract.CodeOf(err) == contract.NotFound {
		leases, _ := b.Backend.ListLeases(ctx, contract.LeaseListQuery{Scope: scope, After: resource})
		if len(leases) > 0 && strings.HasPrefix(leases[0].Resource, resource) {
			return leases[0], nil
		}
	}
	return l, err
}

// scopePrefix remembers the scopes written and reads, in a scope with no
// such record, the first longer scope that has one.
type scopePrefix struct {
	*exactmem.Backend
	st *state
}

func (b scopePrefix) note(s contract.Scope) {
	b.st.mu.Lock()
	b.st.scopes[s] = true
	b.st.mu.Unlock()
}

// longer lists the scopes written that scope is a proper prefix of.
func (b scopePrefix) longer(scope contract.Scope) []contract.Scope {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	var out []contract.Scope
	for s := range b.st.scopes {
		if scope != "" && s != scope && strings.HasPrefix(string(s), string(scope)) {
			out = append(out, s)
		}
	}
	return out
}

func (b scopePrefix) CreateWorkflow(ctx context.Context, w contract.Workflow) (contract.Workflow, error) {
	b.note(w.Scope)
	return b.Backend.CreateWorkflow(ctx, w)
}

func (b scopePrefix) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	b.note(req.Scope)
	return b.Backend.ClaimKey(ctx, req)
}

func (b scopePrefix) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	b.note(req.Scope)
	return b.Backend.AcquireLease(ctx, req)
}

func (b scopePrefix) GetWorkflow(ctx context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	w, err := b.Backend.GetWorkflow(ctx, scope, id)
	if contract.CodeOf(err) == contract.NotFound {
		for _, s := range b.longer(scope) {
			if w2, err2 := b.Backend.GetWorkflow(ctx, s, id); err2 == nil {
				return w2, nil
			}
		}
	}
	return w, err
}

func (b scopePrefix) GetKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	r, err := b.Backend.GetKey(ctx, k)
	if contract.CodeOf(err) == contract.NotFound {
		for _, s := range b.longer(k.Scope) {
			if r2, err2 := b.Backend.GetKey(ctx, contract.KeyRef{Scope: s, Key: k.Key}); err2 == nil {
				return r2, nil
			}
		}
	}
	return r, err
}

func (b scopePrefix) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	l, err := b.Backend.GetLease(ctx, scope, resource)
	if contract.CodeOf(err) == contract.NotFound {
		for _, s := range b.longer(scope) {
			if l2, err2 := b.Backend.GetLease(ctx, s, resource); err2 == nil {
				return l2, nil
			}
		}
	}
	return l, err
}

type releaseKeyPrefix struct{ *exactmem.Backend }

func (b releaseKeyPrefix) ReleaseKey(ctx context.Context, ref contract.KeyRef, token string) (bool, error) {
	ok, err := b.Backend.ReleaseKey(ctx, ref, token)
	if err != nil || ok {
		return ok, err
	}
	keys, _ := b.Backend.ListKeys(ctx, contract.KeyListQuery{Scope: ref.Scope, After: ref.Key, State: contract.KeyClaimed})
	for _, r := range keys {
		if !strings.HasPrefix(r.Key, ref.Key) {
			break
		}
		if ok, err := b.Backend.ReleaseKey(ctx, r.KeyRef, token); err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

type renewLeasePrefix struct{ *exactmem.Backend }

func (b renewLeasePrefix) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	r, err := b.Backend.RenewLease(ctx, l, ttl)
	if contract.CodeOf(err) != contract.Fenced {
		return r, err
	}
	leases, _ := b.Backend.ListLeases(ctx, contract.LeaseListQuery{Scope: l.Scope, After: l.Resource})
	for _, o := range leases {
		if !strings.HasPrefix(o.Resource, l.Resource) {
			break
		}
		if o.Owner == l.Owner && o.Token == l.Token {
			return b.Backend.RenewLease(ctx, o, ttl)
		}
	}
	return r, err
}
