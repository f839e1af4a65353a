package faultmodel

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/durable-go/durable/contract"
)

// The semaphore model flags what it must (an N+1th holder, a token reused
// across permits, a fenced write by a released permit, a grant that is not
// the lowest free permit, a lost reply's grant with an impossible token)
// and accepts what the contract allows — for the native capability
// (PartSemaphore) and, where they differ, for Store.AcquirePermit's fallback
// (PartSemaphoreByLeases).

func acquireP(owner string, permits int) Input {
	return Input{Kind: AcquirePermit, Owner: owner, Ref: owner, Permits: permits}
}

func grantedP(n int, owner string, tok int64) Output {
	return with(okOut, func(o *Output) { o.Permit, o.Owner, o.Token = n, owner, tok })
}

func readP(n int) Input { return Input{Kind: GetLease, Permit: n} }

func heldBy(owner string, tok int64) Output {
	return with(okOut, func(o *Output) { o.Owner, o.Token = owner, tok })
}

var (
	busyOut     = Output{O: Fail, Code: contract.LeaseBusy}
	notFoundOut = Output{O: Fail, Code: contract.NotFound}
	fencedOut   = Output{O: Fail, Code: contract.Fenced}
	releasedOut = with(okOut, func(o *Output) { o.Bool = true })
)

func releaseP(n int, owner string, tok int64) Input {
	return Input{Kind: Release, Permit: n, Owner: owner, Token: tok}
}

func fencedP(n int, owner string, tok int64, ref string) Input {
	return Input{Kind: FencedUpdate, Permit: n, Owner: owner, Token: tok, Ref: ref}
}

func wrote(rev int64, ref string) Output {
	return with(okOut, func(o *Output) { o.Rev, o.Ref = rev, ref })
}

