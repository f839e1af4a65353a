package broken

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/conformance"
)

// envVariant names the variant a child process runs the suite against.
const envVariant = "DURABLE_CONFORMANCE_BROKEN_BACKEND"

// envWide, set to 1, makes the child run conformance.RunToleranceSensitive
// against the variant's NewWideHarness instead of the whole suite.
const envWide = "DURABLE_CONFORMANCE_BROKEN_WIDE"

// TestBrokenChild runs the conformance suite against the variant named by
// envVariant, in the child processes TestBrokenBackendsAreCaught starts.
// Run directly (no envVariant), it runs the suite against the unbroken
// control, so the wrapper machinery itself is checked in every run.
func TestBrokenChild(t *testing.T) {
	name := os.Getenv(envVariant)
	if name == "" {
		name = None
	}
	if os.Getenv(envWide) == "1" {
		newHarness, ok := NewWideHarness(name)
		if !ok {
			t.Fatalf("no variant %q (have %q and controls %q)", name, Names(), Controls())
		}
		conformance.RunToleranceSensitive(t, newHarness)
		return
	}
	newHarness, ok := NewHarness(name)
	if !ok {
		t.Fatalf("no variant %q (have %q and controls %q)", name, Names(), Controls())
	}
	conformance.Run(t, newHarness)
}

// caught is one broken variant and the scenarios (group/name) that must
// catch it. The child runs only those scenarios.
type caught struct {
	variant string
	catch   []string
}

// runPattern is the -test.run pattern, below TestBrokenChild, that runs
// exactly the given scenarios.
func runPattern(scenarios []string) string {
	var groups, names []string
	seen := map[string]bool{}
	for _, sc := range scenarios {
		g, n, _ := strings.Cut(sc, "/")
		if !seen[g] {
			seen[g] = true
			groups = append(groups, g)
		}
		names = append(names, n)
	}
	return "^(" + strings.Join(groups, "|") + ")$/^(" + strings.Join(names, "|") + ")$"
}

