// Package conformance is the exported conformance suite of durable: the
// definition of correct backend behaviour, and the backend author's
// checklist. Every backend, ours and third parties', runs the same
// scenarios with one line in its test file:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, newHarness) }
//
// and a second line that runs the scenarios whose outcome turns on the
// clock tolerance again, with the backend configured with a tolerance
// several times its time granularity ([RunToleranceSensitive]):
//
//	func TestConformanceWideTolerance(t *testing.T) {
//		conformance.RunToleranceSensitive(t, newHarnessWithTolerance(5*time.Second))
//	}
//
// The suite exercises the backend through the root *durable.Store, so it
// checks what users see, and calls the backend directly (the Backend group)
// for the duties the Store would hide. It runs under -race, sleeps no more
// than a few milliseconds at a time, keeps its races small (8 clients;
// the RacingWrites group sends bursts of 32 or more writes through one
// client),
// and runs the scenarios of each group in parallel, each on storage of its
// own.
//
// # Wiring a harness
//
// A harness opens any number of clients on one storage and moves the store
// clock. Give the backend a contract.ManualClock (from [NewManualClock])
// wherever it reads the time (a database backend passes clock.Now() as a
// statement parameter, as in coalesce($1, now())); without it every
// scenario about expiry, takeover, retention and renewal is skipped, and
// the suite says so loudly. With the memory backend standing in for yours:
//
//	type harness struct {
//		clock   *contract.ManualClock
//		storage *memory.Storage
//	}
//
//	func newHarness(ctx context.Context, t *testing.T) (conformance.Harness, error) {
//		clock := conformance.NewManualClock()
//		return &harness{clock, memory.NewStorage(memory.Options{Clock: clock, Tolerance: time.Second})}, nil
//	}
//
//	func (h *harness) Open(ctx context.Context) (contract.Backend, error) { return h.storage.Backend(), nil }
//	func (h *harness) Advance(d time.Duration)                           { h.clock.Advance(d) }
//	func (h *harness) Capabilities() conformance.Capabilities {
//		return conformance.Capabilities{Clock: true, Restart: true}
//	}
//	func (h *harness) Close() error { return nil }
//
// The factory is called once per scenario and must return fresh, empty
// storage each time (a database backend creates a schema or database per
// harness and drops it in Close or t.Cleanup), because scenarios run in
// parallel and use the same ids. Capabilities says what the harness can do:
// Clock (Advance moves the clock of every client, which otherwise stands
// still), Restart (storage survives closing every client) and Granularity
// (the unit in which the backend keeps times, when coarser than a
// microsecond; time checks then accept an error below one unit).
//
// The clock tolerance is declared in one place: the backend's
// contract.ToleranceReporter. The Store reads it to set its minimum TTL
// and its lease runner's deadlines, so it is what users get; a second
// declaration in the harness could only disagree with it. A backend that
// judges expiry with a tolerance and does not report it fails the
// scenarios about takeover.
//
// # What the suite says
//
// Run logs, at the top, the backend's type, its tolerance, the harness's
// capabilities and the backend's optional capabilities, then a WARNING
// listing every scenario that will be skipped and why. Each skipped
// scenario says "SKIPPED, rule not checked on this backend" and why, and a
// summary at the end lists the scenarios passed, failed and skipped. Run
// with go test -v to read them. Run one group or scenario with -run, for
// example -run 'TestConformance/Leases/StaleTokenIsRejectedAfterTakeover'.
//
// # Optional capabilities
//
// A backend may implement the small interfaces of package contract
// (KeyWaiter, ToleranceReporter, CleanupCounter, RecordDeleter,
// RecordLister, LeaseRenewer, PermitAcquirer, LeaseWatcher, InProcess,
// TxCompleter).
// A decorator over a backend that lacks one declines it at run time by
// returning an error with Code Unimplemented, like
// database/sql/driver.ErrSkip: the Store then does what it does without
// the capability (WaitKey polls GetKey; CountCleanup, DeleteRecord,
// ListKeys and ListLeases report Unimplemented; RenewLeases calls
// RenewLease once per lease; AcquirePermit tries AcquireLease on each
// permit in turn; WatchLease reports Unimplemented; BeginTx, CompleteKeyTx
// and DoTx report Unimplemented). Scenarios of a missing or declined capability are
// skipped with a message; Keys/DeclinedWaitKeyFallsBackToPolling checks the
// fallback itself.
//
// # Checklist
//
// Each rule of the contract, and the scenarios that check it.
//
// Workflows. CreateWorkflow stores revision 1 with CreatedAt = UpdatedAt =
// the store clock, and an existing id is AlreadyExists:
// Workflows/CreateStartsAtRevisionOne, Workflows/CreateDefaultsStatusToPending,
// Workflows/CreateOfExistingIDIsAlreadyExists, Workflows/GetOfMissingIDIsNotFound.
// UpdateWorkflow is one compare-and-set that bumps the revision and
// UpdatedAt, failing with NotFound, Terminal, Fenced or Conflict (with
// Details) and changing nothing: Workflows/UpdateAppliesAndBumpsRevision,
// Workflows/UpdateTakesUpdatedAtFromTheStoreClock,
// Workflows/UpdateWithZeroRevisionMatchesAnyRevision,
// Workflows/UpdateOfMissingIDIsNotFound, Workflows/UpdateWithWrongStatusIsConflict,
// Workflows/UpdateWithStaleRevisionIsConflict,
// Workflows/UpdateOfTerminalToAnotherStatusIsTerminal,
// Workflows/UpdateOfTerminalWithSameStatusIsNoOp,
// Workflows/UpdateWithUnheldFenceIsFenced, Workflows/UpdateWithValidFenceApplies.
// Racing updates have one winner and lose no increment:
// Workflows/ConcurrentCompareAndSetHasOneWinner,
// Workflows/ConcurrentIncrementsAreNeverLost. ListWorkflows orders by ID in
// byte order, pages with After, filters by status:
// Workflows/ListOrdersByIDAndPages, Workflows/ListOrdersByBytes,
// Workflows/ListFiltersByStatus, Workflows/ListOfEmptyStorageIsEmpty.
//
// Values. What the caller wrote is what every read returns, byte for byte,
// at every size the Store allows (not merely what the write returned):
// Workflows/SnapshotRoundTripsByteForByte,
// Values/LargeSnapshotsReadBackAsWritten (100 KiB and 1 MiB),
// Values/LargeOutcomesReadBackAsWritten (bodies of 100 KiB and 1 MiB, a
// 1024-byte Ref, 60 KiB of headers),
// Values/LongestFingerprintAndRefReadBackAsWritten,
// Values/HeadersReadBackExactlyAsGiven (names are bytes: no
// canonicalization, case kept, value order and duplicates kept). Nil and
// empty follow one rule (see contract.Outcome): a header name with a nil
// or empty value list reads back, with a nil list; a nil Header reads back
// as nil, an empty one with no names; a zero-length Body with length zero:
// Values/EmptyHeadersAndBodiesReadBackByTheNilRule. A
// fingerprint is compared on all its bytes:
// Values/FingerprintsDifferingInTheLastByteConflict. Slices and maps passed
// in are the caller's once the call returns, and those returned are the
// caller's: Values/CallerSlicesAreNotKept, Values/ReturnedSlicesAreNotShared.
//
// Idempotency keys. A free key is claimed New with a fresh token and
// LeaseUntil = now + TTL; a live claim is InFlight; a completed key
// replays: Keys/ClaimOfFreeKeyIsNew, Keys/ClaimWithZeroTTLUsesTheStoreDefault,
// Keys/LiveClaimIsInFlight, Keys/CompletedKeyReplaysItsOutcome,
// Keys/GetOfMissingKeyIsNotFound. A key stays bound to its first request
// (fingerprint, and workflow id when one is named) while claimed, abandoned
// or completed: Keys/OtherFingerprintIsKeyConflict,
// Keys/OtherWorkflowIDIsKeyConflict, Keys/KeyStaysBoundAfterItsClaimExpires,
// Keys/OtherWorkflowIDOnCompletedKeyIsKeyConflict,
// Keys/OtherWorkflowIDOnAbandonedClaimIsKeyConflict. Completion holds only
// for the claim's token, is retried safely after a lost reply, and is never
// overwritten: Keys/CompletionRetryAfterLostReplyReturnsStoredRecord,
// Keys/CompletedKeyIsNeverOverwritten, Keys/CompletionWithInvalidFenceIsFenced,
// Keys/CompletionWithExpiredFenceIsFenced,
// Keys/UnclaimedKeyCannotBeCompletedRenewedOrReleased. An abandoned claim is
// reclaimed with a new token only past the tolerance, and the old token is
// stale: Keys/StaleTokenIsRejectedAfterReclaim, Keys/NoReclaimWithinTolerance.
// Release and renewal need the token; a renewal sets LeaseUntil to exactly
// now + ttl (longer or shorter than what was left, fractions of a second
// kept): Keys/ReleaseLetsARetryClaimAgain,
// Keys/ReleaseWithWrongTokenKeepsTheClaim,
// Keys/CompletedKeyCannotBeReleasedOrRenewed, Keys/RenewWithWrongTokenIsFenced,
// Keys/RenewExtendsTheClaim, Keys/RenewKeySetsLeaseUntilToNowPlusTTL,
// Keys/FractionalClaimTTLsAreKeptExactly. A completed key replays until
// ExpiresAt = CompletedAt + Retain (counted from the completion) and is
// absent after: Keys/CompletedKeyIsForgottenAfterRetention,
// Keys/CompletedKeyReplaysUntilItsExpiry, Keys/RetentionCountsFromCompletion.
// Racing claims, on a free key or an abandoned claim, have one winner:
// Keys/ConcurrentClaimsHaveOneWinner, Keys/ConcurrentReclaimsHaveOneWinner.
// Claim tokens are unpredictable: distinct, 16–128 bytes of printable
// ASCII (0x21–0x7e), with no position the same in all of them and no
// shared half between consecutive ones (use 16 or more random bytes, hex
// encoded): Keys/ClaimTokensAreUnpredictable. WaitKey returns the completed
// record, or NotFound once the claim is released or cleaned up, to every
// waiter, and ends with its context: Keys/WaitKeyReturnsTheCompletedRecord,
// Keys/WaitKeyReturnsNotFoundWhenReleased, Keys/WaitKeyOnCompletedKeyReturnsAtOnce,
// Keys/WaitKeyOnMissingKeyIsNotFound, Keys/WaitKeyEndsWithItsContext,
// Keys/WaitKeyOutlastsAnExpiredClaim, Keys/SeveralWaitersAllWakeOnCompletion,
// Keys/SeveralWaitersAllWakeOnRelease, Cleanup/SeveralWaitersAllWakeOnCleanup,
// Cleanup/WaiterSeesACleanedUpClaimAsNotFound,
// Keys/DeclinedWaitKeyFallsBackToPolling.
//
// Caller tokens (ClaimRequest.Token). A ClaimKey retried after a lost
// reply with the same key, request and token gets the caller's own claim
// back (ClaimNew, its token, LeaseUntil = now + TTL), and can complete it:
// Tokens/RetriedClaimWithItsTokenGetsItsClaimBack; so does one whose lease
// lapsed while nobody reclaimed it: Tokens/LapsedOwnClaimIsHandedBack.
// Only its own live (or lapsed but not reclaimed) claim: a claim reclaimed
// by another caller, or
// another token, is in flight, and a completed key replays:
// Tokens/ReclaimedClaimIsNotHandedBackToTheOldToken,
// Tokens/OtherTokenOnALiveClaimIsInFlight,
// Tokens/CompletedKeyIsNotHandedBackAsHeld. Tokens are compared byte for
// byte: Tokens/TokensAreComparedByteForByte.
//
// Tombstones (two-tier retention). A completion keeps its outcome until
// ExpiresAt = CompletedAt + Retain and the key bound to its request until
// ForgetAt = CompletedAt + max(Retain, Tombstone). In between, reads
// (GetKey, WaitKey, a retried CompleteKey) return the tombstone (State
// KeyExpired, Outcome with its Code alone, never the payload), ClaimKey of
// the same request is OutcomeExpired and of another KeyConflict, RenewKey
// is Fenced and ReleaseKey false; Cleanup drops the outcome (counted in
// Outcomes, once) and keeps the tombstone; past ForgetAt the key is free
// and Cleanup deletes the tombstone (Keys); CountCleanup counts the same:
// Tombstones/TombstoneOutlivesTheOutcome. A completion with Tombstone 0,
// made on the backend directly, is forgotten at ExpiresAt:
// Tombstones/CompletionWithoutTombstoneIsForgottenAtExpiry. Cleanup drops
// outcomes at most Limit at a time and says More until none is left (a
// storage that drops them itself reports nothing):
// Tombstones/CleanupDropsOutcomesWithinLimit. (The suite's
// Stores keep tombstones off, a tombstone retention of 1 ns, so the other
// retention scenarios check ForgetAt = ExpiresAt.)
//
// Transactional completion (the optional TxCompleter; skipped with a
// message without it). CompleteKeyTx in a transaction from BeginTx stores
// the outcome when the transaction commits: Tx/CompletionCommitsWithTheTransaction;
// a rollback leaves the claim held by its token, which can still complete
// it: Tx/RollbackLeavesTheClaimHeld; a stale token is Fenced:
// Tx/CompletionWithStaleTokenIsFenced.
//
// Leases and fencing. A grant gets a positive token for exactly its TTL;
// a held lease is LeaseBusy, even for its owner:
// Leases/AcquireGrantsATokenForTheTTL, Leases/AcquireWithZeroTTLUsesTheStoreDefault,
// Leases/HeldLeaseIsBusyForAnotherOwner, Leases/HeldLeaseIsBusyForTheSameOwner,
// Leases/GetOfMissingLeaseIsNotFound. Renewal keeps the token and sets
// ExpiresAt to exactly now + ttl, only for the holder of a lease that is
// still valid: Leases/RenewKeepsTheTokenAndMovesExpiry,
// Leases/RenewedLeaseOutlivesItsFirstTTL, Leases/RenewLeaseSetsExpiresAtToNowPlusTTL,
// Leases/FractionalLeaseTTLsAreKeptExactly,
// Leases/WrongTokenOrOwnerCannotRenewOrRelease,
// Leases/ExpiredLeaseCannotBeRenewedOrFence. A fence is valid only for the
// current grant, checked with the write: Leases/FencedWriteNeedsTheCurrentGrant,
// Leases/StaleTokenIsRejectedAfterTakeover. The tolerance leaves a gap in
// which neither side writes: Leases/ToleranceGapLetsNeitherSideWrite,
// Leases/NoTakeoverWithinTolerance. Tokens strictly increase on every path
// (release, takeover, an owner taking back its own lease, cleanup,
// restart): Leases/TokensIncreaseAcrossRelease,
// Leases/TokensIncreaseAcrossCleanup, Leases/TokensIncreaseAcrossRestart,
// Leases/TokensIncreaseForTheSameOwner,
// Leases/TokensIncreaseAcrossTakeoverAndCleanup. Racing acquires, on a free
// or an expired lease, have one winner: Leases/ConcurrentAcquiresHaveOneWinner,
// Leases/ConcurrentTakeoversHaveOneWinner. A batched renewal
// (Store.RenewLeases: the optional LeaseRenewer, or the Store's fallback of
// one RenewLease per lease) gives each lease the outcome RenewLease would,
// on its own: renewed to exactly now + ttl with its token, or Fenced for
// that lease alone when it was released, taken over, expired or within the
// tolerance of expiry, or named with another owner, token or scope; an
// empty batch is empty, a duplicate gets the same outcome, and a batch
// over MaxRenewBatch or with one bad lease is InvalidArgument:
// Leases/RenewLeasesRenewsEveryHeldLease,
// Leases/RenewLeasesFencesOnlyTheLeasesNoLongerHeld,
// Leases/RenewLeasesOfAnEmptyBatchIsEmpty,
// Leases/RenewLeasesGivesDuplicatesTheSameOutcome,
// Leases/RenewLeasesStayInTheirScope, Leases/RenewLeasesRejectsBadBatches.
//
// Tokens per resource when grants interleave. A grant's token exceeds
// every earlier token of its resource also when grants on several
// resources interleave: after takeovers by expiry and after releases on
// some resources and a takeover of the oldest grant on another, a new
// grant after a release or after Cleanup on a resource that held higher
// tokens: Leases/TokensIncreasePerResourceWhenGrantsInterleave; and after
// Cleanup deletes the record of a resource taken over several times while
// an older grant elsewhere is still held:
// Leases/TokensIncreaseWhenCleanupDeletesARecordTakenOverSeveralTimes.
// Only tokens of one resource are compared: the same token may appear on
// another resource.
//
// Renewal and late completion. A renewal (RenewLease, RenewLeases) keeps
// everything about the grant: after it, and past the end of the first
// grant, a fenced UpdateWorkflow, a fenced CompleteKey and (with the
// optional TxCompleter) a fenced CompleteKeyTx with the lease's fence
// still apply, GetLease and ListLeases report the same token, and a later
// takeover gets a greater one: Leases/RenewalKeepsTheGrant. The same holds
// under RunWithLease, whose keep-alive renews in the background while the
// clock moves past the first grant's end; after the runner releases the
// lease a takeover gets a greater token:
// Leases/RunnerKeepAliveKeepsTheGrant. (Backend-specific
// fence checks in the caller's transaction, such as PostgreSQL's FenceTx,
// are not reachable through the contract; their backends test them.) The
// old holder's late CompleteKey and another client's ClaimKey, racing on a
// claim expired beyond the tolerance, have exactly one winner each round,
// and a completed record is never turned back into a claim:
// Keys/LateCompletionRacingAReclaim.
//
// Values on leases. A grant stores LeaseRequest.Value (any bytes, up to
// contract.MaxLeaseValueBytes: empty, NUL bytes, invalid UTF-8, exactly
// 1024 bytes) and AcquireLease, GetLease, RenewLease, RenewLeases and
// ListLeases return it byte for byte: LeaseValues/ValuesRoundTripByteForByte.
// A renewal keeps the stored value whatever Value the Lease passed in
// carries, and a release ignores it: LeaseValues/RenewalKeepsTheStoredValue.
// A new grant, after a release or a takeover, stores its own value, the
// empty one included: LeaseValues/NewGrantStoresItsOwnValue. Permits carry
// their holders' values the same way: LeaseValues/PermitsCarryTheirValues.
// The Store rejects a value of 1025 bytes with InvalidArgument:
// LeaseValues/OversizeValueIsInvalidArgument.
//
// Fenced semaphores (Store.AcquirePermit: the optional PermitAcquirer, or
// the Store's fallback of AcquireLease on each permit in turn). Permit n
// of resource R is the lease on "R#n" (contract.PermitResource). N permits
// go to N holders, each the lowest free one, for exactly the TTL, and the
// next request is LeaseBusy: Permits/GrantsDistinctPermitsUpToTheLimit.
// The tokens of R and all its permits form one strictly increasing
// sequence, across permits and a plain lease on R in either order:
// Permits/TokensIncreaseAcrossPermitsAndThePlainLease. A released permit
// is the lowest free one again, with a greater token:
// Permits/LowestFreePermitIsGrantedAfterARelease. Each permit expires on
// its own, with the lease's tolerance rules: busy and not renewable within
// the tolerance past expiry, Permits/ExpiredPermitIsBusyWithinTheTolerance;
// granted again past it, the old holder then Fenced on renewal and on a
// fenced write, Permits/ExpiredPermitIsReclaimedPastTheTolerance. Fences
// are per holder (UpdateWorkflow, CompleteKey), and a fence mixing two
// holders' resources, owners or tokens is Fenced:
// Permits/FencesArePerHolder. Renewal and release are per permit, and
// another permit's token or owner neither renews nor releases:
// Permits/RenewAndReleaseArePerPermit. Racing clients never hold more than
// N permits, nor one permit twice, on free or expired permits:
// Permits/ConcurrentAcquiresNeverExceedThePermits,
// Permits/ConcurrentTakeoversNeverExceedThePermits. DeleteRecord of
// "R#2" frees that permit alone (where the backend has RecordDeleter):
// Permits/DeleteRecordFreesOnePermit. Cleanup deletes expired permits and
// tokens keep increasing after it: Permits/CleanupRemovesExpiredPermits.
// ListLeases lists permits among plain leases in byte order, and a
// permit's name works as the cursor (where the backend has RecordLister):
// Permits/ListLeasesListsPermitsInByteOrder. Permit tokens keep increasing
// across a restart: Permits/TokensIncreaseAcrossRestart.
//
// Watching leases (Store.WatchLease, the optional LeaseWatcher; skipped,
// with a message naming the capability, without it). After WatchLease
// returns, a signal comes for a release, Watch/ReleaseSignals; a grant,
// Watch/GrantSignals; DeleteRecord, Watch/DeleteRecordSignals; Cleanup of
// an expired lease, Watch/CleanupSignals; a takeover,
// Watch/TakeoverSignals; a grant, release or deletion of a permit "R#n",
// to a watch on "R" (and on "R#n"), Watch/PermitChangesSignalTheResource;
// and for changes made through other clients of the same storage,
// Watch/ChangesThroughAnotherClientSignal. A watch whose context ended is
// dropped: later changes neither fail nor close its channel, and other
// watches still work: Watch/WatchEndsWithItsContext. A release that began
// after WatchLease returned is never missed, round after round of the two
// racing: Watch/NeverMissesARelease. Signals may be spurious, so no
// scenario asserts that none came; each waits up to 10 s for the one that
// must.
//
// Scopes. No call in one scope sees or changes another scope's records,
// the unscoped namespace included, in both directions:
// Scopes/WorkflowsAreIsolated, Scopes/ListSeesOnlyItsScope,
// Scopes/KeysAreIsolated, Scopes/LeasesAreIsolated,
// Scopes/FenceFromAnotherScopeIsNotValid, Scopes/WaitKeyStaysInItsScope,
// Scopes/CleanupStaysInItsScope, Scopes/ScopedCallsDoNotSeeUnscopedRecords,
// Scopes/UnscopedCallsDoNotSeeScopedRecords.
//
// Cleanup. Cleanup deletes only old terminal workflows, expired keys, and
// claims and leases expired beyond the tolerance, each bounded by Limit,
// with More: Cleanup/KeepsLiveRecords, Cleanup/DeletesOnlyOldTerminalWorkflows,
// Cleanup/DeletesOnlyExpiredKeys, Cleanup/DeletesOnlyExpiredLeases,
// Cleanup/KeepsClaimsAndLeasesWithinTolerance,
// Cleanup/LimitBoundsEachKindAndMoreReportsTheRest. The optional
// capabilities: Cleanup/CountMatchesWhatCleanupDeletes,
// Cleanup/DeleteRecordRemovesOneRecordOfAnyState.
//
// Counting equals deleting, and names match exactly. With live claims,
// live leases, kept completions and young terminal workflows present,
// CountCleanup counts only what Cleanup deletes, and Cleanup's More turns
// false once only live records remain (the count is checked where the
// backend has CleanupCounter): Cleanup/CountAndMoreIgnoreLiveRecords.
// Statuses, ids, keys, resources and scopes that are prefixes of one
// another (run/running, k/k1, a/ab) never match each other in
// ExpectStatus, status filters, reads, claims, completions, releases,
// fences, listings (where the backend has RecordLister) or cleanup:
// Workflows/StatusesAndIDsMatchExactly, Keys/KeysMatchExactly,
// Leases/ResourcesMatchExactly, Scopes/ScopesMatchExactly.
//
// Listing (the optional RecordLister, for operators). Keys and leases are
// listed a page at a time, each once, in byte order of key or resource,
// with the keyset cursor After, in their scope only, equal to what GetKey
// and GetLease return: Listing/KeysArePagedInByteOrder,
// Listing/LeasesArePagedInByteOrder. The state filter selects claimed or
// completed keys: Listing/KeysFilterByState. A completed key past its
// retention is not listed, an abandoned claim is:
// Listing/KeysPastRetentionAreNotListed. Released leases are never listed,
// and Held lists only leases that have not expired:
// Listing/HeldLeasesExcludeExpiredOnes.
//
// Batches and granularity. A filtered listing finds records that match
// after hundreds that do not (more than any internal batch a backend may
// read), all of them, in order, within the operation timeout:
// Listing/WorkflowsAreFoundPastAnyBatch, Listing/KeysAreFoundPastAnyBatch,
// Listing/HeldLeasesAreFoundPastAnyBatch. (They write several hundred
// records each: about 0.2–0.3 s apiece on memory, SQLite and PostgreSQL,
// 1–4 s on a three-member etcd cluster, whose whole suite takes about
// 30 s.) A lease of a fractional TTL
// (acquired, renewed, renewed in a batch) validates no fenced write or
// renewal once less than the tolerance is left: a backend may end validity
// up to one granularity early, never late:
// Leases/FractionalTTLsEndValidityOnTime.
//
// The backend itself. Close wakes the client's waiting WaitKey calls with
// Closed, and only that client's: Backend/CloseWakesWaitKeyWithClosed.
// Errors are *contract.Error with the right code (Conflict with Details),
// and a WaitKey that ends with its context says so through errors.Is:
// Backend/ErrorsAreContractErrors. No error message echoes an id, key,
// scope, resource, owner, fingerprint, token or payload:
// Backend/ErrorsDoNotEchoInput, Input/InvalidArgumentDoesNotEchoInput. Every
// client of one storage reports the same tolerance:
// Backend/EveryClientReportsTheSameTolerance.
//
// Racing writes through one client. Many writes sent at once through ONE
// backend instance (as a backend that coalesces concurrent writes into
// one statement or transaction receives them) each get exactly the result
// they would have got alone: their own record, their own conditional
// failure, never a neighbour's. Bursts of 32 goroutines, several rounds:
// compare-and-sets of one workflow from one revision have one winner,
// whose result is what is stored, and every loser is Conflict with the
// Details of the winner's revision:
// RacingWrites/UpdatesOfOneWorkflowHaveOneWinnerPerRevision; updates of
// one workflow with ExpectRevision 0 all apply, each to its own revision,
// none lost: RacingWrites/UnconditionalUpdatesOfOneWorkflowAllApply;
// updates of distinct workflows apply beside neighbours failing on their
// own condition (a revision from the future, the wrong status, a stale
// fence), each with its own error and record:
// RacingWrites/UpdatesOfDistinctWorkflowsAreEachTheirOwn. Completions of
// distinct keys each store and return their own outcome and retention:
// RacingWrites/CompletionsOfDistinctKeysAreEachTheirOwn; completions of
// one key with its claim's token (several outcomes, and one outcome sent
// several times, as retries) all return the one stored record, while
// those with a released claim's token, another key's live token or a
// token never issued are Fenced and the other key's claim is untouched:
// RacingWrites/CompletionsOfOneKeyHoldOnlyForItsToken. Renewals of
// distinct leases and claims set each one's own now + TTL, while renewals
// of a grant or claim released and granted again (and, with the
// harness's clock, taken over) are Fenced beside the new holder's:
// RacingWrites/RenewalsAreEachTheirOwn. Releases each return their own
// truth: the same grant or token released twice at once is true exactly
// once, a released one is false and leaves the new holder in place, and a
// freed lease or key is granted again with a greater lease token or a
// claim token never issued: RacingWrites/ReleasesAreEachTheirOwn. Claims
// of distinct keys are each new with their own record and TTL, claims of
// one key have one winner and show the others its claim, a claim with
// another fingerprint is KeyConflict, a completed key replays, and one
// caller token sent twice gets its claim both times:
// RacingWrites/ClaimsAreEachTheirOwn. All of these at once, mixed in one
// burst, with the same names in two scopes (a batch must not confuse
// records that differ only in scope):
// RacingWrites/MixedBurstsAreEachTheirOwn.
//
// What the Store does for every backend (a backend need not, but the suite
// checks that nothing in between undoes it): Input/RejectsBadWorkflowIDs,
// Input/RejectsBadKeysAndFingerprints, Input/RejectsBadOwnersAndResources,
// Input/RejectsBadScopes, Input/RejectsBadStatuses, Input/RejectsOutOfRangeTTLs,
// Input/RejectsOversizeSnapshot, Input/RejectsOversizeOutcomeBody,
// Input/RejectsNegativeExpectRevision, Input/RejectsBadLimits,
// Input/AcceptsLongestNames, Input/AcceptsBoundaryTTLs,
// Input/AcceptsSnapshotAtTheLimit, Input/ClosedStoreReturnsClosed,
// Input/ClosingOneClientLeavesOthersWorking, Input/CanceledContextIsVisible,
// Input/ExpiredDeadlineIsVisible.
package conformance
