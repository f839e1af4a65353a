package etcd

// Adapted from internal/faults (the Postgres fault suite): the same
// history types, error classification and sequential model, so that both
// backends are checked against one specification.

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

// kind is the operation of one recorded call.
type kind uint8

const (
	kAcquire kind = iota
	kRenew
	kRelease
	kGetLease
	kFencedUpdate
	kUpdate
	kGetWorkflow
	kCreate
	kClaim
	kComplete
	kRenewKey
	kReleaseKey
	kGetKey
)

var kindNames = [...]string{
	kAcquire: "AcquireLease", kRenew: "RenewLease", kRelease: "ReleaseLease", kGetLease: "GetLease",
	kFencedUpdate: "UpdateWorkflow(fenced)", kUpdate: "UpdateWorkflow", kGetWorkflow: "GetWorkflow",
	kCreate: "CreateWorkflow", kClaim: "ClaimKey", kComplete: "CompleteKey", kRenewKey: "RenewKey",
	kReleaseKey: "ReleaseKey", kGetKey: "GetKey",
}

func (k kind) String() string { return kindNames[k] }

// write reports whether the operation may change stored state.
func (k kind) write() bool {
	switch k {
	case kGetLease, kGetWorkflow, kGetKey:
		return false
	}
	return true
}

// outcome classifies a call's result as the contract defines it.
type outcome uint8

const (
	oOK         outcome = iota // no error
	oFail                      // a definite refusal: nothing applied (Conflict, Fenced, LeaseBusy, InFlight, NotFound, …)
	oNotApplied                // Unavailable or Canceled: certainly not applied
	oUnknown                   // OutcomeUnknown: may have applied
	oBad                       // an error the contract does not allow here (a violation); modelled as unknown
)

func (o outcome) String() string {
	return [...]string{"ok", "refused", "not-applied", "unknown", "BAD"}[o]
}

// input is what a call asked for. Every field is comparable.
type input struct {
	Kind      kind
	Owner     string // lease owner (unique per AcquireLease attempt) or fence owner
	Token     int64  // lease token or fence token
	ExpectRev int64
	Ref       string // this call's unique id: request id, outcome ref, owner
	Fp        string // claim fingerprint
	KeyToken  string // claim token
}

// output is what a call returned.
type output struct {
	O      outcome
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
}

// op is one recorded call.
type op struct {
	ID       int
	Client   int
	Part     string // partition: the resource, workflow or key
	In       input
	Out      output
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

func (o *op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d c%d [%8.3fms..%8.3fms] %s(%s", o.ID, o.Client,
		float64(o.Start)/1e6, float64(o.End)/1e6, o.In.Kind, o.Part)
	in := o.In
	if in.Owner != "" {
		fmt.Fprintf(&b, " owner=%s", in.Owner)
	}
	if in.Token != 0 {
		fmt.Fprintf(&b, " token=%d", in.Token)
	}
	if in.Kind == kUpdate || in.Kind == kFencedUpdate {
		fmt.Fprintf(&b, " expectRev=%d", in.ExpectRev)
	}
	if in.Ref != "" {
		fmt.Fprintf(&b, " ref=%s", in.Ref)
	}
	if in.Fp != "" {
		fmt.Fprintf(&b, " fp=%s", in.Fp)
	}
	if in.KeyToken != "" {
		fmt.Fprintf(&b, " ktoken=%s", short(in.KeyToken))
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

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

func describeOutput(k kind, out output) string {
	switch out.O {
	case oOK:
	case oFail:
		s := out.Code.String()
		if out.Code == contract.Conflict {
			s += fmt.Sprintf("(actual rev %d)", out.Rev)
		}
		return s
	default:
		return out.O.String() + "(" + out.Code.String() + ")"
	}
	switch k {
	case kAcquire, kRenew, kGetLease:
		return fmt.Sprintf("ok owner=%s token=%d", out.Owner, out.Token)
	case kRelease, kReleaseKey:
		return fmt.Sprintf("ok %v", out.Bool)
	case kFencedUpdate, kUpdate, kGetWorkflow, kCreate:
		return fmt.Sprintf("ok rev=%d ref=%s", out.Rev, out.Ref)
	case kClaim:
		return fmt.Sprintf("ok %s ktoken=%s fp=%s ref=%s", out.Claim, short(out.KToken), out.Fp, out.Ref)
	case kComplete, kRenewKey, kGetKey:
		return fmt.Sprintf("ok %s fp=%s ref=%s", out.KState, out.Fp, out.Ref)
	}
	return "ok"
}

// classify maps a call's error to an outcome and reports whether the error
// itself breaks the contract (and why).
func classify(k kind, err error, ctxEnded bool) (output, string) {
	if err == nil {
		return output{O: oOK}, ""
	}
	var ce *contract.Error
	if !errors.As(err, &ce) {
		return output{O: oBad, Code: contract.Unknown}, fmt.Sprintf("error is not a *contract.Error: %T", err)
	}
	code := contract.CodeOf(err)
	out := output{Code: code}
	switch code {
	case contract.Unknown:
		out.O = oBad
		return out, "error has code Unknown"
	case contract.Unavailable:
		out.O = oNotApplied
	case contract.Canceled:
		out.O = oNotApplied
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return out, "Canceled error is not errors.Is(context.Canceled / DeadlineExceeded)"
		}
		if !ctxEnded {
			return out, "Canceled although the caller's context had not ended"
		}
	case contract.OutcomeUnknown:
		out.O = oUnknown
	case contract.NotFound, contract.AlreadyExists, contract.Conflict, contract.Fenced,
		contract.LeaseBusy, contract.KeyConflict, contract.InFlight:
		out.O = oFail
		if !allowedRefusal(k, code) {
			out.O = oBad
			return out, fmt.Sprintf("%s cannot fail with %s here", k, code)
		}
		if code == contract.Conflict && ce.Details != nil {
			out.Rev = ce.Details.ActualRevision
		}
	default:
		out.O = oBad
		return out, fmt.Sprintf("unexpected code %s", code)
	}
	return out, ""
}

func allowedRefusal(k kind, c contract.Code) bool {
	switch k {
	case kAcquire:
		return c == contract.LeaseBusy
	case kRenew:
		return c == contract.Fenced
	case kGetLease, kGetWorkflow, kGetKey:
		return c == contract.NotFound
	case kFencedUpdate:
		return c == contract.Fenced || c == contract.Conflict
	case kUpdate:
		return c == contract.Conflict || c == contract.NotFound
	case kCreate:
		return c == contract.AlreadyExists
	case kClaim:
		return c == contract.KeyConflict
	case kComplete, kRenewKey:
		return c == contract.Fenced
	}
	return false
}

// recorder collects the operations of one history.
type recorder struct {
	base     time.Time
	scenario string
	driver   string
	history  int

	mu  sync.Mutex
	ops []*op
}

func (r *recorder) add(o *op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o.ID = len(r.ops)
	o.Scenario, o.Driver, o.History = r.scenario, r.driver, r.history
	r.ops = append(r.ops, o)
}

func (r *recorder) snapshot() []*op {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]*op(nil), r.ops...)
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// byPart groups ops by partition, in call order.
func byPart(ops []*op) map[string][]*op {
	m := map[string][]*op{}
	for _, o := range ops {
		m[o.Part] = append(m[o.Part], o)
	}
	return m
}