// The broken variants, each with the scenarios that must catch it.
var brokenCases = []caught{
	// Workflows and values.
	{"cas-ignores-revision", []string{"Workflows/UpdateWithStaleRevisionIsConflict", "Workflows/ConcurrentCompareAndSetHasOneWinner"}},
	{"conflict-without-details", []string{"Workflows/UpdateWithWrongStatusIsConflict", "Workflows/UpdateWithStaleRevisionIsConflict", "Backend/ErrorsAreContractErrors"}},
	{"snapshot-truncated", []string{"Values/LargeSnapshotsReadBackAsWritten"}},
	{"body-truncated", []string{"Values/LargeOutcomesReadBackAsWritten"}},
	{"ref-truncated", []string{"Values/LongestFingerprintAndRefReadBackAsWritten", "Values/LargeOutcomesReadBackAsWritten"}},
	{"fingerprint-truncated", []string{"Values/FingerprintsDifferingInTheLastByteConflict", "Values/LongestFingerprintAndRefReadBackAsWritten"}},
	{"header-names-canonicalized", []string{"Values/HeadersReadBackExactlyAsGiven"}},
	{"empty-header-values-kept-empty", []string{"Values/EmptyHeadersAndBodiesReadBackByTheNilRule"}},
	{"keeps-caller-snapshot", []string{"Values/CallerSlicesAreNotKept"}},
	{"returns-shared-snapshot", []string{"Values/ReturnedSlicesAreNotShared"}},
	{"keeps-caller-outcome", []string{"Values/CallerSlicesAreNotKept"}},
	{"returns-shared-outcome", []string{"Values/ReturnedSlicesAreNotShared"}},
	// Keys.
	{"stale-claim-token-completes", []string{"Keys/StaleTokenIsRejectedAfterReclaim", "Keys/CompletedKeyIsNeverOverwritten"}},
	{"claim-race", []string{"Keys/ConcurrentClaimsHaveOneWinner"}},
	{"reclaim-race", []string{"Keys/ConcurrentReclaimsHaveOneWinner"}},
	{"reclaim-overwrites-completion", []string{"Keys/LateCompletionRacingAReclaim"}},
	{"completed-key-ignores-workflow-id", []string{"Keys/OtherWorkflowIDOnCompletedKeyIsKeyConflict"}},
	{"abandoned-claim-ignores-workflow-id", []string{"Keys/OtherWorkflowIDOnAbandonedClaimIsKeyConflict"}},
	{"retention-counted-from-claim", []string{"Keys/RetentionCountsFromCompletion"}},
	{"retention-ends-early", []string{"Keys/CompletedKeyReplaysUntilItsExpiry"}},
	{"renew-key-from-old-expiry", []string{"Keys/RenewKeySetsLeaseUntilToNowPlusTTL"}},
	{"renew-never-shortens", []string{"Keys/RenewKeySetsLeaseUntilToNowPlusTTL", "Leases/RenewLeaseSetsExpiresAtToNowPlusTTL"}},
	{"ttl-whole-seconds", []string{"Keys/FractionalClaimTTLsAreKeptExactly", "Leases/FractionalLeaseTTLsAreKeptExactly"}},
	{"sequential-claim-tokens", []string{"Keys/ClaimTokensAreUnpredictable"}},
	{"short-claim-tokens", []string{"Keys/ClaimTokensAreUnpredictable"}},
	{"wait-never-wakes", []string{"Keys/WaitKeyReturnsTheCompletedRecord", "Keys/WaitKeyReturnsNotFoundWhenReleased"}},
	{"wait-wakes-one-waiter", []string{"Keys/SeveralWaitersAllWakeOnCompletion", "Keys/SeveralWaitersAllWakeOnRelease", "Cleanup/SeveralWaitersAllWakeOnCleanup"}},
	{"wait-not-woken-by-cleanup", []string{"Cleanup/SeveralWaitersAllWakeOnCleanup", "Cleanup/WaiterSeesACleanedUpClaimAsNotFound"}},
	// Caller tokens and tombstones.
	{"token-compared-case-insensitively", []string{"Tokens/TokensAreComparedByteForByte"}},
	{"reclaimed-claim-handed-back", []string{"Tokens/ReclaimedClaimIsNotHandedBackToTheOldToken"}},
	{"completed-key-handed-back-as-held", []string{"Tokens/CompletedKeyIsNotHandedBackAsHeld"}},
	{"tombstone-replays-payload", []string{"Tombstones/TombstoneOutlivesTheOutcome"}},
	{"tombstone-forgotten-at-expiry", []string{"Tombstones/TombstoneOutlivesTheOutcome"}},
	// Listing.
	{"list-cursor-inclusive", []string{"Listing/KeysArePagedInByteOrder", "Listing/LeasesArePagedInByteOrder", "Listing/KeysFilterByState"}},
	{"list-case-insensitive-order", []string{"Listing/KeysArePagedInByteOrder"}},
	{"list-held-ignored", []string{"Listing/HeldLeasesExcludeExpiredOnes"}},
	{"list-state-ignored", []string{"Listing/KeysFilterByState", "Listing/KeysPastRetentionAreNotListed"}},
	{"list-keys-past-retention", []string{"Listing/KeysPastRetentionAreNotListed"}},
	{"list-filters-one-batch", []string{"Listing/WorkflowsAreFoundPastAnyBatch", "Listing/KeysAreFoundPastAnyBatch", "Listing/HeldLeasesAreFoundPastAnyBatch"}},
	// Leases.
	{"no-clock-tolerance", []string{"Leases/NoTakeoverWithinTolerance"}},
	{"same-owner-reacquires", []string{"Leases/HeldLeaseIsBusyForTheSameOwner"}},
	{"renew-lease-from-old-expiry", []string{"Leases/RenewLeaseSetsExpiresAtToNowPlusTTL"}},
	{"takeover-race", []string{"Leases/ConcurrentTakeoversHaveOneWinner"}},
	{"lease-tokens-reset-on-release", []string{"Leases/TokensIncreaseAcrossRelease"}},
	{"self-takeover-keeps-token", []string{"Leases/TokensIncreaseForTheSameOwner"}},
	{"takeover-skips-high-water-mark", []string{"Leases/TokensIncreaseAcrossTakeoverAndCleanup"}},
	{"same-owner-reuses-token-after-release", []string{"Leases/TokensIncreaseForTheSameOwner"}},
	{"tokens-reset-on-restart", []string{"Leases/TokensIncreaseAcrossRestart", "Leases/TokensIncreaseForTheSameOwner"}},
	{"takeover-token-from-the-record", []string{"Leases/TokensIncreasePerResourceWhenGrantsInterleave", "Permits/ConcurrentTakeoversNeverExceedThePermits"}},
	{"cleanup-recomputes-token-counter", []string{"Leases/TokensIncreaseWhenCleanupDeletesARecordTakenOverSeveralTimes", "Permits/CleanupRemovesExpiredPermits"}},
	{"renew-leases-whole-batch-fails", []string{"Leases/RenewLeasesFencesOnlyTheLeasesNoLongerHeld", "Leases/RenewLeasesGivesDuplicatesTheSameOutcome"}},
	{"renew-leases-revives-expired", []string{"Leases/RenewLeasesFencesOnlyTheLeasesNoLongerHeld"}},
	{"renew-leases-ignores-scope", []string{"Leases/RenewLeasesStayInTheirScope", "Leases/RenewLeasesRenewsEveryHeldLease"}},
	{"renew-leases-drops-duplicates", []string{"Leases/RenewLeasesGivesDuplicatesTheSameOutcome", "Leases/RenewLeasesRejectsBadBatches"}},
	{"renewal-unbinds-fence", []string{"Leases/RenewalKeepsTheGrant", "Leases/RunnerKeepAliveKeepsTheGrant", "Leases/FractionalTTLsEndValidityOnTime"}},
	{"lease-ttl-rounded-up", []string{"Leases/FractionalTTLsEndValidityOnTime"}},
	// Fenced semaphores, lease values and lease watches (permits.go).
	{"permits-admit-extra", []string{
		"Permits/GrantsDistinctPermitsUpToTheLimit", "Permits/ConcurrentAcquiresNeverExceedThePermits", "Permits/ConcurrentTakeoversNeverExceedThePermits",
		"Permits/LowestFreePermitIsGrantedAfterARelease", "Permits/ExpiredPermitIsBusyWithinTheTolerance", "Permits/ExpiredPermitIsReclaimedPastTheTolerance",
		"Permits/TokensIncreaseAcrossRestart",
	}},
	{"permit-tokens-reused", []string{
		"Permits/TokensIncreaseAcrossPermitsAndThePlainLease", "Permits/GrantsDistinctPermitsUpToTheLimit", "Permits/LowestFreePermitIsGrantedAfterARelease",
		"Permits/FencesArePerHolder", "Permits/RenewAndReleaseArePerPermit", "Permits/CleanupRemovesExpiredPermits", "Permits/TokensIncreaseAcrossRestart",
	}},
	{"expired-permit-stuck", []string{"Permits/ExpiredPermitIsReclaimedPastTheTolerance", "Permits/ConcurrentTakeoversNeverExceedThePermits"}},
	{"lease-value-dropped-on-renew", []string{"LeaseValues/RenewalKeepsTheStoredValue", "LeaseValues/ValuesRoundTripByteForByte", "LeaseValues/PermitsCarryTheirValues"}},
	{"watch-misses-release", []string{
		"Watch/ReleaseSignals", "Watch/NeverMissesARelease", "Watch/GrantSignals", "Watch/PermitChangesSignalTheResource", "Watch/ChangesThroughAnotherClientSignal",
	}},
	{"watch-base-misses-permits", []string{"Watch/PermitChangesSignalTheResource", "Watch/ChangesThroughAnotherClientSignal"}},
	// Scopes.
	{"scope-leak", []string{"Scopes/WorkflowsAreIsolated", "Scopes/ScopedCallsDoNotSeeUnscopedRecords"}},
	{"scoped-reads-fall-back-to-unscoped", []string{"Scopes/ScopedCallsDoNotSeeUnscopedRecords"}},
	{"unscoped-lease-read-sees-scopes", []string{"Scopes/UnscopedCallsDoNotSeeScopedRecords"}},
	// Counting equals deleting; exact matches (exactmatch.go).
	{"count-cleanup-counts-live", []string{"Cleanup/CountAndMoreIgnoreLiveRecords", "Tombstones/TombstoneOutlivesTheOutcome"}},
	{"count-cleanup-counts-live-leases", []string{"Cleanup/CountAndMoreIgnoreLiveRecords"}},
	{"cleanup-more-while-claims-live", []string{"Cleanup/CountAndMoreIgnoreLiveRecords"}},
	{"expect-status-prefix", []string{"Workflows/StatusesAndIDsMatchExactly"}},
	{"status-filter-prefix", []string{"Workflows/StatusesAndIDsMatchExactly"}},
	{"get-key-prefix", []string{"Keys/KeysMatchExactly", "Keys/GetOfMissingKeyIsNotFound"}},
	{"get-lease-prefix", []string{"Leases/ResourcesMatchExactly", "Leases/GetOfMissingLeaseIsNotFound"}},
	{"release-key-prefix", []string{"Keys/KeysMatchExactly"}},
	{"renew-lease-prefix", []string{"Leases/ResourcesMatchExactly", "Permits/RenewAndReleaseArePerPermit"}},
	{"scope-prefix-reads", []string{"Scopes/ScopesMatchExactly"}},
	// Duties the Store hides, checked on the backend directly.
	{"errors-echo-input", []string{"Backend/ErrorsDoNotEchoInput"}},
	{"plain-errors", []string{"Backend/ErrorsAreContractErrors"}},
	{"close-does-not-wake-waiters", []string{"Backend/CloseWakesWaitKeyWithClosed"}},
	{"close-wakes-with-canceled", []string{"Backend/CloseWakesWaitKeyWithClosed"}},
	{"tolerance-not-reported", []string{"Keys/StaleTokenIsRejectedAfterReclaim", "Leases/StaleTokenIsRejectedAfterTakeover"}},
	{"tolerance-differs-per-client", []string{"Backend/EveryClientReportsTheSameTolerance"}},
	// Many writes at once through one client (racing.go): what a backend
	// that coalesces them could get wrong.
	{"racing-results-swapped", []string{
		"RacingWrites/UnconditionalUpdatesOfOneWorkflowAllApply", "RacingWrites/UpdatesOfDistinctWorkflowsAreEachTheirOwn",
		"RacingWrites/CompletionsOfDistinctKeysAreEachTheirOwn", "RacingWrites/RenewalsAreEachTheirOwn", "RacingWrites/ReleasesAreEachTheirOwn",
		"RacingWrites/ClaimsAreEachTheirOwn", "RacingWrites/MixedBurstsAreEachTheirOwn",
	}},
	{"racing-failure-spreads", []string{
		"RacingWrites/UpdatesOfOneWorkflowHaveOneWinnerPerRevision", "RacingWrites/UpdatesOfDistinctWorkflowsAreEachTheirOwn", "RacingWrites/CompletionsOfOneKeyHoldOnlyForItsToken",
		"RacingWrites/RenewalsAreEachTheirOwn", "RacingWrites/ReleasesAreEachTheirOwn", "RacingWrites/MixedBurstsAreEachTheirOwn",
	}},
	{"racing-cas-failure-succeeds", []string{
		"RacingWrites/UpdatesOfOneWorkflowHaveOneWinnerPerRevision", "RacingWrites/UpdatesOfDistinctWorkflowsAreEachTheirOwn",
		"RacingWrites/CompletionsOfOneKeyHoldOnlyForItsToken", "RacingWrites/RenewalsAreEachTheirOwn", "RacingWrites/ReleasesAreEachTheirOwn",
		"RacingWrites/MixedBurstsAreEachTheirOwn",
	}},
	// A tolerance reported but not used: right at the usual tolerance,
	// so only the wide run catches it (wideVariants).
	{"tolerance-fixed", []string{"Keys/NoReclaimWithinTolerance", "Leases/NoTakeoverWithinTolerance", "Cleanup/KeepsClaimsAndLeasesWithinTolerance"}},
}

