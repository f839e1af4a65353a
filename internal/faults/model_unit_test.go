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

func TestPermitTokenOrderCheck(t *testing.T) {
	base := time.Now()
	g := func(res string, kind faultmodel.Kind, tok int64, start, end int) grantRec {
		o := mkop(int64(start), int64(end), faultmodel.Input{Kind: kind}, okOut)
		return grantRec{resource: res, op: o, token: tok, start: base.Add(time.Duration(start)), end: base.Add(time.Duration(end))}
	}
	if v := checkTokens("unit", []grantRec{g("s#1", faultmodel.AcquirePermit, 5, 0, 1), g("s#2", faultmodel.AcquirePermit, 4, 2, 3)}); len(v) == 0 {
		t.Error("a smaller token on another permit of the semaphore was not flagged")
	}
	if v := checkTokens("unit", []grantRec{g("s#2", faultmodel.GetLease, 5, 0, 1), g("s#1", faultmodel.AcquirePermit, 5, 2, 3)}); len(v) == 0 {
		t.Error("a permit's token reused by another permit was not flagged")
	}
	if v := checkTokens("unit", []grantRec{g("s#1", faultmodel.AcquirePermit, 5, 0, 1), g("s#1", faultmodel.GetLease, 4, 2, 3)}); len(v) == 0 {
		t.Error("a read of a permit older than its grant was not flagged")
	}
	// Another permit's older grant may still hold: reading it is fine.
	if v := checkTokens("unit", []grantRec{g("s#2", faultmodel.AcquirePermit, 4, 0, 1), g("s#1", faultmodel.AcquirePermit, 5, 2, 3),
		g("s#2", faultmodel.GetLease, 4, 4, 5), g("s#3", faultmodel.AcquirePermit, 6, 6, 7)}); len(v) != 0 {
		t.Errorf("legal permit tokens flagged: %+v", v)
	}
}

func TestHolderCheck(t *testing.T) {
	acq := func(start, end int64, owner string, permit int, tok int64) *faultmodel.Op {
		return mkop(start, end, faultmodel.Input{Kind: faultmodel.AcquirePermit, Owner: owner, Permits: 2},
			faultmodel.Output{O: faultmodel.OK, Permit: permit, Owner: owner, Token: tok})
	}
	rel := func(start, end int64, owner string, permit int, tok int64) *faultmodel.Op {
		return mkop(start, end, faultmodel.Input{Kind: faultmodel.Release, Permit: permit, Owner: owner, Token: tok},
			faultmodel.Output{O: faultmodel.OK, Bool: true})
	}
	read := func(start, end int64, owner string, permit int, tok int64) *faultmodel.Op {
		return mkop(start, end, faultmodel.Input{Kind: faultmodel.GetLease, Permit: permit},
			faultmodel.Output{O: faultmodel.OK, Owner: owner, Token: tok})
	}
	renewFenced := func(start, end int64, owner string, permit int, tok int64) *faultmodel.Op {
		return mkop(start, end, faultmodel.Input{Kind: faultmodel.Renew, Permit: permit, Owner: owner, Token: tok},
			faultmodel.Output{O: faultmodel.Fail, Code: contract.Fenced})
	}
	cases := []struct {
		name  string
		ops   []*faultmodel.Op
		viols int
		most  int
	}{
		{"two holders of two permits", []*faultmodel.Op{acq(0, 10, "o1", 1, 1), acq(5, 15, "o2", 2, 2)}, 0, 2},
		{"a third holder", []*faultmodel.Op{acq(0, 10, "o1", 1, 1), acq(5, 15, "o2", 2, 2), acq(20, 30, "o3", 1, 3)}, 1, 3},
		{"a third holder of a third permit", []*faultmodel.Op{acq(0, 10, "o1", 1, 1), acq(5, 15, "o2", 2, 2), acq(20, 30, "o3", 3, 3)}, 1, 3},
		{"a third holder after a release began", []*faultmodel.Op{acq(0, 10, "o1", 1, 1), acq(5, 15, "o2", 2, 2),
			rel(20, 40, "o1", 1, 1), acq(25, 30, "o3", 1, 3)}, 0, 2},
		{"a third holder after a refused renewal", []*faultmodel.Op{acq(0, 10, "o1", 1, 1), acq(5, 15, "o2", 2, 2),
			renewFenced(20, 40, "o1", 1, 1), acq(25, 30, "o3", 1, 3)}, 0, 2},
		{"a lost reply's grant read back, and a third holder", []*faultmodel.Op{acq(0, 10, "o1", 1, 1),
			read(20, 30, "o2", 2, 2), acq(40, 50, "o3", 1, 3)}, 1, 3},
		{"two grants of one permit", []*faultmodel.Op{acq(0, 10, "o1", 1, 1), acq(20, 30, "o2", 1, 2)}, 1, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &env{t: t, driver: "unit", sc: &scenario{name: "unit"}, stats: newStats()}
			h := &hist{n: 0}
			most := checkHolderCount(e, h, "s", 2, c.ops)
			if len(e.viols) != c.viols || most != c.most {
				t.Errorf("%d violations (%+v), most %d; want %d, %d", len(e.viols), e.viols, most, c.viols, c.most)
			}
		})
	}
	// A lease is a semaphore of one permit.
	e := &env{t: t, driver: "unit", sc: &scenario{name: "unit"}, stats: newStats()}
	lacq := func(start, end int64, owner string, tok int64) *faultmodel.Op {
		return mkop(start, end, faultmodel.Input{Kind: faultmodel.Acquire, Owner: owner}, faultmodel.Output{O: faultmodel.OK, Owner: owner, Token: tok})
	}
	checkHolderCount(e, &hist{}, "r", 1, []*faultmodel.Op{lacq(0, 10, "o1", 1), lacq(20, 30, "o2", 2)})
	if len(e.viols) != 1 {
		t.Errorf("two holders of a lease: %d violations, want 1", len(e.viols))
	}
}

