package broken

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/conformance"
)

// envBug names the variant a child process runs the suite against.
const envBug = "DURABLE_CONFORMANCE_BROKEN_BACKEND"

// TestBrokenChild runs the conformance suite against the variant named by
// envBug, in the child processes TestBrokenBackendsAreCaught starts. Run
// directly (no envBug), it runs the suite against the unbroken control, so
// the wrapper machinery itself is checked in every run.
func TestBrokenChild(t *testing.T) {
	name := os.Getenv(envBug)
	if name == "" {
		name = None
	}
	newHarness, ok := NewHarness(name)
	if !ok {
		t.Fatalf("no broken variant %q (have %q)", name, Names())
	}
	conformance.Run(t, newHarness)
}

// TestBrokenBackendsAreCaught runs the suite against each broken variant in
// a child process and asserts that the child fails, naming the scenarios
// that must catch the bug. The unbroken control must pass everything.
func TestBrokenBackendsAreCaught(t *testing.T) {
	cases := []struct {
		bug   string
		run   string   // the -test.run pattern below TestBrokenChild; "" runs everything
		catch []string // scenarios that must fail
	}{
		{"cas-ignores-revision", "Workflows", []string{
			"Workflows/UpdateWithStaleRevisionIsConflict",
			"Workflows/ConcurrentCompareAndSetHasOneWinner",
		}},
		{"conflict-without-details", "Workflows", []string{
			"Workflows/UpdateWithWrongStatusIsConflict",
			"Workflows/UpdateWithStaleRevisionIsConflict",
		}},
		{"lease-tokens-reset-on-release", "Leases", []string{
			"Leases/TokensIncreaseAcrossRelease",
		}},
		{"no-clock-tolerance", "Leases", []string{
			"Leases/NoTakeoverWithinTolerance",
		}},
		{"same-owner-reacquires", "Leases", []string{
			"Leases/HeldLeaseIsBusyForTheSameOwner",
		}},
		{"scope-leak", "Scopes", []string{
			"Scopes/WorkflowsAreIsolated",
		}},
		{"stale-claim-token-completes", "Keys", []string{
			"Keys/StaleTokenIsRejectedAfterReclaim",
			"Keys/CompletedKeyIsNeverOverwritten",
		}},
		// Each missed wake-up costs the suite's WaitKey guard (5 s), so
		// run only the two scenarios that must catch it.
		{"wait-never-wakes", "Keys/^WaitKeyReturns(TheCompletedRecord|NotFoundWhenReleased)$", []string{
			"Keys/WaitKeyReturnsTheCompletedRecord",
			"Keys/WaitKeyReturnsNotFoundWhenReleased",
		}},
		{"claim-race", "Keys", []string{
			"Keys/ConcurrentClaimsHaveOneWinner",
		}},
	}
	covered := map[string]bool{None: true}
	for _, c := range cases {
		covered[c.bug] = true
		t.Run(c.bug, func(t *testing.T) {
			t.Parallel()
			t.Logf("bug: %s", Doc(c.bug))
			out, err := runChild(t, c.bug, c.run)
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed against a backend where %s (err %v); output:\n%s", Doc(c.bug), err, out)
			}
			for _, sc := range c.catch {
				if !strings.Contains(out, "--- FAIL: TestBrokenChild/"+sc+" ") {
					t.Errorf("scenario %s did not catch that %s; output:\n%s", sc, Doc(c.bug), out)
				}
			}
			if t.Failed() {
				return
			}
			t.Logf("caught by: %s", strings.Join(failedLeaves(out), ", "))
		})
	}
	for _, name := range Names() {
		if !covered[name] {
			t.Errorf("broken variant %q has no test case", name)
		}
	}
	t.Run("Unbroken", func(t *testing.T) {
		t.Parallel()
		out, err := runChild(t, None, "")
		if err != nil {
			t.Fatalf("the suite failed against the plain memory backend: %v; output:\n%s", err, out)
		}
		passed := strings.Count(out, "--- PASS: TestBrokenChild/")
		if strings.Contains(out, "--- FAIL") || !strings.Contains(out, "--- PASS: TestBrokenChild ") || passed < 100 {
			t.Fatalf("want every scenario to pass (%d passed); output:\n%s", passed, out)
		}
		if n := strings.Count(out, "--- SKIP"); n > 0 {
			t.Errorf("%d scenarios skipped against the memory backend, which has every capability; output:\n%s", n, out)
		}
	})
}

// runChild re-executes the test binary to run TestBrokenChild against the
// named variant, restricted to the subtests matching run.
func runChild(t *testing.T, name, run string) (string, error) {
	t.Helper()
	pattern := "^TestBrokenChild$"
	if run != "" {
		pattern += "/" + run
	}
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run="+pattern, "-test.v", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), envBug+"="+name)
	out, err := cmd.CombinedOutput()
	t.Logf("child %q (-test.run=%s) took %v", name, pattern, time.Since(start).Round(time.Millisecond))
	if strings.Contains(string(out), "panic:") {
		t.Errorf("the child panicked; output:\n%s", out)
	}
	return string(out), err
}

var failLine = regexp.MustCompile(`--- FAIL: TestBrokenChild/(\S+/\S+) `)

// failedLeaves lists the scenarios (group/name) that failed in out.
func failedLeaves(out string) []string {
	var leaves []string
	for _, m := range failLine.FindAllStringSubmatch(out, -1) {
		leaves = append(leaves, m[1])
	}
	return leaves
}