// wideVariants are caught only by conformance.RunToleranceSensitive at a
// tolerance several times the usual one: their child runs that, and the
// whole suite at the usual tolerance must pass against them.
var wideVariants = map[string]bool{"tolerance-fixed": true}

// onlyTheirScenarios are the variants of the properties added for
// key-value backends (issue 33): the rest of the suite, without the
// scenarios that catch them, must pass against each — proof that those
// scenarios take a path no other one does.
var onlyTheirScenarios = []string{
	"renewal-unbinds-fence", "lease-ttl-rounded-up", "count-cleanup-counts-live-leases", "cleanup-more-while-claims-live",
	"list-filters-one-batch", "expect-status-prefix", "status-filter-prefix", "release-key-prefix", "renew-lease-prefix",
	"scope-prefix-reads", "reclaim-overwrites-completion", "tolerance-fixed",
	"takeover-token-from-the-record", "cleanup-recomputes-token-counter",
	// Issue 30: semaphores, lease values, watches.
	"permits-admit-extra", "permit-tokens-reused", "expired-permit-stuck", "lease-value-dropped-on-renew",
	"watch-misses-release", "watch-base-misses-permits",
	// Issue 31: many writes at once through one client (the rest of the
	// suite, without the RacingWrites group: see onlyTheirGroup). Swapped
	// results are also caught by Listing/KeysAreFoundPastAnyBatch, which
	// fills its keys through one client, 8 at a time.
	"racing-failure-spreads", "racing-cas-failure-succeeds",
}

