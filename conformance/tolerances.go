package conformance

import (
	"testing"
)

// toleranceSensitive names (group/scenario) the scenarios whose outcome
// turns on the clock tolerance: takeover and reclaim, fenced writes and
// renewals near expiry, cleanup of expired claims and leases, and the
// held-lease listing. [RunToleranceSensitive] runs only these.
var toleranceSensitive = []string{
	"Keys/StaleTokenIsRejectedAfterReclaim",
	"Keys/NoReclaimWithinTolerance",
	"Keys/CompletionWithExpiredFenceIsFenced",
	"Leases/StaleTokenIsRejectedAfterTakeover",
	"Leases/ExpiredLeaseCannotBeRenewedOrFence",
	"Leases/ToleranceGapLetsNeitherSideWrite",
	"Leases/NoTakeoverWithinTolerance",
	"Leases/FractionalTTLsEndValidityOnTime",
	"Cleanup/DeletesOnlyExpiredKeys",
	"Cleanup/DeletesOnlyExpiredLeases",
	"Cleanup/KeepsClaimsAndLeasesWithinTolerance",
	"Listing/HeldLeasesExcludeExpiredOnes",
	"Listing/HeldLeasesAreFoundPastAnyBatch",
}

// RunToleranceSensitive runs, as subtests of t grouped like [Run], only
// the scenarios whose outcome turns on the clock tolerance (takeover,
// reclaim, fenced writes and renewals near expiry, cleanup, ListLeases of
// held leases). Call it in addition to Run, with a harness whose backend
// is configured with a tolerance several times its time granularity
// (Capabilities.Granularity; a microsecond if zero) — at least twice it,
// or the test fails — so that "expired, but still within the tolerance"
// is a window of several granules the scenarios land inside, not a single
// instant a backend may round across. Run the full suite at the
// backend's usual tolerance (which may equal the granularity, as for a
// backend that keeps whole seconds), and this at a larger one: a backend
// that judges expiry with a fixed tolerance instead of its configured one
// passes the first and fails the second.
func RunToleranceSensitive(t *testing.T, newHarness NewHarness) {
	t.Helper()
	if newHarness == nil {
		t.Fatal("conformance.RunToleranceSensitive: newHarness is nil")
	}
	want := map[string]bool{}
	for _, name := range toleranceSensitive {
		want[name] = true
	}
	var sel []group
	for _, g := range groups() {
		var scs []scenario
		for _, sc := range g.scenarios {
			if want[g.name+"/"+sc.name] {
				scs = append(scs, sc)
				delete(want, g.name+"/"+sc.name)
			}
		}
		if len(scs) > 0 {
			sel = append(sel, group{g.name, scs})
		}
	}
	for name := range want {
		t.Fatalf("conformance.RunToleranceSensitive: no scenario %s (the suite's list is stale)", name)
	}
	info := preflight(t, newHarness, sel)
	if g := info.granularity(); info.tol < 2*g {
		t.Fatalf("conformance.RunToleranceSensitive: the backend's clock tolerance %v is not several times its granularity %v; "+
			"configure a larger tolerance (Run already covers the usual one)", info.tol, g)
	}
	t.Logf("conformance: tolerance-sensitive scenarios at tolerance %v (%d× the granularity %v): expired-but-within-tolerance windows span %v",
		info.tol, info.tol/info.granularity(), info.granularity(), info.tol-info.granularity())
	runPrepared(t, newHarness, sel, info)
}
