package broken

import (
	"context"
	"math"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// Leases and fencing tokens.
func init() {
	register("no-clock-tolerance", variant{
		doc:  "AcquireLease takes an expired lease over right at expiry, ignoring the tolerance",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return noTolerance{b, st} },
	})
	register("same-owner-reacquires", variant{
		doc:  "AcquireLease by the owner of a live lease returns that lease instead of LeaseBusy",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return sameOwnerReacquires{b} },
	})
	register("renew-lease-from-old-expiry", variant{
		doc:  "RenewLease sets ExpiresAt to the old ExpiresAt + ttl instead of now + ttl",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return renewLeaseFromOldExpiry{b, st} },
	})
	register("takeover-race", variant{
		doc:  "AcquireLease reads an expired lease, then takes it over in a second step, overwriting a racing winner: both think they hold it",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return takeoverRace{b, st} },
	})
	register("lease-tokens-reset-on-release", variant{
		doc: "fencing tokens are a per-resource counter that restarts after a release",
		wrap: leaseTokens(func(st *state, k leaseKey, _ *contract.Lease, _ contract.LeaseRequest) int64 {
			st.next[k]++
			return st.next[k]
		}, func(st *state, k leaseKey, _ contract.Lease) { st.next[k] = 0 }),
	})
	register("self-takeover-keeps-token", variant{
		doc: "an owner taking back its own expired lease keeps its old token",
		wrap: leaseTokens(func(st *state, k leaseKey, prev *contract.Lease, req contract.LeaseRequest) int64 {
			if prev != nil && prev.Owner == req.Owner {
				return st.visible[prev.Token]
			}
			st.next[k]++
			return st.next[k]
		}, nil),
	})
	register("takeover-skips-high-water-mark", variant{
		doc: "a grant on a free resource continues from a per-resource high-water mark that takeovers do not raise: after takeover, expiry and cleanup a token repeats",
		wrap: leaseTokens(func(st *state, k leaseKey, prev *contract.Lease, _ contract.LeaseRequest) int64 {
			if prev == nil {
				st.hwm[k]++
				st.last[k] = st.hwm[k]
			} else {
				st.last[k]++ // the bug: the high-water mark stays behind
			}
			return st.last[k]
		}, nil),
	})
	register("same-owner-reuses-token-after-release", variant{
		doc: "an owner acquiring again right after its own release gets its released token back (a re-entrant lock)",
		wrap: leaseTokens(func(st *state, k leaseKey, prev *contract.Lease, req contract.LeaseRequest) int64 {
			if r, ok := st.rel[k]; ok && prev == nil && r.owner == req.Owner {
				return r.token
			}
			st.next[k]++
			return st.next[k]
		}, func(st *state, k leaseKey, l contract.Lease) { st.rel[k] = released{l.Owner, l.Token} }),
	})
	register("tokens-reset-on-restart", variant{
		doc: "the token counter lives in the client process, not in storage: it restarts when every client has closed",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend {
			return &tokenMapper{Backend: b, st: st, resetOnRestart: true,
				grant: func(st *state, k leaseKey, _ *contract.Lease, _ contract.LeaseRequest) int64 {
					st.next[k]++
					return st.next[k]
				}}
		},
	})
}

// noTolerance takes a lease over as soon as it has expired.
type noTolerance struct {
	*exactmem.Backend
	st *state
}

func (b noTolerance) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	l, err := b.Backend.AcquireLease(ctx, req)
	if contract.CodeOf(err) != contract.LeaseBusy {
		return l, err
	}
	cur, gerr := b.Backend.GetLease(ctx, req.Scope, req.Resource)
	if gerr != nil || cur.ExpiresAt.After(b.st.now()) {
		return l, err
	}
	_, _ = b.Backend.ReleaseLease(ctx, cur)
	return b.Backend.AcquireLease(ctx, req)
}

// sameOwnerReacquires treats a lease as re-entrant for its owner.
type sameOwnerReacquires struct{ *exactmem.Backend }

func (b sameOwnerReacquires) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	l, err := b.Backend.AcquireLease(ctx, req)
	if contract.CodeOf(err) == contract.LeaseBusy {
		if cur, gerr := b.Backend.GetLease(ctx, req.Scope, req.Resource); gerr == nil && cur.Owner == req.Owner {
			return cur, nil
		}
	}
	return l, err
}

// renewLeaseFromOldExpiry adds the TTL to the old expiry.
type renewLeaseFromOldExpiry struct {
	*exactmem.Backend
	st *state
}

func (b renewLeaseFromOldExpiry) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	if cur, err := b.Backend.GetLease(ctx, l.Scope, l.Resource); err == nil {
		if left := cur.ExpiresAt.Sub(b.st.now()); left > 0 {
			ttl += left // the bug
		}
	}
	return b.Backend.RenewLease(ctx, l, ttl)
}

// takeoverRace reads, then takes over, forcing its way past a racing
// winner.
type takeoverRace struct {
	*exactmem.Backend
	st *state
}

func (b takeoverRace) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	cur, err := b.Backend.GetLease(ctx, req.Scope, req.Resource)
	expired := err == nil && cur.ExpiresAt.Add(Tolerance).Before(b.st.now())
	if expired {
		time.Sleep(raceWindow) // widen the window
	}
	l, err := b.Backend.AcquireLease(ctx, req)
	if expired && contract.CodeOf(err) == contract.LeaseBusy {
		// The bug: "it was expired when I looked", so overwrite.
		if now, gerr := b.Backend.GetLease(ctx, req.Scope, req.Resource); gerr == nil {
			_, _ = b.Backend.ReleaseLease(ctx, now)
		}
		return b.Backend.AcquireLease(ctx, req)
	}
	return l, err
}