// onlyTheirGroup names, for variants of onlyTheirScenarios, the group
// left out of their "only" run instead of their catching scenarios: the
// group's other scenarios may catch them too, only less surely.
var onlyTheirGroup = map[string]string{
	"racing-failure-spreads":      "RacingWrites",
	"racing-cas-failure-succeeds": "RacingWrites",
}

// passing is one control: a backend that gets nothing wrong and must pass
// every scenario it runs, skipping only those named.
type passing struct {
	variant string
	run     string
	skip    []string // scenarios that must be skipped, with a message
}

// listingScenarios are the scenarios of the optional RecordLister.
var listingScenarios = []string{
	"Listing/KeysArePagedInByteOrder", "Listing/KeysFilterByState", "Listing/KeysPastRetentionAreNotListed",
	"Listing/LeasesArePagedInByteOrder", "Listing/HeldLeasesExcludeExpiredOnes",
	"Listing/KeysAreFoundPastAnyBatch", "Listing/HeldLeasesAreFoundPastAnyBatch",
}

// txScenarios are the scenarios of the optional TxCompleter.
var txScenarios = []string{
	"Tx/CompletionCommitsWithTheTransaction", "Tx/RollbackLeavesTheClaimHeld", "Tx/CompletionWithStaleTokenIsFenced",
}