func TestPermitRowCheck(t *testing.T) {
	h := &hist{n: 0, permits: map[string]int{"s": 2}}
	acq := func(owner string, out faultmodel.Output) *faultmodel.Op {
		return mkop(0, 1, faultmodel.Input{Kind: faultmodel.AcquirePermit, Owner: owner, Permits: 2}, out)
	}
	granted := func(permit int, owner string, tok int64) faultmodel.Output {
		return faultmodel.Output{O: faultmodel.OK, Permit: permit, Owner: owner, Token: tok}
	}
	cases := []struct {
		name string
		ops  []*faultmodel.Op
		rows map[string]leaseRow
		want string // the violation kind, "" for none
	}{
		{"acknowledged grants stored", []*faultmodel.Op{acq("o1", granted(1, "o1", 1)), acq("o2", granted(2, "o2", 2))},
			map[string]leaseRow{"s#1": {owner: "o1", token: 1, expires: time.UnixMicro(0)}, "s#2": {owner: "o2", token: 2, expires: time.UnixMicro(0)}}, ""},
		{"a lost reply's grant stored", []*faultmodel.Op{acq("o1", unknownOut)},
			map[string]leaseRow{"s#2": {owner: "o1", token: 1, expires: time.UnixMicro(0)}}, ""},
		{"permit N+1 stored", []*faultmodel.Op{acq("o1", unknownOut)},
			map[string]leaseRow{"s#3": {owner: "o1", token: 1, expires: time.UnixMicro(0)}}, "permit-out-of-range"},
		{"a canceled acquire stored", []*faultmodel.Op{acq("o1", canceledOut)},
			map[string]leaseRow{"s#1": {owner: "o1", token: 1, expires: time.UnixMicro(0)}}, "not-applied-present"},
		{"a busy acquire stored", []*faultmodel.Op{acq("o1", faultmodel.Output{O: faultmodel.Fail, Code: contract.LeaseBusy})},
			map[string]leaseRow{"s#2": {owner: "o1", token: 1, expires: time.UnixMicro(0)}}, "not-applied-present"},
		{"stored on another permit than acknowledged", []*faultmodel.Op{acq("o1", granted(1, "o1", 1))},
			map[string]leaseRow{"s#1": {owner: "o1", token: 1, expires: time.UnixMicro(0)}, "s#2": {owner: "o1", token: 1, expires: time.UnixMicro(0)}}, "unexplained-write"},
		{"an acknowledged grant absent", []*faultmodel.Op{acq("o1", granted(2, "o1", 1))},
			map[string]leaseRow{}, "acked-absent"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &env{t: t, driver: "unit", sc: &scenario{name: "unit"}, stats: newStats()}
			checkPermitRows(e, h, "s", c.ops, c.rows)
			var kinds []string
			for _, v := range e.viols {
				kinds = append(kinds, v.kind)
			}
			if c.want == "" && len(kinds) != 0 || c.want != "" && (len(kinds) != 1 || kinds[0] != c.want) {
				t.Errorf("violations %v, want [%s]", kinds, c.want)
			}
		})
	}
}
