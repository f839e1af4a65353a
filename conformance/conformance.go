package conformance

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// group is one top-level subtest of Run: scenarios about one part of the
// contract.
type group struct {
	name      string
	scenarios []scenario
}

func groups() []group {
	return []group{
		{"Workflows", workflowScenarios()},
		{"Values", valueScenarios()},
		{"Keys", keyScenarios()},
		{"Tokens", tokenScenarios()},         // exactlyonce.go: caller-chosen claim tokens
		{"Tombstones", tombstoneScenarios()}, // exactlyonce.go: two-tier retention
		{"Tx", txScenarios()},                // exactlyonce.go: the optional TxCompleter
		{"Leases", append(append(leaseScenarios(), renewScenarios()...), validityScenarios()...)}, // renew.go: RenewLeases; batches.go: validity
		{"LeaseValues", leaseValueScenarios()},                                                    // leasevalues.go: values on leases
		{"Permits", permitScenarios()},                                                            // permits.go: fenced semaphores
		{"Watch", watchScenarios()},                                                               // watch.go: the optional LeaseWatcher
		{"Scopes", scopeScenarios()},
		{"Cleanup", cleanupScenarios()},
		{"Listing", append(listingScenarios(), batchListingScenarios()...)}, // batches.go: listing past any batch
		{"Backend", backendScenarios()},
		{"Input", inputScenarios()},
		{"RacingWrites", racingScenarios()}, // racing.go: many writes at once through one client
	}
}

// Run runs every scenario of the suite as subtests of t, grouped as
// Workflows/…, Values/…, Keys/…, Tokens/…, Tombstones/…, Tx/…, Leases/…,
// LeaseValues/…, Permits/…, Watch/…, Scopes/…, Cleanup/…, Listing/…,
// Backend/…, Input/… and RacingWrites/…. It calls newHarness once to learn what the backend and the
// harness can do (and logs it, with every scenario that will be skipped),
// then once per scenario, so each one starts from empty storage; scenarios
// within a group run in parallel. At the end it logs a summary of what was
// skipped and why.
func Run(t *testing.T, newHarness NewHarness) {
	t.Helper()
	if newHarness == nil {
		t.Fatal("conformance.Run: newHarness is nil")
	}
	all := groups()
	runPrepared(t, newHarness, all, preflight(t, newHarness, all))
}

// runPrepared runs the scenarios of the given groups as Run describes,
// after the preflight learned info.
func runPrepared(t *testing.T, newHarness NewHarness, all []group, info backendInfo) {
	t.Helper()
	sum := &summary{skipped: map[string]string{}}
	t.Cleanup(func() { sum.report(t) })
	for _, g := range all {
		t.Run(g.name, func(t *testing.T) {
			for _, sc := range g.scenarios {
				t.Run(sc.name, func(t *testing.T) {
					t.Parallel()
					name := g.name + "/" + sc.name
					e := &env{t: t, name: name, sum: sum}
					t.Cleanup(func() { sum.record(name, t) })
					e.require(sc.needs, info)
					e.setup(newHarness, info)
					sc.run(t, e)
				})
			}
		})
	}
}

// backendInfo is what the preflight learned about the backend and harness.
type backendInfo struct {
	caps       Capabilities
	tol        time.Duration
	reportsTol bool
	backend    string // the backend's type
	waiter     bool   // contract.KeyWaiter
	counter    bool   // contract.CleanupCounter
	deleter    bool   // contract.RecordDeleter
	lister     bool   // contract.RecordLister
	txer       bool   // contract.TxCompleter
	permits    bool   // contract.PermitAcquirer
	watcher    bool   // contract.LeaseWatcher
}

