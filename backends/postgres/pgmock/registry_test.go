package pgmock_test

import (
	"slices"
	"testing"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/backends/postgres/internal/mockspec"
	"github.com/durable-go/durable/backends/postgres/pgmock"
	"github.com/durable-go/durable/contract"
)

// TestEveryStatementHasAHelper: every statement the backend registers is
// registered by some pgmock helper (the statement list comes from the
// backend, through the bridge), so a statement added to the backend
// without a helper fails here.
func TestEveryStatementHasAHelper(t *testing.T) {
	_, _, m := newMock(t, pgmock.Backend(postgres.Options{Schema: "svc", Migrate: postgres.MigrateVerify}))
	fence := &durable.Fence{Resource: "res", Owner: "o", Token: 7}
	lease := durable.Lease{Scope: "s", Resource: "res", Owner: "o", Token: 7}
	wf := durable.Workflow{Scope: "s", ID: "wf", Status: "running", Revision: 3}
	u := durable.Update{Scope: "s", ID: "wf", ExpectStatus: "running", ExpectRevision: 3, Status: "waiting"}

	m.ExpectOpen().Current()
	m.ExpectCreateWorkflow(wf).Created()
	m.ExpectGetWorkflow("s", "wf").Returns(wf)
	m.ExpectUpdateWorkflow(u).Applies(wf)
	m.ExpectUpdateWorkflow(u).Conflict(wf) // the snapshot shows no reason: a second read
	m.ExpectListWorkflows(durable.ListQuery{Scope: "s"}).Returns(wf)
	m.ExpectListWorkflows(durable.ListQuery{Scope: "s", Status: "running"}).Returns(wf)
	m.ExpectClaimKey(claim).New()
	m.ExpectCompleteKey(durable.Completion{KeyRef: ref1, Outcome: out1}).Stores()
	m.ExpectClaimKey(claim).Contended().Reclaimed() // the locked form: lock, then the write
	m.ExpectBeginTx()
	m.ExpectCompleteKeyTx(durable.Completion{KeyRef: ref1, Outcome: out1}).Stores()
	m.ExpectRenewKey(ref1, "", 0).Renewed()
	m.ExpectReleaseKey(ref1, "").Released()
	m.ExpectGetKey(ref1).NotFound()
	m.ExpectAcquireLease(durable.LeaseRequest{Scope: "s", Resource: "res", Owner: "o"}).Granted(7)
	m.ExpectAcquirePermit(durable.PermitRequest{Scope: "s", Resource: "sem", Owner: "o", Permits: 3}).Granted(2, 8)
	m.ExpectRenewLease(lease, 0).Renewed()
	m.ExpectRenewLeases([]durable.Lease{lease}, 0).Renewed()
	m.ExpectReleaseLease(lease).Released()
	m.ExpectReleaseLease(durable.Lease{Scope: "s", Resource: "sem#2", Owner: "o", Token: 8}).Released()
	m.ExpectGetLease("s", "res").Returns(lease)
	m.ExpectFenceTx("s", fence).Valid()
	m.ExpectCleanup(durable.CleanupRequest{}).Deletes(durable.CleanupResult{})
	m.ExpectCountCleanup(durable.CleanupRequest{}).Counts(durable.CleanupResult{})
	m.ExpectDeleteRecord(contract.KindKey, "s", "k").Deleted()
	m.ExpectListKeys(durable.KeyListQuery{Scope: "s"}).Returns(durable.KeyRecord{KeyRef: durable.KeyRef{Key: "k"}})
	m.ExpectListLeases(durable.LeaseListQuery{Scope: "s"}).Returns(lease)
	m.ExpectListLeases(durable.LeaseListQuery{Scope: "s", Held: true}).Returns(lease)

	sent := pgmock.SentNames(m)
	names := mockspec.Names()
	if len(names) == 0 {
		t.Fatal("the bridge lists no statement")
	}
	// Statements a *sql.DB of go-sqlmock never receives, with the reason.
	noHelper := map[string]string{
		"WaitKey": "WaitKey's read while a LISTEN connection is up: a go-sqlmock *sql.DB cannot LISTEN, so WaitKey polls GetKey there (ExpectGetKey)",
		"WatchLease": "WatchLease's mark, sent only while the backend can LISTEN, which a go-sqlmock *sql.DB cannot; " +
			"there WatchLease polls with LeaseState instead",
		"WatchPermits": "WatchLease's mark of a semaphore's permits: as WatchLease",
		"AcquireLeaseOnPermit": "AcquireLease of a permit's resource: the Store grants permits of this backend with " +
			"AcquirePermit (ExpectAcquirePermit), and Store.AcquireLease refuses a permit's name",
		"LeaseState": "WatchLease's polling read runs in a goroutine of its own until the watch's context ends, " +
			"at times of the backend's choosing, which a sequence of expectations cannot pin",
	}
	for n := range noHelper {
		if !slices.Contains(names, n) || sent[n] {
			t.Errorf("noHelper lists %s, which is not registered or has a helper: remove it", n)
		}
	}
	for _, n := range names {
		if _, ok := noHelper[n]; !ok && !sent[n] {
			t.Errorf("statement %s has no pgmock helper: add one (and its outcomes) for the operation that sends it", n)
		}
	}
	if !sent["SchemaObjects"] {
		t.Error("ExpectOpen did not register the schema's object list")
	}
}
