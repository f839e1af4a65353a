package faults

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/durable-go/durable/contract"
)

// These tests need no database: they check that the checkers flag what
// they must (a suite that never fails proves nothing) and accept what the
// contract allows.

func mkop(start, end int64, in input, out output) *op {
	return &op{Start: time.Duration(start), End: time.Duration(end), In: in, Out: out}
}

var (
	okOut       = output{O: oOK}
	canceledOut = output{O: oNotApplied, Code: contract.Canceled}
	unknownOut  = output{O: oUnknown, Code: contract.OutcomeUnknown}
)

func with(o output, f func(*output)) output { f(&o); return o }

func TestModelFlagsDishonestOutcomes(t *testing.T) {
	acquire := func(owner string) input { return input{Kind: kAcquire, Owner: owner} }
	granted := func(owner string, tok int64) output {
		return with(okOut, func(o *output) { o.Owner, o.Token = owner, tok })
	}
	cases := []struct {
		name string
		kind partKind
		ops  []*op
		want porcupine.CheckResult
	}{
		{"canceled acquire that applied", pLease, []*op{
			mkop(0, 10, acquire("o1"), canceledOut),
			mkop(20, 30, input{Kind: kGetLease}, granted("o1", 5)),
		}, porcupine.Illegal},
		{"unknown acquire that applied", pLease, []*op{
			mkop(0, 10, acquire("o1"), unknownOut),
			mkop(20, 30, input{Kind: kGetLease}, granted("o1", 5)),
		}, porcupine.Ok},
		{"unknown acquire that did not apply", pLease, []*op{
			mkop(0, 10, acquire("o1"), unknownOut),
			mkop(20, 30, acquire("o2"), granted("o2", 3)),
			mkop(40, 50, input{Kind: kGetLease}, granted("o2", 3)),
		}, porcupine.Ok},
		{"stale fence accepted", pLease, []*op{
			mkop(0, 1, acquire("o1"), granted("o1", 1)),
			mkop(2, 3, input{Kind: kRelease, Owner: "o1", Token: 1}, with(okOut, func(o *output) { o.Bool = true })),
			mkop(4, 5, acquire("o2"), granted("o2", 2)),
			mkop(6, 7, input{Kind: kFencedUpdate, Owner: "o1", Token: 1, Ref: "u1"}, with(okOut, func(o *output) { o.Rev, o.Ref = 2, "u1" })),
		}, porcupine.Illegal},
		{"token went backwards", pLease, []*op{
			mkop(0, 1, acquire("o1"), granted("o1", 10)),
			mkop(2, 3, input{Kind: kRelease, Owner: "o1", Token: 10}, with(okOut, func(o *output) { o.Bool = true })),
			mkop(4, 5, acquire("o2"), granted("o2", 9)),
		}, porcupine.Illegal},
		{"two holders", pLease, []*op{
			mkop(0, 1, acquire("o1"), granted("o1", 1)),
			mkop(2, 3, acquire("o2"), granted("o2", 2)),
		}, porcupine.Illegal},
		{"canceled CAS that applied", pWorkflow, []*op{
			mkop(0, 1, input{Kind: kCreate, Ref: "c"}, with(okOut, func(o *output) { o.Rev, o.Ref = 1, "c" })),
			mkop(2, 3, input{Kind: kUpdate, ExpectRev: 1, Ref: "u"}, canceledOut),
			mkop(4, 5, input{Kind: kGetWorkflow}, with(okOut, func(o *output) { o.Rev, o.Ref = 2, "u" })),
		}, porcupine.Illegal},
		{"unknown CAS that applied", pWorkflow, []*op{
			mkop(0, 1, input{Kind: kCreate, Ref: "c"}, with(okOut, func(o *output) { o.Rev, o.Ref = 1, "c" })),
			mkop(2, 3, input{Kind: kUpdate, ExpectRev: 1, Ref: "u"}, unknownOut),
			mkop(4, 5, input{Kind: kGetWorkflow}, with(okOut, func(o *output) { o.Rev, o.Ref = 2, "u" })),
		}, porcupine.Ok},
		{"canceled claim that applied", pKey, []*op{
			mkop(0, 1, input{Kind: kClaim, Fp: "a"}, canceledOut),
			mkop(2, 3, input{Kind: kClaim, Fp: "a"}, with(okOut, func(o *output) { o.Claim, o.Fp = contract.ClaimInFlight, "a" })),
		}, porcupine.Illegal},
		{"completion retried after a lost reply", pKey, []*op{
			mkop(0, 1, input{Kind: kClaim, Fp: "a"}, with(okOut, func(o *output) { o.Claim, o.KToken, o.Fp = contract.ClaimNew, "t", "a" })),
			mkop(2, 3, input{Kind: kComplete, KeyToken: "t", Ref: "r1"}, unknownOut),
			mkop(4, 5, input{Kind: kComplete, KeyToken: "t", Ref: "r2"}, with(okOut, func(o *output) { o.KState, o.Fp, o.Ref = contract.KeyCompleted, "a", "r1" })),
		}, porcupine.Ok},
		{"canceled completion that applied", pKey, []*op{
			mkop(0, 1, input{Kind: kClaim, Fp: "a"}, with(okOut, func(o *output) { o.Claim, o.KToken, o.Fp = contract.ClaimNew, "t", "a" })),
			mkop(2, 3, input{Kind: kComplete, KeyToken: "t", Ref: "r1"}, canceledOut),
			mkop(4, 5, input{Kind: kGetKey}, with(okOut, func(o *output) { o.KState, o.Fp, o.Ref = contract.KeyCompleted, "a", "r1" })),
		}, porcupine.Illegal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got, _ := linCheck(c.kind, c.ops, 10*time.Second); got != c.want {
				t.Errorf("linearizability = %s, want %s", got, c.want)
			}
		})
	}
}