func TestSemaphoreModel(t *testing.T) {
	const ok, illegal = porcupine.Ok, porcupine.Illegal
	cases := []struct {
		name string
		ops  []*Op
		// the verdicts for the native capability and for the fallback
		native, byLeases porcupine.CheckResult
	}{
		{"N grants in order, then busy", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 1)),
			mkop(2, 3, acquireP("o2", 2), grantedP(2, "o2", 2)),
			mkop(4, 5, acquireP("o3", 2), busyOut),
			mkop(6, 7, readP(3), notFoundOut),
		}, ok, ok},
		{"N+1th acquire granted permit N+1", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 1)),
			mkop(2, 3, acquireP("o2", 2), grantedP(2, "o2", 2)),
			mkop(4, 5, acquireP("o3", 2), grantedP(3, "o3", 3)),
		}, illegal, illegal},
		{"N+1th acquire granted a held permit", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 1)),
			mkop(2, 3, acquireP("o2", 2), grantedP(2, "o2", 2)),
			mkop(4, 5, acquireP("o3", 2), grantedP(1, "o3", 3)),
		}, illegal, illegal},
		{"N+1th holder read back", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 1)),
			mkop(2, 3, acquireP("o2", 2), grantedP(2, "o2", 2)),
			mkop(4, 5, readP(3), heldBy("o3", 3)),
		}, illegal, illegal},
		{"a granted permit's resource is not the semaphore's", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(-1, "o1", 1)),
		}, illegal, illegal},
		{"busy while every permit was free", []*Op{
			mkop(0, 1, acquireP("o1", 2), busyOut),
		}, illegal, illegal},
		{"busy while a lower permit was being released", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 1)),
			mkop(2, 3, acquireP("o2", 2), grantedP(2, "o2", 2)),
			mkop(4, 5, releaseP(1, "o1", 1), releasedOut),
			mkop(6, 7, acquireP("o3", 2), busyOut),
		}, illegal, ok}, // the fallback may have tried permit 1 before the release
		{"not the lowest free permit", []*Op{
			mkop(0, 1, acquireP("o1", 3), grantedP(1, "o1", 1)),
			mkop(2, 3, releaseP(1, "o1", 1), releasedOut),
			mkop(4, 5, acquireP("o2", 3), grantedP(2, "o2", 2)),
		}, illegal, ok},
		{"token reused across permits", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 5)),
			mkop(2, 3, acquireP("o2", 2), grantedP(2, "o2", 5)),
		}, illegal, illegal},
		{"token below another permit's", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 5)),
			mkop(2, 3, acquireP("o2", 2), grantedP(2, "o2", 4)),
		}, illegal, illegal},
		{"token below a released permit's", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 5)),
			mkop(2, 3, releaseP(1, "o1", 5), releasedOut),
			mkop(4, 5, acquireP("o2", 2), grantedP(1, "o2", 3)),
		}, illegal, illegal},
		{"fenced writes by holders", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 1)),
			mkop(2, 3, acquireP("o2", 2), grantedP(2, "o2", 2)),
			mkop(4, 5, fencedP(1, "o1", 1, "u1"), wrote(2, "u1")),
			mkop(6, 7, fencedP(2, "o2", 2, "u2"), wrote(3, "u2")),
			mkop(8, 9, Input{Kind: GetWorkflow}, wrote(3, "u2")),
		}, ok, ok},
		{"fenced write by a released permit", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 1)),
			mkop(2, 3, releaseP(1, "o1", 1), releasedOut),
			mkop(4, 5, fencedP(1, "o1", 1, "u1"), wrote(2, "u1")),
		}, illegal, illegal},
		{"fenced write by a released permit refused", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 1)),
			mkop(2, 3, releaseP(1, "o1", 1), releasedOut),
			mkop(4, 5, acquireP("o2", 2), grantedP(1, "o2", 2)),
			mkop(6, 7, fencedP(1, "o1", 1, "u1"), fencedOut),
		}, ok, ok},
		{"fenced write with another permit's fence", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 1)),
			mkop(2, 3, fencedP(2, "o1", 1, "u1"), wrote(2, "u1")),
		}, illegal, illegal},
		{"renewal of a released permit", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 1)),
			mkop(2, 3, releaseP(1, "o1", 1), releasedOut),
			mkop(4, 5, Input{Kind: Renew, Permit: 1, Owner: "o1", Token: 1}, heldBy("o1", 1)),
		}, illegal, illegal},
		{"unknown release that applied", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 1)),
			mkop(2, 3, acquireP("o2", 2), grantedP(2, "o2", 2)),
			mkop(4, 5, releaseP(1, "o1", 1), unknownOut),
			mkop(6, 7, acquireP("o3", 2), grantedP(1, "o3", 3)),
		}, ok, ok},
		{"canceled release that applied", []*Op{
			mkop(0, 1, acquireP("o1", 2), grantedP(1, "o1", 1)),
			mkop(2, 3, acquireP("o2", 2), grantedP(2, "o2", 2)),
			mkop(4, 5, releaseP(1, "o1", 1), canceledOut),
			mkop(6, 7, acquireP("o3", 2), grantedP(1, "o3", 3)),
		}, illegal, illegal},
		{"canceled acquire that applied", []*Op{
			mkop(0, 1, acquireP("o1", 2), canceledOut),
			mkop(2, 3, readP(1), heldBy("o1", 5)),
		}, illegal, illegal},
		{"unknown acquire that applied", []*Op{
			mkop(0, 1, acquireP("o1", 2), unknownOut),
			mkop(2, 3, readP(1), heldBy("o1", 5)),
			mkop(4, 5, fencedP(1, "o1", 5, "u1"), wrote(2, "u1")),
		}, ok, ok},
		{"unknown acquire that did not apply", []*Op{
			mkop(0, 1, acquireP("o1", 2), unknownOut),
			mkop(2, 3, acquireP("o2", 2), grantedP(1, "o2", 3)),
			mkop(4, 5, readP(2), notFoundOut),
		}, ok, ok},
		{"unknown acquire when every permit was held", []*Op{
			mkop(0, 1, acquireP("o1", 1), grantedP(1, "o1", 1)),
			mkop(2, 3, acquireP("o2", 1), unknownOut),
			mkop(4, 5, readP(1), heldBy("o1", 1)),
		}, ok, ok},
		{"unknown acquire granted a permit above the lowest free", []*Op{
			mkop(0, 1, acquireP("o1", 3), grantedP(1, "o1", 1)),
			mkop(2, 3, acquireP("o2", 3), unknownOut),
			mkop(4, 5, readP(3), heldBy("o2", 7)),
		}, illegal, ok},
		{"unknown acquire, then a grant of the next permit", []*Op{
			mkop(0, 100, acquireP("o1", 2), unknownOut),
			mkop(20, 30, acquireP("o2", 2), grantedP(2, "o2", 7)),
			mkop(40, 50, readP(1), heldBy("o1", 5)), // o1 took permit 1 first: a smaller token
		}, ok, ok},
		{"unknown acquire's token above a later grant's", []*Op{
			mkop(0, 100, acquireP("o1", 2), unknownOut),
			mkop(20, 30, acquireP("o2", 2), grantedP(2, "o2", 7)),
			mkop(40, 50, readP(1), heldBy("o1", 8)), // then o1 came after o2, which should have had permit 1
		}, illegal, ok},
		{"unknown acquire's token reused by a later grant", []*Op{
			mkop(0, 100, acquireP("o1", 2), unknownOut),
			mkop(20, 30, acquireP("o2", 2), grantedP(2, "o2", 7)),
			mkop(40, 50, readP(1), heldBy("o1", 7)),
		}, illegal, illegal},
		{"two unknown acquires, tokens in grant order", []*Op{
			mkop(0, 100, acquireP("o1", 2), unknownOut),
			mkop(10, 100, acquireP("o2", 2), unknownOut),
			mkop(40, 50, readP(2), heldBy("o2", 6)),
			mkop(60, 70, readP(1), heldBy("o1", 5)),
		}, ok, ok},
		{"two unknown acquires, tokens against grant order", []*Op{
			mkop(0, 100, acquireP("o1", 2), unknownOut),
			mkop(10, 100, acquireP("o2", 2), unknownOut),
			mkop(40, 50, readP(2), heldBy("o2", 4)),
			mkop(60, 70, readP(1), heldBy("o1", 5)),
		}, illegal, ok}, // the fallback's o2 may have taken permit 2 first
		{"two unknown acquires, one token seen twice", []*Op{
			mkop(0, 100, acquireP("o1", 2), unknownOut),
			mkop(10, 100, acquireP("o2", 2), unknownOut),
			mkop(40, 50, readP(2), heldBy("o2", 5)),
			mkop(60, 70, readP(1), heldBy("o1", 5)),
		}, illegal, illegal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []struct {
				kind PartKind
				want porcupine.CheckResult
			}{{PartSemaphore, c.native}, {PartSemaphoreByLeases, c.byLeases}} {
				if got, _ := LinCheck(k.kind, c.ops, 10*time.Second); got != k.want {
					t.Errorf("kind %d: linearizability = %s, want %s", k.kind, got, k.want)
				}
			}
		})
	}
}

func TestSemaphoreModelRefusesTooManyPermits(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("LinCheck accepted Permits above MaxModelPermits")
		}
	}()
	LinCheck(PartSemaphore, []*Op{mkop(0, 1, acquireP("o1", MaxModelPermits+1), busyOut)}, time.Second)
}
