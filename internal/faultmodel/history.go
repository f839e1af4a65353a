package faultmodel

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
)

// Kind is the operation of one recorded call.
type Kind uint8

// The operations: one per Store method the workloads call (Do is
// recorded by the Postgres suite only, and checked apart from the model;
// AcquirePermit belongs to the semaphore partitions, see semaphore.go).
const (
	Acquire Kind = iota
	Renew
	Release
	GetLease
	FencedUpdate
	Update
	GetWorkflow
	Create
	Claim
	Complete
	RenewKey
	ReleaseKey
	GetKey
	Do
	AcquirePermit
)

var kindNames = [...]string{
	Acquire: "AcquireLease", Renew: "RenewLease", Release: "ReleaseLease", GetLease: "GetLease",
	FencedUpdate: "UpdateWorkflow(fenced)", Update: "UpdateWorkflow", GetWorkflow: "GetWorkflow",
	Create: "CreateWorkflow", Claim: "ClaimKey", Complete: "CompleteKey", RenewKey: "RenewKey",
	ReleaseKey: "ReleaseKey", GetKey: "GetKey", Do: "Do", AcquirePermit: "AcquirePermit",
}

func (k Kind) String() string { return kindNames[k] }

// write reports whether the operation may change stored state.
func (k Kind) write() bool {
	switch k {
	case GetLease, GetWorkflow, GetKey:
		return false
	}
	return true
}

// Outcome classifies a call's result as the contract defines it.
type Outcome uint8

const (
	OK         Outcome = iota // no error
	Fail                      // a definite refusal: nothing applied (Conflict, Fenced, LeaseBusy, InFlight, NotFound, …)
	NotApplied                // Unavailable or Canceled: certainly not applied
	Unknown                   // OutcomeUnknown: may have applied
	Bad                       // an error the contract does not allow here (a violation); modelled as unknown
)

func (o Outcome) String() string {
	return [...]string{"ok", "refused", "not-applied", "unknown", "BAD"}[o]
}

// Input is what a call asked for. Every field is comparable.
type Input struct {
	Kind      Kind
	Owner     string // lease owner (unique per AcquireLease attempt) or fence owner
	Token     int64  // lease token or fence token
	ExpectRev int64
	Ref       string // this call's unique id: request id, outcome ref, owner
	Fp        string // claim fingerprint
	KeyToken  string // claim token
	// Semaphore partitions: Permit is the permit (1-based) whose lease a
	// RenewLease, ReleaseLease, GetLease or fenced write names (its
	// resource is contract.PermitResource(partition, Permit)); 0 on every
	// other partition. Permits is AcquirePermit's PermitRequest.Permits.
	Permit  int
	Permits int
}

// Output is what a call returned.
type Output struct {
	O      Outcome
	Code   contract.Code
	Owner  string
	Token  int64
	Rev    int64
	Ref    string // workflow request id, key outcome ref
	Bool   bool
	Claim  contract.ClaimKind
	KToken string
	KState contract.KeyState
	Fp     string
	Exp    int64 // lease expiry (Unix microseconds), not part of the model
	// Permit is the permit AcquirePermit granted, parsed from the granted
	// lease's resource (contract.SplitPermit); -1 when that resource is not
	// a permit of the partition's semaphore.
	Permit int
}

// Op is one recorded call.
type Op struct {
	ID       int
	Client   int
	Part     string // partition: the resource, workflow or key
	In       Input
	Out      Output
	Err      error
	Start    time.Duration // since the run's base time
	End      time.Duration
	Deadline time.Duration // the caller's deadline relative to Start; 0 = none
	Cancel   time.Duration // when the caller cancelled relative to Start; 0 = not cancelled
	CtxErr   bool          // the caller's context had ended when the call returned
	Scenario string
	Driver   string
	History  int
}

// String describes the call and its result on one line, for reports.
func (o *Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d c%d [%8.3fms..%8.3fms] %s(%s", o.ID, o.Client,
		float64(o.Start)/1e6, float64(o.End)/1e6, o.In.Kind, o.Part)
	in := o.In
	if in.Permit != 0 {
		fmt.Fprintf(&b, " permit=%d", in.Permit)
	}
	if in.Permits != 0 {
		fmt.Fprintf(&b, " permits=%d", in.Permits)
	}
	if in.Owner != "" {
		fmt.Fprintf(&b, " owner=%s", in.Owner)
	}
	if in.Token != 0 {
		fmt.Fprintf(&b, " token=%d", in.Token)
	}
	if in.Kind == Update || in.Kind == FencedUpdate {
		fmt.Fprintf(&b, " expectRev=%d", in.ExpectRev)
	}
	if in.Ref != "" {
		fmt.Fprintf(&b, " ref=%s", in.Ref)
	}
	if in.Fp != "" {
		fmt.Fprintf(&b, " fp=%s", in.Fp)
	}
	if in.KeyToken != "" {
		fmt.Fprintf(&b, " ktoken=%s", Short(in.KeyToken))
	}
	b.WriteString(") -> ")
	b.WriteString(describeOutput(o.In.Kind, o.Out))
	if o.Err != nil {
		fmt.Fprintf(&b, " err=%q", o.Err.Error())
	}
	if o.Deadline > 0 {
		fmt.Fprintf(&b, " deadline=%v", o.Deadline)
	}
	if o.Cancel > 0 {
		fmt.Fprintf(&b, " cancelled-after=%v", o.Cancel)
	}
	return b.String()
}

