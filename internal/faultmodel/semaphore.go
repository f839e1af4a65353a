package faultmodel

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
	"github.com/durable-go/durable/contract"
)

// The semaphore model. A semaphore partition is the fenced semaphore on one
// resource R — permit n is the lease on contract.PermitResource(R, n) — and
// the workflow R, which the permits' holders update with fenced writes
// (Fence.Resource = the permit's resource). Nothing expires within a
// history, so a permit is free when it was never granted or its grant was
// released.
//
// AcquirePermit (the native capability, contract.PermitAcquirer):
//
//   - OK: the granted permit n lies within 1–Permits, is free at the
//     linearization point and is the lowest free one there, the grant is
//     the caller's, and its token is greater than every token the
//     semaphore has seen: one sequence across all permits, so a token
//     reused by another permit is illegal;
//   - LeaseBusy: permits 1–Permits are all held at the linearization
//     point — so an N+1th holder is illegal both ways: a grant of permit
//     N+1 (out of range) and a grant of a held permit;
//   - unknown: may have applied, in one atomic step: it takes the lowest
//     free permit, with a token not seen yet (a "pending" grant, resolved
//     when a GetLease of that permit shows it). A pending grant's token
//     must be greater than every token seen before it was granted and
//     smaller than every token granted after it, including other pending
//     grants' once they are seen (PermitState.Floor, Ceil, After).
//
// RenewLease, ReleaseLease and GetLease take Input.Permit and behave as on
// a lease partition, on that permit's lease; a fenced write is valid only
// while its permit is held by the fence's owner and token (a fence of
// another permit, or of a released grant, is Fenced).
//
// PartSemaphoreByLeases relaxes exactly what Store.AcquirePermit's
// fallback cannot meet: it calls AcquireLease on permits 1, 2, … in turn,
// each its own atomic step, so an OK grant need not be the lowest free permit
// at its linearization point (a lower one may have been released after it
// was tried), LeaseBusy only proves that the last permit was held (when it was
// tried), and an unknown outcome may have granted any free permit. The
// fault suites run our backends, which all implement the capability,
// against PartSemaphore; this kind states the fallback's weaker promise.

// MaxModelPermits is the largest PermitRequest.Permits a semaphore partition
// may use: the model's state holds that many permits (a fixed-size array,
// so that the state stays comparable).
const MaxModelPermits = 4

// PermitState is one permit of a semaphore partition.
type PermitState struct {
	Held  bool
	Owner string
	Token int64 // 0: a pending grant (an AcquirePermit whose reply was lost), token not yet seen
	// A pending grant's token lies strictly between Floor and Ceil (0: no
	// upper bound yet), and above the token of every pending grant in
	// After (bit i: Permit[i]), which were granted before it.
	Floor, Ceil int64
	After       uint8
}

// checkPermits panics when an AcquirePermit asks for a number of permits
// the model has no room for: that is a bug of the workload, not of the
// system under test.
func checkPermits(ops []*Op) {
	for _, o := range ops {
		if o.In.Kind == AcquirePermit && (o.In.Permits < 1 || o.In.Permits > MaxModelPermits) {
			panic(fmt.Sprintf("faultmodel: AcquirePermit with Permits=%d: the semaphore model holds 1 to %d permits", o.In.Permits, MaxModelPermits))
		}
	}
}

// permit returns the index of permit n in State.Permit, or -1 when the
// model has no such permit (and so it is never held).
func permit(n int) int {
	if n < 1 || n > MaxModelPermits {
		return -1
	}
	return n - 1
}

func (s State) held(i int) bool { return i >= 0 && s.Permit[i].Held }

// holds reports whether permit i is held by owner with token (a known one).
func (s State) holds(i int, owner string, token int64) bool {
	if i < 0 {
		return false
	}
	p := s.Permit[i]
	return p.Held && p.Token != 0 && p.Owner == owner && p.Token == token
}

// grant gives permit i to owner with a token seen now (greater than
// MaxToken: the caller checked), which bounds every pending grant's token
// from above.
func (s State) grant(i int, owner string, token int64) State {
	for j := range s.Permit {
		if p := &s.Permit[j]; p.Held && p.Token == 0 && (p.Ceil == 0 || token < p.Ceil) {
			p.Ceil = token
		}
	}
	s.Permit[i] = PermitState{Held: true, Owner: owner, Token: token}
	s.MaxToken = max(s.MaxToken, token)
	return s
}

// grantPending gives permit i to owner with a token not seen yet.
func (s State) grantPending(i int, owner string) State {
	var after uint8
	for j, p := range s.Permit {
		if p.Held && p.Token == 0 {
			after |= 1 << j
		}
	}
	s.Permit[i] = PermitState{Held: true, Owner: owner, Floor: s.MaxToken, After: after}
	return s
}

// resolve records the token of pending grant i, once a read has shown it:
// it must fit its bounds; it then bounds the other pending grants' tokens.
func (s State) resolve(i int, token int64) (bool, State) {
	g := s.Permit[i]
	if token <= g.Floor || g.Ceil != 0 && token >= g.Ceil {
		return false, s
	}
	for j := range s.Permit {
		p := &s.Permit[j]
		if j == i || !p.Held || p.Token != 0 {
			continue
		}
		if p.After&(1<<i) != 0 { // granted after i
			p.Floor = max(p.Floor, token)
			p.After &^= 1 << i
		}
		if g.After&(1<<j) != 0 && (p.Ceil == 0 || token < p.Ceil) { // granted before i
			p.Ceil = token
		}
	}
	s.Permit[i] = PermitState{Held: true, Owner: g.Owner, Token: token}
	s.MaxToken = max(s.MaxToken, token)
	return true, s
}

