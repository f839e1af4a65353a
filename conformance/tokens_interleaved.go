package conformance

import (
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// Fencing tokens when grants on several resources interleave. Tokens need
// only grow per resource (contract rule 4): these scenarios compare each
// grant with the earlier grants of its own resource, never across
// resources.

// grantLog remembers every grant per resource.
type grantLog map[string][]contract.Lease

// acquire grants req and checks that the token exceeds every earlier
// token of the same resource.
func (g grantLog) acquire(t *testing.T, e *env, s *durable.Store, what string, req contract.LeaseRequest) contract.Lease {
	t.Helper()
	l := mustAcquire(t, e.ctx, s, req)
	checkGreater(t, what+" on "+req.Resource, l, g[req.Resource]...)
	g[req.Resource] = append(g[req.Resource], l)
	return l
}

// release releases l, which must be held.
func release(t *testing.T, e *env, s *durable.Store, l contract.Lease) {
	t.Helper()
	ok, err := s.ReleaseLease(e.ctx, l)
	noErr(t, err, "ReleaseLease")
	if !ok {
		t.Fatalf("ReleaseLease of the grant %d on %s = false, want true", l.Token, l.Resource)
	}
}

// cleanupLeases runs Cleanup and checks how many leases it deleted.
func cleanupLeases(t *testing.T, e *env, s *durable.Store, want int) {
	t.Helper()
	res, err := s.Cleanup(e.ctx, contract.CleanupRequest{TerminalAge: time.Hour})
	noErr(t, err, "Cleanup")
	if res.Leases != want {
		t.Errorf("Cleanup deleted %d leases, want %d", res.Leases, want)
	}
}

// testTokensIncreasePerResourceWhenGrantsInterleave: takeovers by expiry
// and after a release on some resources, a takeover of the resource with
// the oldest grant, then a release and a Cleanup, each followed by a new
// grant on a resource that already held higher tokens.
func testTokensIncreasePerResourceWhenGrantsInterleave(t *testing.T, e *env) {
	s1, s2, s3 := e.open(), e.open(), e.open()
	g := grantLog{}
	pt := e.pastTakeover()

	// res-a's first grant outlives two rounds of takeovers elsewhere.
	long := e.leaseReq("res-a", "owner-1")
	long.TTL = 2 * pt
	g.acquire(t, e, s1, "first grant", long)
	g.acquire(t, e, s2, "first grant", e.leaseReq("res-b", "owner-1"))
	g.acquire(t, e, s3, "first grant", e.leaseReq("res-c", "owner-1"))

	e.advance(pt)
	b := g.acquire(t, e, s1, "takeover by expiry", e.leaseReq("res-b", "owner-2"))
	g.acquire(t, e, s2, "takeover by expiry", e.leaseReq("res-c", "owner-2"))
	release(t, e, s3, b)
	checkNoLease(t, e.ctx, s3, "", "res-b")
	g.acquire(t, e, s3, "grant after a release", e.leaseReq("res-b", "owner-1"))

	e.advance(pt)
	g.acquire(t, e, s1, "second takeover by expiry", e.leaseReq("res-c", "owner-3"))
	b = g.acquire(t, e, s2, "second takeover by expiry", e.leaseReq("res-b", "owner-3"))

	// res-a, whose only grant is the oldest of all, is taken over: its new
	// token must not pull another resource's next one back.
	e.advance(pt)
	a := g.acquire(t, e, s3, "takeover of the oldest grant", e.leaseReq("res-a", "owner-2"))

	// A release, then a new grant on res-b, which held higher tokens.
	release(t, e, s2, b)
	b = g.acquire(t, e, s1, "grant after a release, following a takeover elsewhere", e.leaseReq("res-b", "owner-4"))

	// res-c's lease expired past the tolerance; Cleanup deletes it, then
	// res-c is granted again.
	cleanupLeases(t, e, s2, 1)
	checkNoLease(t, e.ctx, s2, "", "res-c")
	c := g.acquire(t, e, s3, "grant after Cleanup, following a takeover elsewhere", e.leaseReq("res-c", "owner-4"))

	for _, l := range []contract.Lease{a, b, c} {
		checkStoredLease(t, e.ctx, s1, l)
	}
	// Every earlier grant is stale.
	for res, ls := range g {
		for _, l := range ls[:len(ls)-1] {
			if _, err := s1.RenewLease(e.ctx, l, e.ttl); !checkCode(t, err, contract.Fenced) {
				t.Logf("  (renewing the earlier grant %d on %s)", l.Token, res)
			}
		}
	}
}

// testTokensIncreaseWhenCleanupDeletesARecordTakenOverSeveralTimes: a
// resource taken over several times, interleaved with grants on others,
// whose lease record Cleanup deletes while an older grant elsewhere is
// still held; the next grant exceeds every token the resource held.
func testTokensIncreaseWhenCleanupDeletesARecordTakenOverSeveralTimes(t *testing.T, e *env) {
	s1, s2 := e.open(), e.open()
	g := grantLog{}
	pt := e.pastTakeover()

	// res-a's grant, the oldest, is still held when Cleanup runs.
	long := e.leaseReq("res-a", "owner-1")
	long.TTL = 10 * pt
	held := g.acquire(t, e, s1, "first grant", long)
	g.acquire(t, e, s2, "first grant", e.leaseReq("res-c", "owner-1"))
	g.acquire(t, e, s1, "first grant", e.leaseReq("res-b", "owner-1"))

	for i, owner := range []string{"owner-2", "owner-3", "owner-2"} {
		e.advance(pt)
		g.acquire(t, e, s1, "takeover by expiry", e.leaseReq("res-c", owner))
		if i == 1 {
			// The same owner takes res-b back.
			g.acquire(t, e, s2, "takeover by expiry", e.leaseReq("res-b", "owner-1"))
		}
	}
	e.advance(pt)
	// res-b and res-c expired past the tolerance; res-a is held.
	cleanupLeases(t, e, s2, 2)
	checkNoLease(t, e.ctx, s2, "", "res-c")
	checkNoLease(t, e.ctx, s2, "", "res-b")
	checkStoredLease(t, e.ctx, s2, held)

	c := g.acquire(t, e, s2, "grant after Cleanup deleted a record taken over several times", e.leaseReq("res-c", "owner-1"))
	b := g.acquire(t, e, s1, "grant after Cleanup", e.leaseReq("res-b", "owner-2"))
	checkStoredLease(t, e.ctx, s1, c)
	checkStoredLease(t, e.ctx, s1, b)
	for _, l := range g["res-c"][:len(g["res-c"])-1] {
		if _, err := s2.RenewLease(e.ctx, l, e.ttl); !checkCode(t, err, contract.Fenced) {
			t.Logf("  (renewing the earlier grant %d on res-c)", l.Token)
		}
	}
}
