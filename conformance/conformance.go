// Package conformance is the exported conformance suite of durable: the
// definition of correct backend behaviour. Every backend, ours and third
// parties', runs the same scenarios with one line in its test file:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, newHarness) }
//
// where newHarness returns a [Harness] over fresh, empty storage. The suite
// exercises the backend only through the root *durable.Store, so it checks
// what users see: validation, error codes, compare-and-set, idempotency keys,
// leases with fencing tokens, tenant scopes, cleanup, and races between
// several clients on the same storage.
//
// Scenarios are grouped as Workflows/…, Keys/…, Leases/…, Scopes/…,
// Cleanup/… and Input/…; run one group or scenario with go test -run, for
// example -run 'TestConformance/Leases/StaleTokenIsRejectedAfterTakeover'.
//
// Scenarios that need time to pass (expiry, takeover, retention) call
// Harness.Advance and are skipped, with a message, when the harness does not
// declare Capabilities.Clock. Scenarios about the gap the clock tolerance
// opens are skipped when the tolerance is zero, and the restart scenario when
// Capabilities.Restart is false. Nothing is passed silently.
//
// The suite runs under -race, sleeps no more than a few milliseconds at a
// time, and keeps its races small (8–16 clients), so that it finishes in
// seconds on the memory backend and well under a minute on a database.
package conformance

import (
	"testing"
)

// Run runs every scenario of the suite as subtests of t. It calls newHarness
// once per scenario, so each one starts from empty storage.
func Run(t *testing.T, newHarness NewHarness) {
	t.Helper()
	if newHarness == nil {
		t.Fatal("conformance.Run: newHarness is nil")
	}
	groups := []struct {
		name      string
		scenarios []scenario
	}{
		{"Workflows", workflowScenarios()},
		{"Keys", keyScenarios()},
		{"Leases", leaseScenarios()},
		{"Scopes", scopeScenarios()},
		{"Cleanup", cleanupScenarios()},
		{"Input", inputScenarios()},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, sc := range g.scenarios {
				t.Run(sc.name, func(t *testing.T) {
					e := setup(t, newHarness)
					e.require(sc.needs)
					sc.run(t, e)
				})
			}
		})
	}
}