// watchScenarios are the scenarios of the optional LeaseWatcher.
var watchScenarios = []string{
	"Watch/ReleaseSignals", "Watch/GrantSignals", "Watch/DeleteRecordSignals", "Watch/CleanupSignals", "Watch/TakeoverSignals",
	"Watch/PermitChangesSignalTheResource", "Watch/ChangesThroughAnotherClientSignal", "Watch/WatchEndsWithItsContext", "Watch/NeverMissesARelease",
}

// withoutCapabilities are the scenarios a backend without any optional
// capability skips (the Permits scenarios run on the Store's fallback).
var withoutCapabilities = slices.Concat([]string{
	"Cleanup/CountMatchesWhatCleanupDeletes", "Cleanup/DeleteRecordRemovesOneRecordOfAnyState", "Backend/CloseWakesWaitKeyWithClosed",
	"Permits/DeleteRecordFreesOnePermit", "Permits/ListLeasesListsPermitsInByteOrder",
}, listingScenarios, txScenarios, watchScenarios)

var controlCases = []passing{
	{None, "", nil},
	{"ttl-whole-seconds-declared", "", nil},
	{"tokens-per-resource", "", nil},
	{"declines-capabilities", "(Keys|Tokens|Tombstones|Tx|Leases|LeaseValues|Permits|Watch|Cleanup|Listing|Backend|Scopes|RacingWrites)", withoutCapabilities},
	{"no-optional-capabilities", "(Keys|Tokens|Tombstones|Tx|Leases|LeaseValues|Permits|Watch|Cleanup|Listing|Backend|Scopes|RacingWrites)", withoutCapabilities},
	{"coalesces-correctly", "", nil},
}

