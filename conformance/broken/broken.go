// Package broken holds deliberately broken variants of the memory backend.
// Each embeds *memory.Backend and gets one rule of the contract wrong; the
// package's test runs the conformance suite against each of them and
// asserts that the suite catches the bug. Never use these backends for
// anything else.
package broken

import (
	"context"
	"math"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
)

// Tolerance is the clock tolerance of every broken harness.
const Tolerance = 2 * time.Second

// bug names one broken variant and how to wrap a client with it.
type bug struct {
	doc  string
	wrap func(b *memory.Backend, st *state) contract.Backend
}

// None is the name of the unbroken control: the plain memory backend.
const None = "none"

var bugs = map[string]bug{
	None: {
		doc:  "the plain memory backend",
		wrap: func(b *memory.Backend, _ *state) contract.Backend { return b },
	},
	"cas-ignores-revision": {
		doc:  "UpdateWorkflow checks the status but ignores ExpectRevision",
		wrap: func(b *memory.Backend, _ *state) contract.Backend { return casIgnoresRevision{b} },
	},
	"conflict-without-details": {
		doc:  "UpdateWorkflow's Conflict errors carry no Details",
		wrap: func(b *memory.Backend, _ *state) contract.Backend { return conflictWithoutDetails{b} },
	},
	"lease-tokens-reset-on-release": {
		doc:  "fencing tokens are a per-resource counter that restarts after a release",
		wrap: func(b *memory.Backend, st *state) contract.Backend { return &tokensReset{b, st} },
	},
	"no-clock-tolerance": {
		doc:  "AcquireLease takes an expired lease over right at expiry, ignoring the tolerance",
		wrap: func(b *memory.Backend, st *state) contract.Backend { return noTolerance{b, st} },
	},
	"same-owner-reacquires": {
		doc:  "AcquireLease by the owner of a live lease returns that lease instead of LeaseBusy",
		wrap: func(b *memory.Backend, _ *state) contract.Backend { return sameOwnerReacquires{b} },
	},
	"scope-leak": {
		doc:  "GetWorkflow ignores the scope and reads the unscoped namespace",
		wrap: func(b *memory.Backend, _ *state) contract.Backend { return scopeLeak{b} },
	},
	"stale-claim-token-completes": {
		doc:  "CompleteKey ignores the claim token: a stale owner can complete a reclaimed key",
		wrap: func(b *memory.Backend, st *state) contract.Backend { return &staleTokenCompletes{b, st} },
	},
	"wait-never-wakes": {
		doc:  "WaitKey returns at once for settled keys but is never woken by a completion or release",
		wrap: func(b *memory.Backend, _ *state) contract.Backend { return waitNeverWakes{b} },
	},
	"claim-race": {
		doc:  "ClaimKey checks for the key, then claims it in a second step: racing callers all think they won",
		wrap: func(b *memory.Backend, _ *state) contract.Backend { return claimRace{b} },
	},
}

// Names returns the names of the broken variants, and None, sorted.
func Names() []string {
	out := make([]string, 0, len(bugs))
	for name := range bugs {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Doc describes the bug of a variant.
func Doc(name string) string { return bugs[name].doc }

// NewHarness returns a harness factory for the named variant, or false if
// there is no such variant.
func NewHarness(name string) (conformance.NewHarness, bool) {
	bg, ok := bugs[name]
	if !ok {
		return nil, false
	}
	return func(_ context.Context, _ *testing.T) (conformance.Harness, error) {
		clock := memory.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC))
		st := &state{clock: clock}
		return &harness{
			storage: memory.NewStorage(memory.Options{Clock: clock, Tolerance: Tolerance}),
			state:   st,
			wrap:    bg.wrap,
		}, nil
	}, true
}

// harness is a conformance.Harness over one memory Storage whose clients
// are wrapped with one bug. The bug's state is shared by every client.
type harness struct {
	storage *memory.Storage
	state   *state
	wrap    func(*memory.Backend, *state) contract.Backend
}

func (h *harness) Open(ctx context.Context) (contract.Backend, error) {
	return h.wrap(h.storage.Backend(), h.state), nil
}
func (h *harness) Advance(d time.Duration)  { h.state.clock.Advance(d) }
func (h *harness) Tolerance() time.Duration { return Tolerance }
func (h *harness) Close() error             { return nil }
func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{Clock: true, Restart: true}
}

// state is what a bug needs to remember across the clients of one storage.
type state struct {
	clock *memory.ManualClock

	mu sync.Mutex
	// tokensReset: the last visible token per resource, and the mapping
	// between visible and real tokens.
	next    map[leaseKey]int64
	toReal  map[leaseKey]map[int64]int64
	visible map[int64]int64
	// staleTokenCompletes: the latest claim token per key.
	claims map[contract.KeyRef]string
}

type leaseKey struct {
	scope    contract.Scope
	resource string
}

// now is the store clock at the precision the memory backend keeps.
func (st *state) now() time.Time { return st.clock.Now().UTC().Truncate(time.Microsecond) }

// --- workflows ---

type casIgnoresRevision struct{ *memory.Backend }

func (b casIgnoresRevision) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	u.ExpectRevision = 0
	return b.Backend.UpdateWorkflow(ctx, u)
}

type conflictWithoutDetails struct{ *memory.Backend }

func (b conflictWithoutDetails) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	w, err := b.Backend.UpdateWorkflow(ctx, u)
	if contract.CodeOf(err) == contract.Conflict {
		return w, &contract.Error{Code: contract.Conflict, Msg: "workflow changed"}
	}
	return w, err
}