func TestDatabaseCheckFlagsDishonestOutcomes(t *testing.T) {
	e := &env{t: t, driver: "unit", sc: &scenario{name: "unit"}, stats: newStats()}
	h := &hist{n: 0}
	acq := mkop(0, 1, input{Kind: kAcquire, Owner: "o1"}, canceledOut)
	checkLeaseRow(e, h, "r", []*op{acq}, leaseRow{owner: "o1", token: 7}, true)
	upd := mkop(0, 1, input{Kind: kUpdate, ExpectRev: 1, Ref: "u"}, canceledOut)
	checkWorkflowRow(e, h, "w", []*op{upd}, wfRow{rev: 2, ref: "u"}, true, true)
	claim := mkop(0, 1, input{Kind: kClaim, Fp: "a"}, canceledOut)
	checkKeyRow(e, h, "k", []*op{claim}, keyRow{state: "claimed", token: "x", fp: "a"}, true)
	got := map[string]int{}
	for _, v := range e.viols {
		got[v.kind]++
	}
	if got["not-applied-present"] != 4 { // the workflow twice: its writer and the revision count
		t.Errorf("violations %v, want 4 not-applied-present: %+v", got, e.viols)
	}
	// And what the contract allows passes.
	e.viols = nil
	checkLeaseRow(e, h, "r", []*op{mkop(0, 1, input{Kind: kAcquire, Owner: "o1"}, unknownOut)}, leaseRow{owner: "o1", token: 7}, true)
	checkWorkflowRow(e, h, "w", []*op{mkop(0, 1, input{Kind: kUpdate, ExpectRev: 1, Ref: "u"}, unknownOut)}, wfRow{rev: 2, ref: "u"}, true, true)
	if len(e.viols) != 0 {
		t.Errorf("unexpected violations: %+v", e.viols)
	}
}

func TestTokenOrderCheck(t *testing.T) {
	base := time.Now()
	g := func(res string, tok int64, start, end int) grantRec {
		o := mkop(int64(start), int64(end), input{Kind: kAcquire}, okOut)
		return grantRec{resource: res, op: o, token: tok, start: base.Add(time.Duration(start)), end: base.Add(time.Duration(end))}
	}
	if v := checkTokens("unit", []grantRec{g("a", 5, 0, 1), g("a", 6, 2, 3), g("b", 7, 4, 5)}); len(v) != 0 {
		t.Errorf("increasing tokens flagged: %+v", v)
	}
	if v := checkTokens("unit", []grantRec{g("a", 5, 0, 1), g("a", 4, 2, 3)}); len(v) == 0 {
		t.Error("a smaller token on the same resource was not flagged")
	}
	if v := checkTokens("unit", []grantRec{g("a", 5, 0, 1), g("b", 4, 2, 3)}); len(v) == 0 {
		t.Error("a smaller token on another resource (global sequence) was not flagged")
	}
}
