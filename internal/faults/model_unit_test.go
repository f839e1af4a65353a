package faults

import (
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/faultmodel"
)

// These tests need no database: they check that the checkers flag what
// they must (a suite that never fails proves nothing) and accept what the
// contract allows. The model's own test is in internal/faultmodel.

func mkop(start, end int64, in faultmodel.Input, out faultmodel.Output) *faultmodel.Op {
	return &faultmodel.Op{Start: time.Duration(start), End: time.Duration(end), In: in, Out: out}
}

var (
	okOut       = faultmodel.Output{O: faultmodel.OK}
	canceledOut = faultmodel.Output{O: faultmodel.NotApplied, Code: contract.Canceled}
	unknownOut  = faultmodel.Output{O: faultmodel.Unknown, Code: contract.OutcomeUnknown}
)

func TestDatabaseCheckFlagsDishonestOutcomes(t *testing.T) {
	e := &env{t: t, driver: "unit", sc: &scenario{name: "unit"}, stats: newStats()}
	h := &hist{n: 0}
	acq := mkop(0, 1, faultmodel.Input{Kind: faultmodel.Acquire, Owner: "o1"}, canceledOut)
	checkLeaseRow(e, h, "r", []*faultmodel.Op{acq}, leaseRow{owner: "o1", token: 7}, true)
	upd := mkop(0, 1, faultmodel.Input{Kind: faultmodel.Update, ExpectRev: 1, Ref: "u"}, canceledOut)
	checkWorkflowRow(e, h, "w", []*faultmodel.Op{upd}, wfRow{rev: 2, ref: "u"}, true, true)
	claim := mkop(0, 1, faultmodel.Input{Kind: faultmodel.Claim, Fp: "a"}, canceledOut)
	checkKeyRow(e, h, "k", []*faultmodel.Op{claim}, keyRow{state: "claimed", token: "x", fp: "a"}, true)
	got := map[string]int{}
	for _, v := range e.viols {
		got[v.kind]++
	}
	if got["not-applied-present"] != 4 { // the workflow twice: its writer and the revision count
		t.Errorf("violations %v, want 4 not-applied-present: %+v", got, e.viols)
	}
	// And what the contract allows passes.
	e.viols = nil
	checkLeaseRow(e, h, "r", []*faultmodel.Op{mkop(0, 1, faultmodel.Input{Kind: faultmodel.Acquire, Owner: "o1"}, unknownOut)}, leaseRow{owner: "o1", token: 7}, true)
	checkWorkflowRow(e, h, "w", []*faultmodel.Op{mkop(0, 1, faultmodel.Input{Kind: faultmodel.Update, ExpectRev: 1, Ref: "u"}, unknownOut)}, wfRow{rev: 2, ref: "u"}, true, true)
	if len(e.viols) != 0 {
		t.Errorf("unexpected violations: %+v", e.viols)
	}
}

func TestTokenOrderCheck(t *testing.T) {
	base := time.Now()
	g := func(res string, tok int64, start, end int) grantRec {
		o := mkop(int64(start), int64(end), faultmodel.Input{Kind: faultmodel.Acquire}, okOut)
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