// grantPolicy picks the token callers see for a new grant on k; prev is
// the lease stored before it (real token), if any. It runs under st.mu.
type grantPolicy func(st *state, k leaseKey, prev *contract.Lease, req contract.LeaseRequest) int64

// releasePolicy runs under st.mu after a release of l (visible token).
type releasePolicy func(st *state, k leaseKey, l contract.Lease)

// leaseTokens wraps clients so that callers see tokens chosen by grant
// instead of the memory backend's, translated back on the way in. When two
// grants get the same visible token, a stale holder's token maps to the
// newer grant: its fence becomes valid again, which is what a token bug
// does.
func leaseTokens(grant grantPolicy, release releasePolicy) func(*exactmem.Backend, *state) contract.Backend {
	return func(b *exactmem.Backend, st *state) contract.Backend {
		return &tokenMapper{Backend: b, st: st, grant: grant, release: release}
	}
}

type tokenMapper struct {
	*exactmem.Backend
	st      *state
	grant   grantPolicy
	release releasePolicy
	// resetOnRestart: the counters are forgotten when the last client
	// closes, as if they lived in the client process.
	resetOnRestart bool
	closed         bool
}

func (b *tokenMapper) real(scope contract.Scope, resource string, tok int64) int64 {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if r, ok := b.st.toReal[leaseKey{scope, resource}][tok]; ok {
		return r
	}
	return math.MaxInt64 // matches no grant
}

func (b *tokenMapper) show(l contract.Lease) contract.Lease {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if v, ok := b.st.visible[l.Token]; ok {
		l.Token = v
	}
	return l
}

func (b *tokenMapper) fence(scope contract.Scope, f *contract.Fence) *contract.Fence {
	if f == nil {
		return nil
	}
	cp := *f
	cp.Token = b.real(scope, f.Resource, f.Token)
	return &cp
}

func (b *tokenMapper) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	prev, perr := b.Backend.GetLease(ctx, req.Scope, req.Resource)
	l, err := b.Backend.AcquireLease(ctx, req)
	if err != nil {
		return l, err
	}
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	k := leaseKey{req.Scope, req.Resource}
	var p *contract.Lease
	if perr == nil {
		p = &prev
	}
	v := b.grant(b.st, k, p, req)
	if b.st.toReal[k] == nil {
		b.st.toReal[k] = map[int64]int64{}
	}
	b.st.toReal[k][v] = l.Token
	b.st.visible[l.Token] = v
	l.Token = v
	return l, nil
}

func (b *tokenMapper) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	l.Token = b.real(l.Scope, l.Resource, l.Token)
	out, err := b.Backend.RenewLease(ctx, l, ttl)
	return b.show(out), err
}

func (b *tokenMapper) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	visible := l
	l.Token = b.real(l.Scope, l.Resource, l.Token)
	ok, err := b.Backend.ReleaseLease(ctx, l)
	if ok && b.release != nil {
		b.st.mu.Lock()
		b.release(b.st, leaseKey{l.Scope, l.Resource}, visible)
		b.st.mu.Unlock()
	}
	return ok, err
}

func (b *tokenMapper) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	l, err := b.Backend.GetLease(ctx, scope, resource)
	return b.show(l), err
}

func (b *tokenMapper) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	u.Fence = b.fence(u.Scope, u.Fence)
	return b.Backend.UpdateWorkflow(ctx, u)
}

func (b *tokenMapper) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	c.Fence = b.fence(c.Scope, c.Fence)
	return b.Backend.CompleteKey(ctx, c)
}

func (b *tokenMapper) CompleteKeyTx(ctx context.Context, tx any, c contract.Completion) (contract.KeyRecord, error) {
	c.Fence = b.fence(c.Scope, c.Fence)
	return b.Backend.CompleteKeyTx(ctx, tx, c)
}

func (b *tokenMapper) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	in := make([]contract.Lease, len(leases))
	for i, l := range leases {
		l.Token = b.real(l.Scope, l.Resource, l.Token)
		in[i] = l
	}
	out, err := b.Backend.RenewLeases(ctx, in, ttl)
	for i := range out {
		if out[i].Err == nil {
			out[i].Lease = b.show(out[i].Lease)
		}
	}
	return out, err
}

func (b *tokenMapper) ListLeases(ctx context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	out, err := b.Backend.ListLeases(ctx, q)
	for i := range out {
		out[i] = b.show(out[i])
	}
	return out, err
}

func (b *tokenMapper) Close() error {
	b.st.mu.Lock()
	if !b.closed {
		b.closed = true
		b.st.open--
		if b.st.open == 0 && b.resetOnRestart {
			b.st.next = map[leaseKey]int64{} // the bug
		}
	}
	b.st.mu.Unlock()
	return b.Backend.Close()
}

// A freedom the contract allows: tokens counted per resource, so that two
// scopes (or two resources) hand out the same numbers.
func init() {
	register("tokens-per-resource", variant{
		doc:     "lease tokens come from a counter per scope and resource (keyed by contract.TokenResource, so a semaphore's permits share theirs), as a key-value backend keeps them, so the same token appears in several scopes and resources",
		control: true,
		wrap: leaseTokens(func(st *state, k leaseKey, _ *contract.Lease, _ contract.LeaseRequest) int64 {
			k.resource = contract.TokenResource(k.resource)
			st.next[k]++
			return st.next[k]
		}, nil),
	})
}
