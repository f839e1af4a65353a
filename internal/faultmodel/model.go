package faultmodel

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/durable-go/durable/contract"
)

// The sequential specification the histories are checked against, one
// model per partition:
//
//   - a lease partition is one lease resource plus the workflow that fenced
//     writes on that resource update (fenced CAS needs the lease state) —
//     also unfenced CAS on that workflow;
//   - a workflow partition is one workflow: CreateWorkflow, CAS updates,
//     GetWorkflow;
//   - a key partition is one idempotency key: ClaimKey, CompleteKey,
//     RenewKey, ReleaseKey, GetKey;
//   - a semaphore partition is one fenced semaphore (its permits' leases,
//     one token sequence) plus the workflow that its holders' fenced writes
//     update: AcquirePermit, and RenewLease, ReleaseLease, GetLease and
//     fenced writes per permit (semaphore.go).
//
// Leases and claims use TTLs far longer than a history, so nothing expires
// within one and the model needs no clock. (Expiry and takeover under faults
// are exercised by Store.Do in the Postgres suite, whose claims have a short TTL and which has
// checks of its own.)
//
// Outcomes: a call that returned without error or with a definite refusal
// is checked exactly. Unavailable and Canceled are "not applied": the call
// is a no-op in the model — exactly the claim under test. OutcomeUnknown
// (and any error the contract does not allow, which is reported as a
// violation separately) is "may have applied": the operation gets an
// infinite return time, and its step always succeeds, applying the
// operation with whatever result it would have had. "Did not happen" is
// covered too, because porcupine may linearize such an operation after
// every other one, where its effect is invisible.

// PartKind is the kind of a partition: what its model state holds.
type PartKind uint8

const (
	PartLease PartKind = iota
	PartWorkflow
	PartKey
	PartSemaphore
	// PartSemaphoreByLeases is PartSemaphore relaxed to what
	// Store.AcquirePermit's fallback (AcquireLease on each permit in turn,
	// for a backend without contract.PermitAcquirer) guarantees. See
	// semaphore.go. Our backends all have the capability and are checked
	// against PartSemaphore; this kind documents, and unit-tests, what the
	// fallback promises to a third-party backend without it.
	PartSemaphoreByLeases
)

func (k PartKind) semaphore() bool { return k == PartSemaphore || k == PartSemaphoreByLeases }

// State is the model state of one partition; it is comparable.
type State struct {
	// Lease.
	Held     bool
	Owner    string
	Token    int64 // 0: held by a grant whose reply was lost, token not yet seen
	MaxToken int64 // the largest token the model has seen granted
	// Workflow.
	WfExists bool
	Rev      int64
	WfRef    string // request id of the last write
	// Idempotency key.
	K      contract.KeyState // "" = no record
	KToken string            // "" = a claim whose reply was lost
	KFp    string
	KRef   string
	// Semaphore: permit n is Permit[n-1]; MaxToken is the semaphore's (one
	// sequence across its permits).
	Permit [MaxModelPermits]PermitState
}

// InitRef is the request id of the workflows that the history's setup
// creates (at revision 1) for the lease partitions.
const InitRef = "init"

func initState(k PartKind) State {
	if k == PartLease || k.semaphore() {
		return State{WfExists: true, Rev: 1, WfRef: InitRef}
	}
	return State{}
}

