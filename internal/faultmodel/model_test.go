package faultmodel

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/durable-go/durable/contract"
)

// This test checks that the model flags what it must (a suite that never
// fails proves nothing) and accepts what the contract allows.

func mkop(start, end int64, in Input, out Output) *Op {
	return &Op{Start: time.Duration(start), End: time.Duration(end), In: in, Out: out}
}

var (
	okOut       = Output{O: OK}
	canceledOut = Output{O: NotApplied, Code: contract.Canceled}
	unknownOut  = Output{O: Unknown, Code: contract.OutcomeUnknown}
)

func with(o Output, f func(*Output)) Output { f(&o); return o }

func TestModelFlagsDishonestOutcomes(t *testing.T) {
	acquire := func(owner string) Input { return Input{Kind: Acquire, Owner: owner} }
	granted := func(owner string, tok int64) Output {
		return with(okOut, func(o *Output) { o.Owner, o.Token = owner, tok })
	}
	cases := []struct {
		name string
		kind PartKind
		ops  []*Op
		want porcupine.CheckResult
	}{
		{"canceled acquire that applied", PartLease, []*Op{
			mkop(0, 10, acquire("o1"), canceledOut),
			mkop(20, 30, Input{Kind: GetLease}, granted("o1", 5)),
		}, porcupine.Illegal},
		{"unknown acquire that applied", PartLease, []*Op{
			mkop(0, 10, acquire("o1"), unknownOut),
			mkop(20, 30, Input{Kind: GetLease}, granted("o1", 5)),
		}, porcupine.Ok},
		{"unknown acquire that did not apply", PartLease, []*Op{
			mkop(0, 10, acquire("o1"), unknownOut),
			mkop(20, 30, acquire("o2"), granted("o2", 3)),
			mkop(40, 50, Input{Kind: GetLease}, granted("o2", 3)),
		}, porcupine.Ok},
		{"stale fence accepted", PartLease, []*Op{
			mkop(0, 1, acquire("o1"), granted("o1", 1)),
			mkop(2, 3, Input{Kind: Release, Owner: "o1", Token: 1}, with(okOut, func(o *Output) { o.Bool = true })),
			mkop(4, 5, acquire("o2"), granted("o2", 2)),
			mkop(6, 7, Input{Kind: FencedUpdate, Owner: "o1", Token: 1, Ref: "u1"}, with(okOut, func(o *Output) { o.Rev, o.Ref = 2, "u1" })),
		}, porcupine.Illegal},
		{"token went backwards", PartLease, []*Op{
			mkop(0, 1, acquire("o1"), granted("o1", 10)),
			mkop(2, 3, Input{Kind: Release, Owner: "o1", Token: 10}, with(okOut, func(o *Output) { o.Bool = true })),
			mkop(4, 5, acquire("o2"), granted("o2", 9)),
		}, porcupine.Illegal},
		{"two holders", PartLease, []*Op{
			mkop(0, 1, acquire("o1"), granted("o1", 1)),
			mkop(2, 3, acquire("o2"), granted("o2", 2)),
		}, porcupine.Illegal},
		{"canceled CAS that applied", PartWorkflow, []*Op{
			mkop(0, 1, Input{Kind: Create, Ref: "c"}, with(okOut, func(o *Output) { o.Rev, o.Ref = 1, "c" })),
			mkop(2, 3, Input{Kind: Update, ExpectRev: 1, Ref: "u"}, canceledOut),
			mkop(4, 5, Input{Kind: GetWorkflow}, with(okOut, func(o *Output) { o.Rev, o.Ref = 2, "u" })),
		}, porcupine.Illegal},
		{"unknown CAS that applied", PartWorkflow, []*Op{
			mkop(0, 1, Input{Kind: Create, Ref: "c"}, with(okOut, func(o *Output) { o.Rev, o.Ref = 1, "c" })),
			mkop(2, 3, Input{Kind: Update, ExpectRev: 1, Ref: "u"}, unknownOut),
			mkop(4, 5, Input{Kind: GetWorkflow}, with(okOut, func(o *Output) { o.Rev, o.Ref = 2, "u" })),
		}, porcupine.Ok},
		{"canceled claim that applied", PartKey, []*Op{
			mkop(0, 1, Input{Kind: Claim, Fp: "a"}, canceledOut),
			mkop(2, 3, Input{Kind: Claim, Fp: "a"}, with(okOut, func(o *Output) { o.Claim, o.Fp = contract.ClaimInFlight, "a" })),
		}, porcupine.Illegal},
		{"completion retried after a lost reply", PartKey, []*Op{
			mkop(0, 1, Input{Kind: Claim, Fp: "a"}, with(okOut, func(o *Output) { o.Claim, o.KToken, o.Fp = contract.ClaimNew, "t", "a" })),
			mkop(2, 3, Input{Kind: Complete, KeyToken: "t", Ref: "r1"}, unknownOut),
			mkop(4, 5, Input{Kind: Complete, KeyToken: "t", Ref: "r2"}, with(okOut, func(o *Output) { o.KState, o.Fp, o.Ref = contract.KeyCompleted, "a", "r1" })),
		}, porcupine.Ok},
		{"canceled completion that applied", PartKey, []*Op{
			mkop(0, 1, Input{Kind: Claim, Fp: "a"}, with(okOut, func(o *Output) { o.Claim, o.KToken, o.Fp = contract.ClaimNew, "t", "a" })),
			mkop(2, 3, Input{Kind: Complete, KeyToken: "t", Ref: "r1"}, canceledOut),
			mkop(4, 5, Input{Kind: GetKey}, with(okOut, func(o *Output) { o.KState, o.Fp, o.Ref = contract.KeyCompleted, "a", "r1" })),
		}, porcupine.Illegal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got, _ := LinCheck(c.kind, c.ops, 10*time.Second); got != c.want {
				t.Errorf("linearizability = %s, want %s", got, c.want)
			}
		})
	}
}