// TestBrokenBackendsAreCaught runs the suite against each broken variant
// in a child process and asserts that the child fails in the scenarios
// that must catch the bug; and against each control, which must pass.
func TestBrokenBackendsAreCaught(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range brokenCases {
		if covered[c.variant] {
			t.Errorf("variant %q has two cases", c.variant)
		}
		covered[c.variant] = true
		t.Run(c.variant, func(t *testing.T) {
			t.Parallel()
			t.Logf("bug: %s", Doc(c.variant))
			out, err := runChild(t, c.variant, runPattern(c.catch), "", wideVariants[c.variant])
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed against a backend where %s (err %v); output:\n%s", Doc(c.variant), err, out)
			}
			for _, sc := range c.catch {
				if !strings.Contains(out, "--- FAIL: TestBrokenChild/"+sc+" ") {
					t.Errorf("scenario %s did not catch that %s; output:\n%s", sc, Doc(c.variant), out)
				}
			}
			if t.Failed() {
				return
			}
			t.Logf("caught by: %s", strings.Join(leaves(failLine, out), ", "))
		})
	}
	catchers := map[string][]string{}
	for _, c := range brokenCases {
		catchers[c.variant] = c.catch
	}
	for _, name := range onlyTheirScenarios {
		if catchers[name] == nil {
			t.Errorf("onlyTheirScenarios names %q, which has no case", name)
			continue
		}
		t.Run("only/"+name, func(t *testing.T) {
			t.Parallel()
			skip := ""
			if g, ok := onlyTheirGroup[name]; ok {
				skip = "^(" + g + ")$"
			} else if !wideVariants[name] {
				skip = runPattern(catchers[name])
			}
			out, err := runChild(t, name, "", skip, false)
			if err != nil || strings.Contains(out, "--- FAIL") {
				t.Fatalf("scenarios other than %q catch that %s (%v); each property's variant must be caught by its own scenarios alone; output:\n%s",
					catchers[name], Doc(name), err, out)
			}
			if passed := strings.Count(out, "--- PASS: TestBrokenChild/"); passed < 100 {
				t.Fatalf("only %d scenarios passed; output:\n%s", passed, out)
			}
		})
	}
	for _, c := range controlCases {
		covered[c.variant] = true
		t.Run("control/"+c.variant, func(t *testing.T) {
			t.Parallel()
			t.Logf("control: %s", Doc(c.variant))
			out, err := runChild(t, c.variant, c.run, "", false)
			if err != nil || strings.Contains(out, "--- FAIL") {
				t.Fatalf("the suite failed against a correct backend (%s): %v; output:\n%s", Doc(c.variant), err, out)
			}
			passed := strings.Count(out, "--- PASS: TestBrokenChild/")
			if min := map[bool]int{true: 120, false: 30}[c.run == ""]; !strings.Contains(out, "--- PASS: TestBrokenChild ") || passed < min {
				t.Fatalf("want the scenarios to pass (%d passed); output:\n%s", passed, out)
			}
			skipped := leaves(skipLine, out)
			want := map[string]bool{}
			for _, sc := range c.skip {
				want[sc] = true
				if !strings.Contains(out, "--- SKIP: TestBrokenChild/"+sc+" ") {
					t.Errorf("scenario %s was not skipped; output:\n%s", sc, out)
				}
			}
			for _, sc := range skipped {
				if !want[sc] {
					t.Errorf("scenario %s was skipped; output:\n%s", sc, out)
				}
			}
			if n := strings.Count(out, "SKIPPED, rule not checked"); n < len(c.skip) {
				t.Errorf("%d skip messages, want one per skipped scenario (%d)", n, len(c.skip))
			}
			t.Logf("%d scenarios passed, skipped: %q", passed, skipped)
		})
	}
	for _, name := range append(Names(), Controls()...) {
		if !covered[name] {
			t.Errorf("variant %q has no test case", name)
		}
	}
	if n := len(Names()); n < 30 {
		t.Errorf("%d broken variants, want at least 30", n)
	}
	t.Run("control/wide", func(t *testing.T) {
		t.Parallel()
		out, err := runChild(t, None, "", "", true)
		if err != nil || strings.Contains(out, "--- FAIL") || strings.Contains(out, "--- SKIP") {
			t.Fatalf("the tolerance-sensitive scenarios at a wide tolerance failed or skipped against a correct backend: %v; output:\n%s", err, out)
		}
		if passed := strings.Count(out, "--- PASS: TestBrokenChild/"); passed < 10 {
			t.Fatalf("only %d scenarios passed; output:\n%s", passed, out)
		}
	})
}