func step(s State, in Input, out Output) (bool, State) {
	switch out.O {
	case NotApplied:
		return true, s
	}
	if !in.Kind.write() && out.O != OK && out.O != Fail {
		return true, s // a failed read tells nothing
	}
	maybe := out.O == Unknown || out.O == Bad
	ok := out.O == OK
	code := out.Code
	switch in.Kind {
	case Acquire:
		if maybe {
			if !s.Held {
				s.Held, s.Owner, s.Token = true, in.Owner, 0
			}
			return true, s
		}
		if ok {
			if s.Held || out.Owner != in.Owner || out.Token <= s.MaxToken {
				return false, s
			}
			s.Held, s.Owner, s.Token, s.MaxToken = true, in.Owner, out.Token, out.Token
			return true, s
		}
		return code == contract.LeaseBusy && s.Held, s

	case Renew:
		match := s.Held && s.Owner == in.Owner && s.Token == in.Token
		switch {
		case maybe:
			return true, s
		case ok:
			return match && out.Owner == in.Owner && out.Token == in.Token, s
		}
		return code == contract.Fenced && !match, s

	case Release:
		match := s.Held && s.Owner == in.Owner && s.Token == in.Token
		switch {
		case maybe:
			if match {
				s.Held = false
			}
			return true, s
		case ok:
			if out.Bool != match {
				return false, s
			}
			if match {
				s.Held = false
			}
			return true, s
		}
		return false, s

	case GetLease:
		if ok {
			if !s.Held || out.Owner != s.Owner {
				return false, s
			}
			if s.Token == 0 { // the grant whose reply was lost
				if out.Token <= s.MaxToken {
					return false, s
				}
				s.Token, s.MaxToken = out.Token, out.Token
				return true, s
			}
			return out.Token == s.Token, s
		}
		return code == contract.NotFound && !s.Held, s

	case FencedUpdate, Update, GetWorkflow, Create:
		valid := in.Kind != FencedUpdate || s.Held && s.Owner == in.Owner && s.Token == in.Token
		return stepWorkflow(s, in, out, valid)

	case Claim:
		switch {
		case maybe:
			if s.K == "" {
				s.K, s.KToken, s.KFp = contract.KeyClaimed, "", in.Fp
			}
			return true, s
		case ok:
			switch out.Claim {
			case contract.ClaimNew:
				if s.K != "" || out.KToken == "" {
					return false, s
				}
				s.K, s.KToken, s.KFp = contract.KeyClaimed, out.KToken, in.Fp
				return true, s
			case contract.ClaimInFlight:
				return s.K == contract.KeyClaimed && s.KFp == in.Fp && out.Fp == in.Fp, s
			case contract.ClaimCompleted:
				return s.K == contract.KeyCompleted && s.KFp == in.Fp && out.Ref == s.KRef, s
			}
			return false, s // Reclaimed: nothing expires within a history
		}
		return code == contract.KeyConflict && s.K != "" && s.KFp != in.Fp, s

	case Complete:
		match := s.K == contract.KeyClaimed && s.KToken != "" && s.KToken == in.KeyToken
		done := s.K == contract.KeyCompleted && s.KToken != "" && s.KToken == in.KeyToken
		switch {
		case maybe:
			if match {
				s.K, s.KRef = contract.KeyCompleted, in.Ref
			}
			return true, s
		case ok:
			if match && out.Ref == in.Ref && out.KState == contract.KeyCompleted {
				s.K, s.KRef = contract.KeyCompleted, in.Ref
				return true, s
			}
			return done && out.Ref == s.KRef && out.KState == contract.KeyCompleted, s
		}
		return code == contract.Fenced && !match && !done, s

	case RenewKey:
		match := s.K == contract.KeyClaimed && s.KToken != "" && s.KToken == in.KeyToken
		switch {
		case maybe:
			return true, s
		case ok:
			return match && out.KState == contract.KeyClaimed, s
		}
		return code == contract.Fenced && !match, s

	case ReleaseKey:
		match := s.K == contract.KeyClaimed && s.KToken != "" && s.KToken == in.KeyToken
		release := func() State {
			s.K, s.KToken, s.KFp, s.KRef = "", "", "", ""
			return s
		}
		switch {
		case maybe:
			if match {
				return true, release()
			}
			return true, s
		case ok:
			if out.Bool != match {
				return false, s
			}
			if match {
				return true, release()
			}
			return true, s
		}
		return false, s

	case GetKey:
		if ok {
			if s.K == "" || out.KState != s.K || out.Fp != s.KFp {
				return false, s
			}
			return s.K != contract.KeyCompleted || out.Ref == s.KRef, s
		}
		return code == contract.NotFound && s.K == "", s
	}
	return false, s
}