// Short returns the first 8 bytes of a token, for reports.
func Short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

func describeOutput(k Kind, out Output) string {
	switch out.O {
	case OK:
	case Fail:
		s := out.Code.String()
		if out.Code == contract.Conflict {
			s += fmt.Sprintf("(actual rev %d)", out.Rev)
		}
		return s
	default:
		return out.O.String() + "(" + out.Code.String() + ")"
	}
	switch k {
	case Acquire, Renew, GetLease:
		return fmt.Sprintf("ok owner=%s token=%d", out.Owner, out.Token)
	case AcquirePermit:
		return fmt.Sprintf("ok permit=%d owner=%s token=%d", out.Permit, out.Owner, out.Token)
	case Release, ReleaseKey:
		return fmt.Sprintf("ok %v", out.Bool)
	case FencedUpdate, Update, GetWorkflow, Create:
		return fmt.Sprintf("ok rev=%d ref=%s", out.Rev, out.Ref)
	case Claim:
		return fmt.Sprintf("ok %s ktoken=%s fp=%s ref=%s", out.Claim, Short(out.KToken), out.Fp, out.Ref)
	case Complete, RenewKey, GetKey:
		return fmt.Sprintf("ok %s fp=%s ref=%s", out.KState, out.Fp, out.Ref)
	case Do:
		return fmt.Sprintf("ok ref=%s replayed=%v", out.Ref, out.Bool)
	}
	return "ok"
}

// Classify maps a call's error to an outcome and reports whether the error
// itself breaks the contract (and why).
func Classify(k Kind, err error, ctxEnded bool) (Output, string) {
	if err == nil {
		return Output{O: OK}, ""
	}
	var ce *contract.Error
	if !errors.As(err, &ce) {
		return Output{O: Bad, Code: contract.Unknown}, fmt.Sprintf("error is not a *contract.Error: %T", err)
	}
	code := contract.CodeOf(err)
	out := Output{Code: code}
	switch code {
	case contract.Unknown:
		out.O = Bad
		return out, "error has code Unknown"
	case contract.Unavailable:
		out.O = NotApplied
	case contract.Canceled:
		out.O = NotApplied
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return out, "Canceled error is not errors.Is(context.Canceled / DeadlineExceeded)"
		}
		if !ctxEnded && k != Do { // Do's detached completion has timeouts of its own
			return out, "Canceled although the caller's context had not ended"
		}
	case contract.OutcomeUnknown:
		out.O = Unknown
	case contract.NotFound, contract.AlreadyExists, contract.Conflict, contract.Fenced,
		contract.LeaseBusy, contract.KeyConflict, contract.InFlight:
		out.O = Fail
		if !allowedRefusal(k, code) {
			out.O = Bad
			return out, fmt.Sprintf("%s cannot fail with %s here", k, code)
		}
		if code == contract.Conflict && ce.Details != nil {
			out.Rev = ce.Details.ActualRevision
		}
	default:
		out.O = Bad
		return out, fmt.Sprintf("unexpected code %s", code)
	}
	return out, ""
}

func allowedRefusal(k Kind, c contract.Code) bool {
	switch k {
	case Acquire, AcquirePermit:
		return c == contract.LeaseBusy
	case Renew:
		return c == contract.Fenced
	case GetLease, GetWorkflow, GetKey:
		return c == contract.NotFound
	case FencedUpdate:
		return c == contract.Fenced || c == contract.Conflict
	case Update:
		return c == contract.Conflict || c == contract.NotFound
	case Create:
		return c == contract.AlreadyExists
	case Claim:
		return c == contract.KeyConflict
	case Complete, RenewKey:
		return c == contract.Fenced
	case Do:
		return c == contract.InFlight || c == contract.KeyConflict || c == contract.Fenced
	}
	return false
}

// Recorder collects the operations of one history. Base is the time the
// ops' Start and End are measured from; Add stamps each op with Scenario,
// Driver and History.
type Recorder struct {
	Base     time.Time
	Scenario string
	Driver   string
	History  int

	mu  sync.Mutex
	ops []*Op
}

// Add records o, numbering it. It is safe for concurrent use.
func (r *Recorder) Add(o *Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o.ID = len(r.ops)
	o.Scenario, o.Driver, o.History = r.Scenario, r.Driver, r.History
	r.ops = append(r.ops, o)
}

// Snapshot returns the ops recorded so far, in call (Start) order.
func (r *Recorder) Snapshot() []*Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]*Op(nil), r.ops...)
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// ByPart groups ops by partition, in call order.
func ByPart(ops []*Op) map[string][]*Op {
	m := map[string][]*Op{}
	for _, o := range ops {
		m[o.Part] = append(m[o.Part], o)
	}
	return m
}