// runChild re-executes the test binary to run TestBrokenChild against the
// named variant, restricted to the subtests matching run and without
// those matching skip; wide runs the tolerance-sensitive scenarios at
// WideTolerance instead of the whole suite.
func runChild(t *testing.T, name, run, skip string, wide bool) (string, error) {
	t.Helper()
	pattern := "^TestBrokenChild$"
	if run != "" {
		pattern += "/" + run
	}
	args := []string{"-test.run=" + pattern, "-test.v", "-test.count=1", "-test.timeout=2m"}
	if skip != "" {
		args = append(args, "-test.skip=^TestBrokenChild$/"+skip)
	}
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), envVariant+"="+name)
	if wide {
		cmd.Env = append(cmd.Env, envWide+"=1")
	}
	out, err := cmd.CombinedOutput()
	t.Logf("child %q (-test.run=%s) took %v", name, pattern, time.Since(start).Round(time.Millisecond))
	if strings.Contains(string(out), "panic:") || strings.Contains(string(out), "DATA RACE") {
		t.Errorf("the child panicked or raced; output:\n%s", out)
	}
	return string(out), err
}

var (
	failLine = regexp.MustCompile(`--- FAIL: TestBrokenChild/(\S+/\S+) `)
	skipLine = regexp.MustCompile(`--- SKIP: TestBrokenChild/(\S+/\S+) `)
)

// leaves lists the scenarios (group/name) that match line in out.
func leaves(line *regexp.Regexp, out string) []string {
	var out2 []string
	for _, m := range line.FindAllStringSubmatch(out, -1) {
		out2 = append(out2, m[1])
	}
	return out2
}