// stepSemaphore returns the states a semaphore partition may be in after
// the operation; none when the operation could not have returned what it
// did. With byLeases it checks Store.AcquirePermit's fallback (see above).
func stepSemaphore(s State, in Input, out Output, byLeases bool) []State {
	one := func(ok bool, s State) []State {
		if ok {
			return []State{s}
		}
		return nil
	}
	if out.O == NotApplied {
		return one(true, s)
	}
	if !in.Kind.write() && out.O != OK && out.O != Fail {
		return one(true, s) // a failed read tells nothing
	}
	maybe := out.O == Unknown || out.O == Bad
	ok := out.O == OK
	code := out.Code
	i := permit(in.Permit)
	switch in.Kind {
	case AcquirePermit:
		n := in.Permits
		if n < 1 || n > MaxModelPermits {
			return nil
		}
		if maybe {
			var next []State
			for j := range n {
				if !s.Permit[j].Held {
					next = append(next, s.grantPending(j, in.Owner))
					if !byLeases {
						break // the lowest free permit
					}
				}
			}
			if next == nil {
				return one(true, s) // every permit held: it was refused
			}
			return next
		}
		if ok {
			g := out.Permit - 1
			if g < 0 || g >= n || s.Permit[g].Held || out.Owner != in.Owner || out.Token <= s.MaxToken {
				return nil
			}
			if !byLeases {
				for j := range g {
					if !s.Permit[j].Held {
						return nil // a lower permit was free
					}
				}
			}
			return one(true, s.grant(g, in.Owner, out.Token))
		}
		if code != contract.LeaseBusy {
			return nil
		}
		if byLeases {
			return one(s.Permit[n-1].Held, s) // the last permit tried was held
		}
		for j := range n {
			if !s.Permit[j].Held {
				return nil
			}
		}
		return one(true, s)

	case Renew:
		match := s.holds(i, in.Owner, in.Token)
		switch {
		case maybe:
			return one(true, s)
		case ok:
			return one(match && out.Owner == in.Owner && out.Token == in.Token, s)
		}
		return one(code == contract.Fenced && !match, s)

	case Release:
		match := s.holds(i, in.Owner, in.Token)
		if match && (maybe || ok && out.Bool) {
			s.Permit[i] = PermitState{}
		}
		return one(maybe || ok && out.Bool == match, s)

	case GetLease:
		if ok {
			if !s.held(i) || out.Owner != s.Permit[i].Owner {
				return nil
			}
			if s.Permit[i].Token == 0 { // the pending grant: its token is seen now
				return one(s.resolve(i, out.Token))
			}
			return one(out.Token == s.Permit[i].Token, s)
		}
		return one(code == contract.NotFound && !s.held(i), s)

	case FencedUpdate, Update, GetWorkflow, Create:
		valid := in.Kind != FencedUpdate || s.holds(i, in.Owner, in.Token)
		return one(stepWorkflow(s, in, out, valid))
	}
	return nil
}

// semString describes a semaphore partition's state.
func (s State) semString() string {
	var parts []string
	for j, p := range s.Permit {
		switch {
		case !p.Held:
			continue
		case p.Token == 0:
			parts = append(parts, fmt.Sprintf("#%d=%s/pending(%d..%d after %04b)", j+1, p.Owner, p.Floor, p.Ceil, p.After))
		default:
			parts = append(parts, fmt.Sprintf("#%d=%s/%d", j+1, p.Owner, p.Token))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "permits=free")
	}
	parts = append(parts, fmt.Sprintf("maxToken=%d", s.MaxToken))
	if s.WfExists {
		parts = append(parts, fmt.Sprintf("wf=rev%d/%s", s.Rev, s.WfRef))
	} else {
		parts = append(parts, "wf=none")
	}
	return strings.Join(parts, " ")
}

func describeSemOp(in, out interface{}) string {
	i := in.(Input)
	o := out.(Output)
	desc := i.Kind.String() + "("
	switch i.Kind {
	case AcquirePermit:
		desc += fmt.Sprintf("%s of %d", i.Owner, i.Permits)
	default:
		if i.Permit != 0 {
			desc += fmt.Sprintf("#%d ", i.Permit)
		}
		if i.Owner != "" {
			desc += fmt.Sprintf("%s/%d", i.Owner, i.Token)
		}
	}
	if i.Kind == Update || i.Kind == FencedUpdate {
		desc += fmt.Sprintf(" rev=%d", i.ExpectRev)
	}
	if i.Ref != "" && i.Ref != i.Owner {
		desc += " " + i.Ref
	}
	return desc + ") -> " + describeOutput(i.Kind, o)
}

// semaphoreModel is the porcupine model of a semaphore partition: a
// deterministic one for the native capability, the power-set construction
// of the nondeterministic one for the fallback.
func semaphoreModel(k PartKind) porcupine.Model {
	byLeases := k == PartSemaphoreByLeases
	describeState := func(state interface{}) string { return state.(State).semString() }
	if !byLeases {
		return porcupine.Model{
			Init: func() interface{} { return initState(k) },
			Step: func(state, in, out interface{}) (bool, interface{}) {
				next := stepSemaphore(state.(State), in.(Input), out.(Output), false)
				if len(next) == 0 {
					return false, state
				}
				return true, next[0] // at most one: the native semantics is deterministic
			},
			DescribeOperation: describeSemOp,
			DescribeState:     describeState,
		}
	}
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{initState(k)} },
		Step: func(state, in, out interface{}) []interface{} {
			next := stepSemaphore(state.(State), in.(Input), out.(Output), true)
			states := make([]interface{}, len(next))
			for j, s := range next {
				states[j] = s
			}
			return states
		},
		DescribeOperation: describeSemOp,
		DescribeState:     describeState,
	}
	return nm.ToModel()
}