// stepWorkflow steps the workflow of a partition: CreateWorkflow, CAS
// updates (fenced or not) and GetWorkflow. valid says whether a fenced
// update's fence is the current grant (true for every other operation).
func stepWorkflow(s State, in Input, out Output, valid bool) (bool, State) {
	maybe := out.O == Unknown || out.O == Bad
	ok := out.O == OK
	code := out.Code
	switch in.Kind {
	case FencedUpdate, Update:
		revOK := in.ExpectRev == 0 || in.ExpectRev == s.Rev
		apply := func() State {
			s.Rev++
			s.WfRef = in.Ref
			return s
		}
		switch {
		case maybe:
			if s.WfExists && valid && revOK {
				return true, apply()
			}
			return true, s
		case ok:
			if s.WfExists && valid && revOK && out.Rev == s.Rev+1 && out.Ref == in.Ref {
				return true, apply()
			}
			return false, s
		}
		switch code {
		case contract.NotFound:
			return !s.WfExists, s
		case contract.Fenced:
			return s.WfExists && in.Kind == FencedUpdate && !valid, s
		case contract.Conflict:
			return s.WfExists && valid && !revOK && out.Rev == s.Rev, s
		}
		return false, s

	case GetWorkflow:
		if ok {
			return s.WfExists && out.Rev == s.Rev && out.Ref == s.WfRef, s
		}
		return code == contract.NotFound && !s.WfExists, s

	case Create:
		create := func() State {
			s.WfExists, s.Rev, s.WfRef = true, 1, in.Ref
			return s
		}
		switch {
		case maybe:
			if !s.WfExists {
				return true, create()
			}
			return true, s
		case ok:
			if !s.WfExists && out.Rev == 1 {
				return true, create()
			}
			return false, s
		}
		return code == contract.AlreadyExists && s.WfExists, s
	}
	return false, s
}

// String describes the state, for porcupine's visualization.
func (s State) String() string {
	var parts []string
	if s.Held {
		parts = append(parts, fmt.Sprintf("lease=%s/%d", s.Owner, s.Token))
	} else {
		parts = append(parts, "lease=free")
	}
	parts = append(parts, fmt.Sprintf("maxToken=%d", s.MaxToken))
	if s.WfExists {
		parts = append(parts, fmt.Sprintf("wf=rev%d/%s", s.Rev, s.WfRef))
	} else {
		parts = append(parts, "wf=none")
	}
	if s.K != "" {
		parts = append(parts, fmt.Sprintf("key=%s/%s/%s/%s", s.K, Short(s.KToken), s.KFp, s.KRef))
	} else {
		parts = append(parts, "key=none")
	}
	return strings.Join(parts, " ")
}

// Model returns the porcupine model of a partition of kind k.
func Model(k PartKind) porcupine.Model {
	if k.semaphore() {
		return semaphoreModel(k)
	}
	return porcupine.Model{
		Init: func() interface{} { return initState(k) },
		Step: func(state, in, out interface{}) (bool, interface{}) {
			return step(state.(State), in.(Input), out.(Output))
		},
		DescribeOperation: func(in, out interface{}) string {
			i := in.(Input)
			o := out.(Output)
			desc := i.Kind.String() + "("
			switch {
			case i.Owner != "":
				desc += fmt.Sprintf("%s/%d", i.Owner, i.Token)
			case i.KeyToken != "":
				desc += Short(i.KeyToken)
			}
			if i.Kind == Update || i.Kind == FencedUpdate {
				desc += fmt.Sprintf(" rev=%d", i.ExpectRev)
			}
			if i.Ref != "" {
				desc += " " + i.Ref
			}
			return desc + ") -> " + describeOutput(i.Kind, o)
		},
		DescribeState: func(state interface{}) string { return state.(State).String() },
	}
}

// porcupineOps converts recorded ops of one partition to porcupine's form.
func porcupineOps(ops []*Op) []porcupine.Operation {
	out := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		ret := int64(o.End)
		if o.In.Kind.write() && (o.Out.O == Unknown || o.Out.O == Bad) {
			ret = math.MaxInt64 // may take effect at any time after the call
		}
		out = append(out, porcupine.Operation{
			ClientId: o.Client, Input: o.In, Output: o.Out,
			Call: int64(o.Start), Return: ret,
		})
	}
	return out
}

// LinCheck checks one partition's history. It panics when a semaphore
// partition's AcquirePermit asks for more than MaxModelPermits permits (the
// model's state has room for that many).
func LinCheck(k PartKind, ops []*Op, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	if k.semaphore() {
		checkPermits(ops)
	}
	return porcupine.CheckOperationsVerbose(Model(k), porcupineOps(ops), timeout)
}