// preflight opens one harness and one client, and logs what the suite will
// and will not check.
func preflight(t *testing.T, newHarness NewHarness, all []group) backendInfo {
	t.Helper()
	ctx := t.Context()
	h, err := newHarness(ctx, t)
	if err != nil {
		t.Fatalf("conformance: creating the harness: %v", err)
	}
	if h == nil {
		t.Fatal("conformance: the harness factory returned a nil Harness and no error")
	}
	defer func() {
		if err := h.Close(); err != nil {
			t.Errorf("conformance: Harness.Close: %v", err)
		}
	}()
	b, err := h.Open(ctx)
	if err != nil {
		t.Fatalf("conformance: Harness.Open: %v", err)
	}
	if b == nil {
		t.Fatal("conformance: Harness.Open returned a nil Backend and no error")
	}
	defer func() {
		if err := b.Close(); err != nil {
			t.Errorf("conformance: closing the first client: %v", err)
		}
	}()
	info := backendInfo{caps: h.Capabilities(), backend: fmt.Sprintf("%T", b)}
	if r, ok := b.(contract.ToleranceReporter); ok {
		info.tol, info.reportsTol = r.ClockTolerance(), true
	}
	_, info.waiter = b.(contract.KeyWaiter)
	_, info.counter = b.(contract.CleanupCounter)
	_, info.deleter = b.(contract.RecordDeleter)
	_, info.lister = b.(contract.RecordLister)
	_, info.txer = b.(contract.TxCompleter)
	_, info.permits = b.(contract.PermitAcquirer)
	_, info.watcher = b.(contract.LeaseWatcher)
	if info.tol < 0 {
		t.Fatalf("conformance: the backend reports a negative clock tolerance %v", info.tol)
	}
	if info.caps.Granularity < 0 {
		t.Fatalf("conformance: Capabilities.Granularity = %v, must not be negative", info.caps.Granularity)
	}

	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "NO"
	}
	tolFrom := "reported by contract.ToleranceReporter"
	if !info.reportsTol {
		tolFrom = "the backend does not implement contract.ToleranceReporter, so the Store and the suite assume none"
	}
	t.Logf("conformance: backend %s; clock tolerance %v (%s); time granularity %v",
		info.backend, info.tol, tolFrom, info.granularity())
	t.Logf("conformance: harness: Clock %s, Restart %s; optional capabilities: KeyWaiter %s, CleanupCounter %s, RecordDeleter %s, RecordLister %s, TxCompleter %s, PermitAcquirer %s, LeaseWatcher %s",
		yes(info.caps.Clock), yes(info.caps.Restart), yes(info.waiter), yes(info.counter), yes(info.deleter), yes(info.lister), yes(info.txer), yes(info.permits), yes(info.watcher))
	if !info.permits {
		t.Logf("conformance: no contract.PermitAcquirer: the Permits scenarios run on the Store's fallback over AcquireLease")
	}
	if !info.watcher {
		t.Logf("conformance: no contract.LeaseWatcher: the Watch scenarios are skipped (waiting for a lease polls)")
	}
	if !info.txer {
		t.Logf("conformance: no contract.TxCompleter: the Tx scenarios are skipped (optional, for backends whose records live in a database the caller can write to)")
	}
	if !info.waiter {
		t.Logf("conformance: no contract.KeyWaiter: WaitKey scenarios run on the Store's polling fallback")
	}

	// The harness used to declare the tolerance too; the backend's report
	// is now the only one.
	if d, ok := h.(interface{ Tolerance() time.Duration }); ok {
		if got := d.Tolerance(); got != info.tol {
			t.Errorf("conformance: the harness's Tolerance() = %v, but the backend reports %v. The suite no longer reads Harness.Tolerance: "+
				"the backend's contract.ToleranceReporter is what the Store uses (its minimum TTL, the lease runner), so it is the one source. "+
				"Make the backend report the tolerance it judges expiry with, and delete Harness.Tolerance.", got, info.tol)
		} else {
			t.Logf("conformance: Harness.Tolerance() is no longer used (the backend's report is authoritative); it may be deleted")
		}
	}

	// Say loudly what will not be checked.
	lost := map[string][]string{}
	for _, g := range all {
		for _, sc := range g.scenarios {
			if why := info.missing(sc.needs); why != "" {
				lost[why] = append(lost[why], g.name+"/"+sc.name)
			}
		}
	}
	whys := make([]string, 0, len(lost))
	for why := range lost {
		whys = append(whys, why)
	}
	sort.Strings(whys)
	for _, why := range whys {
		t.Logf("conformance: WARNING: %d scenarios will be SKIPPED and their rules go UNCHECKED: %s:\n\t%s",
			len(lost[why]), why, strings.Join(lost[why], "\n\t"))
	}
	if !info.caps.Clock {
		t.Logf("conformance: WARNING: wire a contract.ManualClock (conformance.NewManualClock) into the backend and set Capabilities.Clock to check expiry, takeover, retention and renewal (see the package documentation)")
	}
	return info
}

// granularity is the precision time checks use: the declared one, or 1 µs.
func (i backendInfo) granularity() time.Duration {
	return max(i.caps.Granularity, time.Microsecond)
}

// missing says why a scenario that needs n cannot run, or "".
func (i backendInfo) missing(n need) string {
	switch {
	case n&needClock != 0 && !i.caps.Clock:
		return "the harness has no controllable clock (Capabilities.Clock is false), and these scenarios need time to pass"
	case n&needTolerance != 0 && i.tol <= 0:
		return "the backend reports no clock tolerance, so there is no gap between expiry and takeover to check"
	case n&needRestart != 0 && !i.caps.Restart:
		return "the harness cannot restart (Capabilities.Restart is false): storage does not survive closing every client"
	}
	return ""
}

// summary collects what each scenario did, for the log at the end of Run.
type summary struct {
	mu      sync.Mutex
	passed  int
	failed  []string
	skipped map[string]string // scenario → reason
}

func (s *summary) skip(name, why string) {
	s.mu.Lock()
	s.skipped[name] = why
	s.mu.Unlock()
}

func (s *summary) record(name string, t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case t.Failed():
		s.failed = append(s.failed, name)
	case t.Skipped():
		if _, ok := s.skipped[name]; !ok {
			s.skipped[name] = "skipped"
		}
	default:
		s.passed++
	}
}

func (s *summary) report(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("conformance: summary: %d scenarios passed, %d failed, %d skipped", s.passed, len(s.failed), len(s.skipped))
	if len(s.failed) > 0 {
		sort.Strings(s.failed)
		t.Logf("conformance: FAILED:\n\t%s", strings.Join(s.failed, "\n\t"))
	}
	if len(s.skipped) > 0 {
		names := make([]string, 0, len(s.skipped))
		for n := range s.skipped {
			names = append(names, n)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, n := range names {
			fmt.Fprintf(&b, "\n\t%s: %s", n, s.skipped[n])
		}
		t.Logf("conformance: SKIPPED, so these rules were NOT checked on this backend:%s", b.String())
	}
}

// storeOptions are the Store options every client of the suite uses:
// quick polling, so that a backend without KeyWaiter (or one that declines
// it) is not slow.
//
// Tombstones are off by default (a tombstone retention of 1 ns, so that
// ForgetAt = ExpiresAt): the scenarios about retention check when a key is
// forgotten with its outcome, and the Tombstones scenarios set
// Completion.Tombstone themselves.
func storeOptions() []durable.Option {
	return []durable.Option{
		durable.WithWaitPolling(time.Millisecond, 20*time.Millisecond),
		durable.WithTombstoneRetention(time.Nanosecond),
	}
}