type scopeLeak struct{ *memory.Backend }

func (b scopeLeak) GetWorkflow(ctx context.Context, _ contract.Scope, id string) (contract.Workflow, error) {
	return b.Backend.GetWorkflow(ctx, "", id)
}

// --- leases ---

// tokensReset shows callers a per-resource token that restarts at 1 after
// every release, translating to the real tokens underneath. A new grant
// after a release reuses an old token number, so a stale holder's fence
// becomes valid again.
type tokensReset struct {
	*memory.Backend
	st *state
}

func (b *tokensReset) real(scope contract.Scope, resource string, tok int64) int64 {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if r, ok := b.st.toReal[leaseKey{scope, resource}][tok]; ok {
		return r
	}
	return math.MaxInt64 // matches no grant
}

func (b *tokensReset) show(l contract.Lease) contract.Lease {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if v, ok := b.st.visible[l.Token]; ok {
		l.Token = v
	}
	return l
}

func (b *tokensReset) fence(scope contract.Scope, f *contract.Fence) *contract.Fence {
	if f == nil {
		return nil
	}
	cp := *f
	cp.Token = b.real(scope, f.Resource, f.Token)
	return &cp
}

func (b *tokensReset) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	l, err := b.Backend.AcquireLease(ctx, req)
	if err != nil {
		return l, err
	}
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if b.st.next == nil {
		b.st.next, b.st.toReal, b.st.visible = map[leaseKey]int64{}, map[leaseKey]map[int64]int64{}, map[int64]int64{}
	}
	k := leaseKey{req.Scope, req.Resource}
	b.st.next[k]++
	v := b.st.next[k]
	if b.st.toReal[k] == nil {
		b.st.toReal[k] = map[int64]int64{}
	}
	b.st.toReal[k][v] = l.Token
	b.st.visible[l.Token] = v
	l.Token = v
	return l, nil
}

func (b *tokensReset) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	l.Token = b.real(l.Scope, l.Resource, l.Token)
	out, err := b.Backend.RenewLease(ctx, l, ttl)
	return b.show(out), err
}

func (b *tokensReset) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	l.Token = b.real(l.Scope, l.Resource, l.Token)
	ok, err := b.Backend.ReleaseLease(ctx, l)
	if ok {
		b.st.mu.Lock()
		b.st.next[leaseKey{l.Scope, l.Resource}] = 0 // the bug
		b.st.mu.Unlock()
	}
	return ok, err
}

func (b *tokensReset) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	l, err := b.Backend.GetLease(ctx, scope, resource)
	return b.show(l), err
}

func (b *tokensReset) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	u.Fence = b.fence(u.Scope, u.Fence)
	return b.Backend.UpdateWorkflow(ctx, u)
}

func (b *tokensReset) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	c.Fence = b.fence(c.Scope, c.Fence)
	return b.Backend.CompleteKey(ctx, c)
}

// noTolerance takes a lease over as soon as it has expired.
type noTolerance struct {
	*memory.Backend
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
type sameOwnerReacquires struct{ *memory.Backend }

func (b sameOwnerReacquires) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	l, err := b.Backend.AcquireLease(ctx, req)
	if contract.CodeOf(err) == contract.LeaseBusy {
		if cur, gerr := b.Backend.GetLease(ctx, req.Scope, req.Resource); gerr == nil && cur.Owner == req.Owner {
			return cur, nil
		}
	}
	return l, err
}

// --- keys ---

// staleTokenCompletes completes with whatever token currently holds the
// claim, not the caller's.
type staleTokenCompletes struct {
	*memory.Backend
	st *state
}

func (b *staleTokenCompletes) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := b.Backend.ClaimKey(ctx, req)
	if err == nil && c.Kind.Owned() {
		b.st.mu.Lock()
		if b.st.claims == nil {
			b.st.claims = map[contract.KeyRef]string{}
		}
		b.st.claims[req.KeyRef] = c.Token
		b.st.mu.Unlock()
	}
	return c, err
}

func (b *staleTokenCompletes) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	b.st.mu.Lock()
	if tok, ok := b.st.claims[c.KeyRef]; ok {
		c.Token = tok // the bug
	}
	b.st.mu.Unlock()
	return b.Backend.CompleteKey(ctx, c)
}

// waitNeverWakes answers WaitKey for keys that are already completed or
// absent, and otherwise sleeps until the caller gives up.
type waitNeverWakes struct{ *memory.Backend }

func (b waitNeverWakes) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	rec, err := b.Backend.GetKey(ctx, k)
	if err != nil || rec.State == contract.KeyCompleted {
		return rec, err
	}
	<-ctx.Done()
	return contract.KeyRecord{}, &contract.Error{Code: contract.Canceled, Err: ctx.Err()}
}

// claimRace checks for the key and claims it in two steps; a caller that
// saw no key believes it won even when another caller claimed it between
// the steps.
type claimRace struct{ *memory.Backend }

func (b claimRace) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	_, err := b.Backend.GetKey(ctx, req.KeyRef)
	absent := contract.CodeOf(err) == contract.NotFound
	if absent {
		time.Sleep(time.Millisecond) // widen the window
	}
	c, err := b.Backend.ClaimKey(ctx, req)
	if err == nil && absent && c.Kind == contract.ClaimInFlight {
		c.Kind, c.Token = contract.ClaimNew, "lost-race-"+req.Key // the bug
	}
	return c, err
}
