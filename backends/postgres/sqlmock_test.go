package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/claimrule"
	"github.com/lib/pq"
)

// These tests pin, with go-sqlmock and its exact (QueryMatcherEqual)
// matcher, the statement and the argument list of every operation on the
// database/sql path, and the mapping of injected driver errors to contract
// codes. The expected SQL comes from the statement definitions
// (newStatements), never from a copy; the arguments are written out
// literally. Each mocked statement is one expectation, in order, so an
// operation that sent a second statement (or re-sent one) would fail on an
// unexpected call. Each test ends with ExpectationsWereMet, and
// TestSQLMockPinsEveryStatement checks that it pinned every registered
// statement.

// mockNow is the injected clock. Its nanoseconds show that times reach the
// driver cut to the microsecond.
var (
	mockNow     = time.Date(2031, 1, 2, 3, 4, 5, 678901234, time.UTC)
	mockNowArg  = time.Date(2031, 1, 2, 3, 4, 5, 678901000, time.UTC)
	mockCreated = time.Date(2031, 1, 2, 3, 0, 0, 0, time.UTC)
)

const mockSchema = "durable_mock"

// newMock returns a backend on a go-sqlmock *sql.DB, with migrate=off
// unless opts says otherwise, and the builder's statements for its schema.
func newMock(t *testing.T, opts Options) (*Backend, sqlmock.Sqlmock, *sql.DB, *statements) {
	t.Helper()
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if opts.Schema == "" {
		opts.Schema = mockSchema
	}
	if opts.Migrate == MigrateAuto {
		opts.Migrate = MigrateOff
	}
	opts.Clock = contract.ClockFunc(func() time.Time { return mockNow })
	b, err := NewBackend(context.Background(), db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b, mock, db, newStatements(opts.Schema)
}

func expectationsMet(t *testing.T, mock sqlmock.Sqlmock) {
	t.Helper()
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Error(err)
	}
}

// tokenArg matches a claim token: 32 hex digits (it is random).
type tokenArg struct{ seen *string }

func (a tokenArg) Match(v driver.Value) bool {
	s, ok := v.(string)
	if _, err := hex.DecodeString(s); !ok || err != nil || len(s) != 32 {
		return false
	}
	if a.seen != nil {
		*a.seen = s
	}
	return true
}

// sameArg matches the token a tokenArg saw.
type sameArg struct{ seen *string }

func (a sameArg) Match(v driver.Value) bool {
	s, ok := v.(string)
	return ok && s != "" && s == *a.seen
}

// stmt is any query: every *query[P, R] has def.
type stmt interface{ def() *statement }

func (s *statement) def() *statement { return s }

// pins makes the expectations of TestSQLMockPinsEveryStatement and records
// which statements they pinned.
type pins struct {
	mock sqlmock.Sqlmock
	st   *statements
	seen map[*statement]bool
}

// expect expects q's statement, with exactly args (none: no arguments).
func (p *pins) expect(q stmt, args ...driver.Value) *sqlmock.ExpectedQuery {
	s := q.def()
	p.seen[s] = true
	e := p.mock.ExpectQuery(s.sql(p.st))
	if len(args) == 0 {
		return e.WithoutArgs()
	}
	return e.WithArgs(args...)
}

// checkEveryStatement fails t for every registered statement that no
// expectation pinned.
func (p *pins) checkEveryStatement(t *testing.T) {
	t.Helper()
	if len(registry) == 0 {
		t.Fatal("no statement is registered")
	}
	for _, s := range registry {
		if !p.seen[s] {
			t.Errorf("statement %s is not pinned: add a subtest to TestSQLMockPinsEveryStatement that runs its operation against pin.expect(q%s, …)", s.name, s.name)
		}
	}
}

func cols(prefix []string, rest []string) []string {
	return append(append([]string(nil), prefix...), rest...)
}

func TestSQLMockPinsEveryStatement(t *testing.T) {
	b, mock, db, st := newMock(t, Options{})
	pin := &pins{mock: mock, st: st, seen: map[*statement]bool{}}
	ctx := context.Background()
	const scope = contract.Scope("tenant-1")
	channel := channelName(mockSchema)
	hour := time.Hour

	t.Run("CreateWorkflow", func(t *testing.T) {
		pin.expect(qCreateWorkflow, mockNowArg, "tenant-1", "wf-1", "req-1", "running", []byte("snap")).
			WillReturnRows(sqlmock.NewRows([]string{"created_at"}).AddRow(mockCreated))
		w, err := b.CreateWorkflow(ctx, contract.Workflow{Scope: scope, ID: "wf-1", RequestID: "req-1", Status: "running", Snapshot: []byte("snap")})
		if err != nil || w.Revision != 1 || !w.CreatedAt.Equal(mockCreated) || string(w.Snapshot) != "snap" {
			t.Errorf("CreateWorkflow = %+v, %v", w, err)
		}
		// A nil snapshot is NULL, not an empty bytea.
		pin.expect(qCreateWorkflow, mockNowArg, "tenant-1", "wf-1", "", "running", nil).
			WillReturnRows(sqlmock.NewRows([]string{"created_at"}))
		_, err = b.CreateWorkflow(ctx, contract.Workflow{Scope: scope, ID: "wf-1", Status: "running"})
		checkCode(t, err, contract.AlreadyExists)
	})

	t.Run("GetWorkflow", func(t *testing.T) {
		pin.expect(qGetWorkflow, "tenant-1", "wf-1").
			WillReturnRows(sqlmock.NewRows(workflowColumns).AddRow("tenant-1", "wf-1", "req-1", "running", int64(3), []byte{0, 1, 2}, mockCreated, mockCreated))
		w, err := b.GetWorkflow(ctx, scope, "wf-1")
		if err != nil || w.Revision != 3 || string(w.Snapshot) != "\x00\x01\x02" || w.Status != "running" {
			t.Errorf("GetWorkflow = %+v, %v", w, err)
		}
		pin.expect(qGetWorkflow, "tenant-1", "nope").WillReturnRows(sqlmock.NewRows(workflowColumns))
		_, err = b.GetWorkflow(ctx, scope, "nope")
		checkCode(t, err, contract.NotFound)
	})

	t.Run("UpdateWorkflow", func(t *testing.T) {
		pin.expect(qUpdateWorkflow, mockNowArg, 1.0, "tenant-1", "wf-1", "running", int64(3), nil, nil, nil, "succeeded", "req-2", []byte("s2")).
			WillReturnRows(sqlmock.NewRows(cols([]string{"applied", "fence_ok"}, workflowColumns)).
				AddRow(true, true, "tenant-1", "wf-1", "req-2", "succeeded", int64(4), []byte("s2"), mockCreated, mockNow))
		w, err := b.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: "wf-1", ExpectStatus: "running", ExpectRevision: 3,
			Status: "succeeded", RequestID: "req-2", Snapshot: []byte("s2")})
		if err != nil || w.Revision != 4 || w.Status != "succeeded" {
			t.Errorf("UpdateWorkflow = %+v, %v", w, err)
		}
	})

	t.Run("UpdateWorkflowReadsOnceMoreWhenItsSnapshotShowsNoReason", func(t *testing.T) {
		fence := &contract.Fence{Resource: "res-1", Owner: "owner-1", Token: 7}
		// Not applied, yet the snapshot's record matches: read again.
		pin.expect(qUpdateWorkflow, mockNowArg, 1.0, "tenant-1", "wf-2", "running", int64(5), "res-1", "owner-1", int64(7), "running", "", nil).
			WillReturnRows(sqlmock.NewRows(cols([]string{"applied", "fence_ok"}, workflowColumns)).
				AddRow(false, true, "tenant-1", "wf-2", "", "running", int64(5), nil, mockCreated, mockCreated))
		pin.expect(qWhyWorkflow, mockNowArg, 1.0, "tenant-1", "wf-2", "res-1", "owner-1", int64(7)).
			WillReturnRows(sqlmock.NewRows(cols([]string{"applied", "fence_ok"}, workflowColumns)).
				AddRow(false, true, "tenant-1", "wf-2", "", "running", int64(6), nil, mockCreated, mockNow))
		_, err := b.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: "wf-2", ExpectStatus: "running", ExpectRevision: 5,
			Status: "running", Fence: fence})
		checkCode(t, err, contract.Conflict)
		var ce *contract.Error
		if !errors.As(err, &ce) || ce.Details == nil || ce.Details.ActualRevision != 6 {
			t.Errorf("conflict details = %+v", ce)
		}
	})

	t.Run("ListWorkflows", func(t *testing.T) {
		pin.expect(qListWorkflows, "tenant-1", "", 10).
			WillReturnRows(sqlmock.NewRows(workflowColumns).
				AddRow("tenant-1", "a", "", "running", int64(1), nil, mockCreated, mockCreated).
				AddRow("tenant-1", "b", "", "failed", int64(2), []byte("x"), mockCreated, mockCreated))
		ws, err := b.ListWorkflows(ctx, contract.ListQuery{Scope: scope, Limit: 10})
		if err != nil || len(ws) != 2 || ws[0].ID != "a" || ws[1].ID != "b" || ws[0].Snapshot != nil {
			t.Errorf("ListWorkflows = %+v, %v", ws, err)
		}
		// No limit is NULL.
		pin.expect(qListWorkflows, "tenant-1", "b", nil).WillReturnRows(sqlmock.NewRows(workflowColumns))
		if ws, err := b.ListWorkflows(ctx, contract.ListQuery{Scope: scope, After: "b"}); err != nil || ws != nil {
			t.Errorf("ListWorkflows (empty page) = %+v, %v", ws, err)
		}
	})

	t.Run("ListWorkflowsByStatus", func(t *testing.T) {
		pin.expect(qListWorkflowsByStatus, "tenant-1", "a", 5, "running").
			WillReturnRows(sqlmock.NewRows(workflowColumns).AddRow("tenant-1", "c", "", "running", int64(1), nil, mockCreated, mockCreated))
		ws, err := b.ListWorkflows(ctx, contract.ListQuery{Scope: scope, Status: "running", After: "a", Limit: 5})
		if err != nil || len(ws) != 1 || ws[0].ID != "c" {
			t.Errorf("ListWorkflows(status) = %+v, %v", ws, err)
		}
	})

	var token string
	t.Run("ClaimKey", func(t *testing.T) {
		lease := mockNow.Add(30 * time.Second)
		pin.expect(qClaimKey, mockNowArg, 1.0, "tenant-1", "key-1", "fp-1", "wf-1", tokenArg{&token}, 30.0).
			WillReturnRows(sqlmock.NewRows(cols([]string{"taken", "flags", "now", "until"}, keyColumns)).
				AddRow(int64(1), int64(0), mockNow, lease, "", "", "", "", "", nil, time.Unix(0, 0), nil, nil, nil, nil, nil, nil, nil))
		c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: scope, Key: "key-1"}, Fingerprint: "fp-1", WorkflowID: "wf-1", TTL: 30 * time.Second})
		if err != nil || c.Kind != contract.ClaimNew || c.Token != token || !c.Record.LeaseUntil.Equal(lease) || !c.Record.CreatedAt.Equal(mockNow) ||
			c.Record.Fingerprint != "fp-1" || c.Record.WorkflowID != "wf-1" || c.Record.State != contract.KeyClaimed || c.Record.Outcome != nil {
			t.Errorf("ClaimKey = %+v, %v (token %q)", c, err, token)
		}
	})

	t.Run("ClaimKeyContended", func(t *testing.T) {
		// Every optimistic attempt reads a free key yet takes nothing (a
		// claim committed after its snapshot); then ClaimKey locks the row
		// in a transaction, decides there, and writes under the lock.
		claimCols := cols([]string{"taken", "flags", "now", "until"}, keyColumns)
		var tok string
		for i := range b.claimRounds {
			arg := driver.Value(tokenArg{&tok})
			if i > 0 {
				arg = sameArg{&tok}
			}
			pin.expect(qClaimKey, mockNowArg, 1.0, "tenant-1", "key-c", "fp-1", "", arg, 30.0).
				WillReturnRows(sqlmock.NewRows(claimCols).
					AddRow(int64(0), int64(0), mockNow, mockNow, "", "", "", "", "", nil, time.Unix(0, 0), nil, nil, nil, nil, nil, nil, nil))
		}
		mock.ExpectBegin()
		lapsed := int64(claimrule.Found | claimrule.Live | claimrule.Lapsed | claimrule.Match)
		pin.expect(qClaimKeyLock, mockNowArg, 1.0, "tenant-1", "key-c", "fp-1", "", sameArg{&tok}, 30.0).
			WillReturnRows(sqlmock.NewRows(claimCols).
				AddRow(int64(0), lapsed, mockNow, mockNow.Add(30*time.Second), "tenant-1", "key-c", "fp-1", "wf-0", "claimed", mockCreated, mockCreated, nil, nil, nil, nil, nil, nil, nil))
		pin.expect(qClaimKeyTake, mockNowArg, "tenant-1", "key-c", "fp-1", "", sameArg{&tok}, 30.0).
			WillReturnRows(sqlmock.NewRows(keyColumns).
				AddRow("tenant-1", "key-c", "fp-1", "wf-0", "claimed", mockNow.Add(30*time.Second), mockCreated, nil, nil, nil, nil, nil, nil, nil))
		mock.ExpectCommit()
		c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: scope, Key: "key-c"}, Fingerprint: "fp-1", TTL: 30 * time.Second})
		if err != nil || c.Kind != contract.ClaimReclaimed || c.Token != tok || c.Record.WorkflowID != "wf-0" || !c.Record.CreatedAt.Equal(mockCreated) {
			t.Errorf("ClaimKey (contended) = %+v, %v", c, err)
		}
		// A request's own token is sent as it is; a lock that finds a live
		// claim rolls back and answers in flight.
		for range b.claimRounds {
			pin.expect(qClaimKey, mockNowArg, 1.0, "tenant-1", "key-d", "fp-1", "", "own-token-0123456789", 30.0).
				WillReturnRows(sqlmock.NewRows(claimCols).
					AddRow(int64(0), int64(0), mockNow, mockNow, "", "", "", "", "", nil, time.Unix(0, 0), nil, nil, nil, nil, nil, nil, nil))
		}
		mock.ExpectBegin()
		pin.expect(qClaimKeyLock, mockNowArg, 1.0, "tenant-1", "key-d", "fp-1", "", "own-token-0123456789", 30.0).
			WillReturnRows(sqlmock.NewRows(claimCols).
				AddRow(int64(0), int64(claimrule.Found|claimrule.Live|claimrule.Match), mockNow, mockNow.Add(30*time.Second),
					"tenant-1", "key-d", "fp-1", "", "claimed", mockNow.Add(time.Minute), mockCreated, nil, nil, nil, nil, nil, nil, nil))
		mock.ExpectRollback()
		c, err = b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: scope, Key: "key-d"}, Fingerprint: "fp-1",
			TTL: 30 * time.Second, Token: "own-token-0123456789"})
		if err != nil || c.Kind != contract.ClaimInFlight || c.Token != "" {
			t.Errorf("ClaimKey (contended, in flight) = %+v, %v", c, err)
		}
	})

	t.Run("CompleteKeyTx", func(t *testing.T) {
		mock.ExpectBegin()
		tx, err := b.BeginTx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tx.Raw().(*sql.Tx); !ok {
			t.Errorf("BeginTx's Raw on database/sql is %T, want *sql.Tx", tx.Raw())
		}
		expires := mockNow.Add(hour)
		pin.expect(qCompleteKeyTx, mockNowArg, 1.0, "tenant-1", "key-t", "tok-t", int64(200), nil, []byte("b"), "", 3600.0, 0.0,
			nil, nil, nil, channel).
			WillReturnRows(sqlmock.NewRows(cols([]string{"applied", "token_ok", "live", "fence_ok"}, keyColumns)).
				AddRow(true, true, true, true, "tenant-1", "key-t", "fp", "", "completed", nil, mockCreated, mockNow, expires, expires,
					int64(200), nil, []byte("b"), ""))
		mock.ExpectCommit()
		rec, err := b.CompleteKeyTx(ctx, tx, contract.Completion{KeyRef: contract.KeyRef{Scope: scope, Key: "key-t"}, Token: "tok-t",
			Outcome: contract.Outcome{Code: 200, Body: []byte("b")}, Retain: hour})
		if err != nil || rec.State != contract.KeyCompleted || !rec.ForgetAt.Equal(expires) {
			t.Errorf("CompleteKeyTx = %+v, %v", rec, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Errorf("Commit = %v", err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Errorf("Rollback after Commit = %v, want nil", err)
		}
		// The caller's own *sql.Tx: the same statement; a failed COMMIT
		// after it was sent is OutcomeUnknown.
		mock.ExpectBegin()
		own, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		pin.expect(qCompleteKeyTx, mockNowArg, 1.0, "tenant-1", "key-t", "stale", int64(200), nil, nil, "", 3600.0, 0.0,
			nil, nil, nil, channel).
			WillReturnRows(sqlmock.NewRows(cols([]string{"applied", "token_ok", "live", "fence_ok"}, keyColumns)))
		_, err = b.CompleteKeyTx(ctx, own, contract.Completion{KeyRef: contract.KeyRef{Scope: scope, Key: "key-t"}, Token: "stale",
			Outcome: contract.Outcome{Code: 200}, Retain: hour})
		checkCode(t, err, contract.Fenced)
		mock.ExpectRollback()
		_ = own.Rollback()
		mock.ExpectBegin()
		tx, err = b.BeginTx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mock.ExpectCommit().WillReturnError(io.ErrUnexpectedEOF) // the connection broke after COMMIT was sent
		checkCode(t, tx.Commit(ctx), contract.OutcomeUnknown)
		if _, err := b.CompleteKeyTx(ctx, "not a tx", contract.Completion{}); contract.CodeOf(err) != contract.InvalidArgument {
			t.Errorf("CompleteKeyTx(string) = %v, want InvalidArgument", err)
		}
		if _, err := b.CompleteKeyTx(ctx, nil, contract.Completion{}); contract.CodeOf(err) != contract.InvalidArgument {
			t.Errorf("CompleteKeyTx(nil) = %v, want InvalidArgument", err)
		}
	})

	header := map[string][]string{"Content-Type": {"application/json"}, "X-Empty": nil}
	t.Run("CompleteKey", func(t *testing.T) {
		expires := mockNow.Add(hour)
		pin.expect(qCompleteKey, mockNowArg, 1.0, "tenant-1", "key-1", token, int64(201), encodeHeader(header), []byte(`{"ok":true}`), "ref-1", 3600.0, 7200.0,
			nil, nil, nil, channel).
			WillReturnRows(sqlmock.NewRows(cols([]string{"applied", "token_ok", "live", "fence_ok"}, keyColumns)).
				AddRow(true, true, true, true, "tenant-1", "key-1", "fp-1", "wf-1", "completed", nil, mockNow, mockNow, expires, expires,
					int64(201), encodeHeader(header), []byte(`{"ok":true}`), "ref-1"))
		rec, err := b.CompleteKey(ctx, contract.Completion{KeyRef: contract.KeyRef{Scope: scope, Key: "key-1"}, Token: token,
			Outcome: contract.Outcome{Code: 201, Header: header, Body: []byte(`{"ok":true}`), Ref: "ref-1"}, Retain: hour, Tombstone: 2 * hour})
		if err != nil || rec.State != contract.KeyCompleted || rec.Outcome == nil || rec.Outcome.Code != 201 ||
			rec.Outcome.Header["Content-Type"][0] != "application/json" || rec.Outcome.Ref != "ref-1" || !rec.ExpiresAt.Equal(expires) {
			t.Errorf("CompleteKey = %+v, %v", rec, err)
		}
		// With a fence, and no header (NULL) and no body (NULL).
		pin.expect(qCompleteKey, mockNowArg, 1.0, "tenant-1", "key-2", "tok-2", int64(204), nil, nil, "", 60.0, 0.0,
			"res-1", "owner-1", int64(9), channel).
			WillReturnRows(sqlmock.NewRows(cols([]string{"applied", "token_ok", "live", "fence_ok"}, keyColumns)).
				AddRow(false, true, true, false, "tenant-1", "key-2", "fp", "", "claimed", mockNow, mockNow, nil, nil, nil, nil, nil, nil, nil))
		_, err = b.CompleteKey(ctx, contract.Completion{KeyRef: contract.KeyRef{Scope: scope, Key: "key-2"}, Token: "tok-2",
			Outcome: contract.Outcome{Code: 204}, Retain: time.Minute, Fence: &contract.Fence{Resource: "res-1", Owner: "owner-1", Token: 9}})
		checkCode(t, err, contract.Fenced)
	})

	t.Run("RenewKey", func(t *testing.T) {
		pin.expect(qRenewKey, mockNowArg, "tenant-1", "key-3", "tok-3", 45.0).
			WillReturnRows(sqlmock.NewRows(keyColumns).
				AddRow("tenant-1", "key-3", "fp", "", "claimed", mockNow.Add(45*time.Second), mockCreated, nil, nil, nil, nil, nil, nil, nil))
		rec, err := b.RenewKey(ctx, contract.KeyRef{Scope: scope, Key: "key-3"}, "tok-3", 45*time.Second)
		if err != nil || !rec.LeaseUntil.Equal(mockNow.Add(45*time.Second)) {
			t.Errorf("RenewKey = %+v, %v", rec, err)
		}
		pin.expect(qRenewKey, mockNowArg, "tenant-1", "key-3", "stale", 45.0).WillReturnRows(sqlmock.NewRows(keyColumns))
		_, err = b.RenewKey(ctx, contract.KeyRef{Scope: scope, Key: "key-3"}, "stale", 45*time.Second)
		checkCode(t, err, contract.Fenced)
	})

	t.Run("ReleaseKey", func(t *testing.T) {
		pin.expect(qReleaseKey, "tenant-1", "key-3", "tok-3", channel).
			WillReturnRows(sqlmock.NewRows([]string{"count"}).AddRow(int64(1)))
		if ok, err := b.ReleaseKey(ctx, contract.KeyRef{Scope: scope, Key: "key-3"}, "tok-3"); !ok || err != nil {
			t.Errorf("ReleaseKey = %v, %v", ok, err)
		}
		pin.expect(qReleaseKey, "tenant-1", "key-3", "tok-3", channel).
			WillReturnRows(sqlmock.NewRows([]string{"count"}).AddRow(int64(0)))
		if ok, err := b.ReleaseKey(ctx, contract.KeyRef{Scope: scope, Key: "key-3"}, "tok-3"); ok || err != nil {
			t.Errorf("second ReleaseKey = %v, %v", ok, err)
		}
	})

	t.Run("GetKey", func(t *testing.T) {
		pin.expect(qGetKey, mockNowArg, "tenant-1", "key-1").
			WillReturnRows(sqlmock.NewRows(keyColumns).
				AddRow("tenant-1", "key-1", "fp-1", "wf-1", "completed", nil, mockNow, mockNow, mockNow.Add(hour), mockNow.Add(hour), int64(201), nil, []byte{}, nil))
		rec, err := b.GetKey(ctx, contract.KeyRef{Scope: scope, Key: "key-1"})
		if err != nil || rec.Outcome == nil || rec.Outcome.Header != nil || rec.Outcome.Ref != "" || rec.Outcome.Code != 201 {
			t.Errorf("GetKey = %+v, %v", rec, err)
		}
		pin.expect(qGetKey, mockNowArg, "tenant-1", "nope").WillReturnRows(sqlmock.NewRows(keyColumns))
		_, err = b.GetKey(ctx, contract.KeyRef{Scope: scope, Key: "nope"})
		checkCode(t, err, contract.NotFound)
	})

	t.Run("WaitKeyPollsGetKey", func(t *testing.T) {
		// A *sql.DB on neither lib/pq (with ListenDSN) nor pgx's stdlib
		// cannot LISTEN: WaitKey polls with GetKey's statement alone.
		pin.expect(qGetKey, mockNowArg, "tenant-1", "key-4").
			WillReturnRows(sqlmock.NewRows(keyColumns).
				AddRow("tenant-1", "key-4", "fp", "", "claimed", mockNow.Add(hour), mockNow, nil, nil, nil, nil, nil, nil, nil))
		pin.expect(qGetKey, mockNowArg, "tenant-1", "key-4").
			WillReturnRows(sqlmock.NewRows(keyColumns).
				AddRow("tenant-1", "key-4", "fp", "", "completed", nil, mockNow, mockNow, mockNow.Add(hour), mockNow.Add(hour), int64(200), nil, nil, nil))
		rec, err := b.WaitKey(ctx, contract.KeyRef{Scope: scope, Key: "key-4"})
		if err != nil || rec.State != contract.KeyCompleted {
			t.Errorf("WaitKey = %+v, %v", rec, err)
		}
	})

	t.Run("WaitKeyMarks", func(t *testing.T) {
		// With a LISTEN connection up, WaitKey reads with qWaitKey, which
		// marks a claim waited (a go-sqlmock *sql.DB never listens: run
		// the read directly). An unmarked claim that the statement could
		// not mark is read again.
		waitCols := cols([]string{"marked", "waited"}, keyColumns)
		pin.expect(qWaitKey, mockNowArg, "tenant-1", "key-4").
			WillReturnRows(sqlmock.NewRows(waitCols).
				AddRow(false, false, "tenant-1", "key-4", "fp", "", "claimed", mockNow.Add(hour), mockNow, nil, nil, nil, nil, nil, nil, nil))
		pin.expect(qWaitKey, mockNowArg, "tenant-1", "key-4").
			WillReturnRows(sqlmock.NewRows(waitCols).
				AddRow(false, false, "tenant-1", "key-4", "fp", "", "completed", nil, mockNow, mockNow, mockNow.Add(hour), mockNow.Add(hour), int64(200), nil, nil, nil))
		rec, err := b.waitRead(ctx, contract.KeyRef{Scope: scope, Key: "key-4"})
		if err != nil || rec.State != contract.KeyCompleted {
			t.Errorf("waitRead = %+v, %v", rec, err)
		}
		pin.expect(qWaitKey, mockNowArg, "tenant-1", "key-5").
			WillReturnRows(sqlmock.NewRows(waitCols).
				AddRow(true, true, "tenant-1", "key-5", "fp", "", "claimed", mockNow.Add(hour), mockNow, nil, nil, nil, nil, nil, nil, nil))
		if rec, err := b.waitRead(ctx, contract.KeyRef{Scope: scope, Key: "key-5"}); err != nil || rec.State != contract.KeyClaimed {
			t.Errorf("waitRead(marked) = %+v, %v", rec, err)
		}
		pin.expect(qWaitKey, mockNowArg, "tenant-1", "nope").WillReturnRows(sqlmock.NewRows(waitCols))
		_, err = b.waitRead(ctx, contract.KeyRef{Scope: scope, Key: "nope"})
		checkCode(t, err, contract.NotFound)
	})

	grantCols := cols(leaseColumns, []string{"notified"})
	t.Run("AcquireLease", func(t *testing.T) {
		// The value is bytea, byte for byte (NUL, invalid UTF-8); the empty
		// value is NULL.
		const value = "leader\x00at\xff:8080"
		pin.expect(qAcquireLease, mockNowArg, 1.0, "tenant-1", "res-1", "owner-1", 10.0, []byte(value), channel, leaseNotifyPayload(scope, "res-1")).
			WillReturnRows(sqlmock.NewRows(grantCols).AddRow("owner-1", int64(7), mockNow, mockNow.Add(10*time.Second), []byte(value), false))
		l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "res-1", Owner: "owner-1", TTL: 10 * time.Second, Value: value})
		if err != nil || l.Token != 7 || l.Owner != "owner-1" || l.Resource != "res-1" || l.Scope != scope || l.Value != value {
			t.Errorf("AcquireLease = %+v, %v", l, err)
		}
		pin.expect(qAcquireLease, mockNowArg, 1.0, "tenant-1", "res-1", "owner-2", 10.0, nil, channel, leaseNotifyPayload(scope, "res-1")).
			WillReturnRows(sqlmock.NewRows(grantCols))
		_, err = b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "res-1", Owner: "owner-2", TTL: 10 * time.Second})
		checkCode(t, err, contract.LeaseBusy)
		// A permit's resource: the statement also reads its semaphore's
		// mark, and the payload is the semaphore's.
		pin.expect(qAcquireLeaseOnPermit, mockNowArg, 1.0, "tenant-1", "sem#4", "owner-1", 10.0, nil, channel, leaseNotifyPayload(scope, "sem"), "sem").
			WillReturnRows(sqlmock.NewRows(grantCols).AddRow("owner-1", int64(8), mockNow, mockNow.Add(10*time.Second), nil, true))
		if l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "sem#4", Owner: "owner-1", TTL: 10 * time.Second}); err != nil || l.Resource != "sem#4" || l.Token != 8 {
			t.Errorf("AcquireLease(permit) = %+v, %v", l, err)
		}
	})

	t.Run("AcquirePermit", func(t *testing.T) {
		permitCols := cols([]string{"granted", "free", "resource"}, grantCols)
		req := contract.PermitRequest{Scope: scope, Resource: "sem", Owner: "owner-1", TTL: 10 * time.Second, Value: "v", Permits: 3}
		payload := leaseNotifyPayload(scope, "sem")
		pin.expect(qAcquirePermit, mockNowArg, 1.0, "tenant-1", "sem", "owner-1", 10.0, []byte("v"), 3, channel, payload).
			WillReturnRows(sqlmock.NewRows(permitCols).AddRow(true, true, "sem#2", "owner-1", int64(11), mockNow, mockNow.Add(10*time.Second), []byte("v"), true))
		l, err := b.AcquirePermit(ctx, req)
		if err != nil || l.Resource != "sem#2" || l.Token != 11 || l.Value != "v" || l.Scope != scope || !l.ExpiresAt.Equal(mockNow.Add(10*time.Second)) {
			t.Errorf("AcquirePermit = %+v, %v", l, err)
		}
		// A free permit in the snapshot that a concurrent grant took first:
		// the statement runs again, on a new snapshot; every permit held:
		// LeaseBusy.
		for _, free := range []bool{true, false} {
			pin.expect(qAcquirePermit, mockNowArg, 1.0, "tenant-1", "sem", "owner-1", 10.0, []byte("v"), 3, channel, payload).
				WillReturnRows(sqlmock.NewRows(permitCols).AddRow(false, free, "", "", int64(0), mockNow, mockNow, nil, false))
		}
		_, err = b.AcquirePermit(ctx, req)
		checkCode(t, err, contract.LeaseBusy)
		// Lost on every round: Unavailable, never LeaseBusy.
		for range maxPermitRounds {
			pin.expect(qAcquirePermit, mockNowArg, 1.0, "tenant-1", "sem", "owner-1", 10.0, []byte("v"), 3, channel, payload).
				WillReturnRows(sqlmock.NewRows(permitCols).AddRow(false, true, "", "", int64(0), mockNow, mockNow, nil, false))
		}
		_, err = b.AcquirePermit(ctx, req)
		checkCode(t, err, contract.Unavailable)
	})

	t.Run("WatchLease", func(t *testing.T) {
		// A *sql.DB of go-sqlmock cannot LISTEN: WatchLease reads the
		// state of the rows it covers and polls it. The mark is pinned by
		// running it directly, as a listening watch does.
		pin.expect(qLeaseState, "tenant-1", "sem", "sem#:").WillReturnRows(sqlmock.NewRows([]string{"state"}).AddRow("d1"))
		wctx, cancel := context.WithCancel(ctx)
		if _, err := b.WatchLease(wctx, scope, "sem"); err != nil {
			t.Errorf("WatchLease = %v", err)
		}
		cancel()
		// A permit's watch marks its row; a semaphore's, its row and then,
		// in a second statement, its permits' rows.
		pin.expect(qWatchLease, "tenant-1", "sem#2", 300.0).WillReturnRows(sqlmock.NewRows([]string{"?column?"}).AddRow(int64(1)))
		w := &leaseWatch{b: b, scope: scope, resource: "sem#2", last: watchRange("sem#2"), markTTL: markTTL}
		if err := w.mark(ctx); err != nil {
			t.Errorf("mark = %v", err)
		}
		pin.expect(qWatchLease, "tenant-1", "sem", 300.0).WillReturnRows(sqlmock.NewRows([]string{"?column?"}))
		pin.expect(qWatchPermits, "tenant-1", "sem", "sem#:", 300.0).WillReturnRows(sqlmock.NewRows([]string{"count"}).AddRow(int64(2)))
		w = &leaseWatch{b: b, scope: scope, resource: "sem", last: watchRange("sem"), markTTL: markTTL}
		if err := w.mark(ctx); err != nil {
			t.Errorf("mark = %v", err)
		}
	})

	lease := contract.Lease{Scope: scope, Resource: "res-1", Owner: "owner-1", Token: 7}
	t.Run("RenewLease", func(t *testing.T) {
		pin.expect(qRenewLease, mockNowArg, 1.0, "tenant-1", "res-1", "owner-1", int64(7), 20.0).
			WillReturnRows(sqlmock.NewRows(leaseColumns).AddRow("owner-1", int64(7), mockCreated, mockNow.Add(20*time.Second), []byte("kept")))
		l, err := b.RenewLease(ctx, lease, 20*time.Second)
		if err != nil || !l.ExpiresAt.Equal(mockNow.Add(20*time.Second)) || l.Value != "kept" {
			t.Errorf("RenewLease = %+v, %v", l, err)
		}
		pin.expect(qRenewLease, mockNowArg, 1.0, "tenant-1", "res-1", "owner-1", int64(7), 20.0).
			WillReturnRows(sqlmock.NewRows(leaseColumns))
		_, err = b.RenewLease(ctx, lease, 20*time.Second)
		checkCode(t, err, contract.Fenced)
	})

	t.Run("RenewLeases", func(t *testing.T) { // renew.go
		stale := lease
		stale.Token = 6
		other := contract.Lease{Resource: "res-2", Owner: "owner-1", Token: 9}
		pin.expect(qRenewLeases, mockNowArg, 1.0, 20.0, `{"tenant-1","tenant-1",""}`, `{"res-1","res-1","res-2"}`, `{"owner-1","owner-1","owner-1"}`, `{7,6,9}`).
			WillReturnRows(sqlmock.NewRows(append([]string{"scope", "resource"}, leaseColumns...)).
				AddRow("tenant-1", "res-1", "owner-1", int64(7), mockCreated, mockNow.Add(20*time.Second), nil).
				AddRow("", "res-2", "owner-1", int64(9), mockCreated, mockNow.Add(20*time.Second), []byte("v2")))
		out, err := b.RenewLeases(ctx, []contract.Lease{lease, stale, other}, 20*time.Second)
		if err != nil || len(out) != 3 || out[0].Err != nil || out[0].Lease.Token != 7 || out[0].Lease.Scope != scope ||
			!out[0].Lease.ExpiresAt.Equal(mockNow.Add(20*time.Second)) || out[2].Err != nil || out[2].Lease.Resource != "res-2" ||
			out[0].Lease.Value != "" || out[2].Lease.Value != "v2" {
			t.Fatalf("RenewLeases = %+v, %v", out, err)
		}
		checkCode(t, out[1].Err, contract.Fenced)
	})

	t.Run("ReleaseLease", func(t *testing.T) {
		pin.expect(qReleaseLease, mockNowArg, "tenant-1", "res-1", "owner-1", int64(7), channel, leaseNotifyPayload(scope, "res-1")).
			WillReturnRows(sqlmock.NewRows([]string{"token", "notified"}).AddRow(int64(7), true))
		if ok, err := b.ReleaseLease(ctx, lease); !ok || err != nil {
			t.Errorf("ReleaseLease = %v, %v", ok, err)
		}
		permit := contract.Lease{Scope: scope, Resource: "sem#2", Owner: "owner-1", Token: 11}
		pin.expect(qReleasePermit, mockNowArg, "tenant-1", "sem#2", "owner-1", int64(11), channel, leaseNotifyPayload(scope, "sem"), "sem").
			WillReturnRows(sqlmock.NewRows([]string{"token", "notified"}))
		if ok, err := b.ReleaseLease(ctx, permit); ok || err != nil {
			t.Errorf("ReleaseLease(permit) = %v, %v", ok, err)
		}
	})

	t.Run("GetLease", func(t *testing.T) {
		pin.expect(qGetLease, "tenant-1", "res-1").
			WillReturnRows(sqlmock.NewRows(leaseColumns).AddRow("owner-1", int64(7), mockCreated, mockNow, []byte{0, 0xfe}))
		if l, err := b.GetLease(ctx, scope, "res-1"); err != nil || l.Token != 7 || l.Value != "\x00\xfe" {
			t.Errorf("GetLease = %+v, %v", l, err)
		}
		pin.expect(qGetLease, "tenant-1", "res-2").WillReturnRows(sqlmock.NewRows(leaseColumns))
		_, err := b.GetLease(ctx, scope, "res-2")
		checkCode(t, err, contract.NotFound)
	})

	t.Run("Cleanup", func(t *testing.T) {
		pin.expect(qCleanup, mockNowArg, 1.0, 86400.0, 100, channel).
			WillReturnRows(sqlmock.NewRows([]string{"w", "k", "l", "more", "notified", "o", "leases_notified"}).AddRow(int64(3), int64(2), int64(1), true, int64(2), int64(5), int64(1)))
		res, err := b.Cleanup(ctx, contract.CleanupRequest{TerminalAge: 24 * hour, Limit: 100})
		if err != nil || res != (contract.CleanupResult{Workflows: 3, Keys: 2, Outcomes: 5, Leases: 1, More: true}) {
			t.Errorf("Cleanup = %+v, %v", res, err)
		}
		// The Store fills the default limit (contract.Backend); the backend
		// passes what it is given.
		pin.expect(qCleanup, mockNowArg, 1.0, 0.0, 1000, channel).
			WillReturnRows(sqlmock.NewRows([]string{"w", "k", "l", "more", "notified", "o", "leases_notified"}).AddRow(int64(0), int64(0), int64(0), false, int64(0), int64(0), int64(0)))
		if _, err := b.Cleanup(ctx, contract.CleanupRequest{Limit: 1000}); err != nil {
			t.Errorf("Cleanup(limit 1000) = %v", err)
		}
	})

	t.Run("CountCleanup", func(t *testing.T) {
		pin.expect(qCountCleanup, mockNowArg, 1.0, 3600.0, 10).
			WillReturnRows(sqlmock.NewRows([]string{"w", "k", "l", "o"}).AddRow(int64(11), int64(4), int64(0), int64(11)))
		res, err := b.CountCleanup(ctx, contract.CleanupRequest{TerminalAge: hour, Limit: 10})
		if err != nil || res != (contract.CleanupResult{Workflows: 10, Keys: 4, Outcomes: 10, Leases: 0, More: true}) {
			t.Errorf("CountCleanup = %+v, %v", res, err)
		}
	})

	t.Run("DeleteRecord", func(t *testing.T) {
		pin.expect(qDeleteRecord, "key", string(scope), "key-9", channel).
			WillReturnRows(sqlmock.NewRows([]string{"found", "notified"}).AddRow(true, int64(1)))
		found, err := b.DeleteRecord(ctx, contract.KindKey, scope, "key-9")
		if err != nil || !found {
			t.Errorf("DeleteRecord = %v, %v", found, err)
		}
	})

	t.Run("ListKeys", func(t *testing.T) {
		pin.expect(qListKeys, mockNowArg, "tenant-1", "", 10, "").
			WillReturnRows(sqlmock.NewRows(keyColumns).
				AddRow("tenant-1", "B", "fp", "", "claimed", mockNow, mockCreated, nil, nil, nil, nil, nil, nil, nil).
				AddRow("tenant-1", "a", "fp", "wf-1", "completed", nil, mockCreated, mockNow, mockNow.Add(hour), mockNow.Add(hour), int64(201), nil, []byte("x"), "ref"))
		ks, err := b.ListKeys(ctx, contract.KeyListQuery{Scope: scope, Limit: 10})
		if err != nil || len(ks) != 2 || ks[0].Key != "B" || ks[0].Outcome != nil || ks[1].Key != "a" ||
			ks[1].Outcome == nil || ks[1].Outcome.Code != 201 || string(ks[1].Outcome.Body) != "x" || ks[1].Outcome.Ref != "ref" {
			t.Errorf("ListKeys = %+v, %v", ks, err)
		}
		// The state filter is a parameter of the same statement; no limit is
		// NULL.
		pin.expect(qListKeys, mockNowArg, "tenant-1", "a", nil, "completed").WillReturnRows(sqlmock.NewRows(keyColumns))
		if ks, err := b.ListKeys(ctx, contract.KeyListQuery{Scope: scope, After: "a", State: contract.KeyCompleted}); err != nil || ks != nil {
			t.Errorf("ListKeys (empty page) = %+v, %v", ks, err)
		}
		// A row whose outcome cannot be decoded fails the page as GetKey
		// fails: Corrupt, with no key or data in the message.
		pin.expect(qListKeys, mockNowArg, "tenant-1", "", 10, "").
			WillReturnRows(sqlmock.NewRows(keyColumns).
				AddRow("tenant-1", "secret-key", "fp", "", "completed", nil, mockCreated, mockNow, mockNow.Add(hour), mockNow.Add(hour), int64(200), []byte{0xff}, nil, nil))
		ks, err = b.ListKeys(ctx, contract.KeyListQuery{Scope: scope, Limit: 10})
		checkCode(t, err, contract.Corrupt)
		if ks != nil || err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ListKeys (corrupt) = %+v, %v", ks, err)
		}
	})

	leaseCols := cols([]string{"scope", "resource"}, leaseColumns)
	t.Run("ListLeases", func(t *testing.T) {
		pin.expect(qListLeases, "tenant-1", "", 10).
			WillReturnRows(sqlmock.NewRows(leaseCols).
				AddRow("tenant-1", "res-1", "owner-1", int64(7), mockCreated, mockNow, nil).
				AddRow("tenant-1", "res-2#3", "owner-2", int64(9), mockCreated, mockNow.Add(hour), []byte("v")))
		ls, err := b.ListLeases(ctx, contract.LeaseListQuery{Scope: scope, Limit: 10})
		want := []contract.Lease{
			{Scope: scope, Resource: "res-1", Owner: "owner-1", Token: 7, AcquiredAt: mockCreated, ExpiresAt: mockNow},
			{Scope: scope, Resource: "res-2#3", Owner: "owner-2", Token: 9, AcquiredAt: mockCreated, ExpiresAt: mockNow.Add(hour), Value: "v"},
		}
		if err != nil || !reflect.DeepEqual(ls, want) {
			t.Errorf("ListLeases = %+v, %v", ls, err)
		}
		pin.expect(qListLeases, "tenant-1", "res-2", nil).WillReturnRows(sqlmock.NewRows(leaseCols))
		if ls, err := b.ListLeases(ctx, contract.LeaseListQuery{Scope: scope, After: "res-2"}); err != nil || ls != nil {
			t.Errorf("ListLeases (empty page) = %+v, %v", ls, err)
		}
	})

	t.Run("ListLeasesHeld", func(t *testing.T) {
		pin.expect(qListLeasesHeld, mockNowArg, "tenant-1", "res-1", 5).
			WillReturnRows(sqlmock.NewRows(leaseCols).AddRow("tenant-1", "res-2", "owner-2", int64(9), mockCreated, mockNow.Add(hour), nil))
		ls, err := b.ListLeases(ctx, contract.LeaseListQuery{Scope: scope, Held: true, After: "res-1", Limit: 5})
		if err != nil || len(ls) != 1 || ls[0].Resource != "res-2" || ls[0].Token != 9 {
			t.Errorf("ListLeases(held) = %+v, %v", ls, err)
		}
	})

	t.Run("FenceTxOnSQLTx", func(t *testing.T) {
		mock.ExpectBegin()
		pin.expect(qFenceTx, mockNowArg, 1.0, "tenant-1", "res-1", "owner-1", int64(7)).
			WillReturnRows(sqlmock.NewRows([]string{"token"}).AddRow(int64(7)))
		pin.expect(qFenceTx, mockNowArg, 1.0, "tenant-1", "res-1", "owner-1", int64(6)).
			WillReturnRows(sqlmock.NewRows([]string{"token"}))
		mock.ExpectCommit()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.FenceTx(ctx, tx, scope, lease.Fence()); err != nil {
			t.Errorf("FenceTx = %v", err)
		}
		stale := lease.Fence()
		stale.Token = 6
		checkCode(t, b.FenceTx(ctx, tx, scope, stale), contract.Fenced)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		checkCode(t, b.FenceTx(ctx, tx, scope, lease.Fence()), contract.InvalidArgument) // tx done
		checkCode(t, b.FenceTx(ctx, nil, scope, lease.Fence()), contract.InvalidArgument)
	})

	t.Run("MigrationStatus", func(t *testing.T) {
		pin.expect(qSchemaVersion).
			WillReturnRows(sqlmock.NewRows([]string{"version", "dirty"}).AddRow(int64(LatestVersion()), false))
		if s, err := b.MigrationStatus(ctx); err != nil || !s.Current() {
			t.Errorf("MigrationStatus = %+v, %v", s, err)
		}
	})
	expectationsMet(t, mock)
	pin.checkEveryStatement(t)
}

// TestSQLMockVerifyReadsTheVersionOnly: NewBackend on a *sql.DB with migrate=verify sends
// exactly the version statement; a newer version is a SchemaMismatch.
// TestSQLMockVerifyReadsTheVersionAndTheObjects: migrate=verify reads the
// version, and, when it is current, lists the schema's objects (one catalog
// query) so that a version table without its tables is caught.
func TestSQLMockVerifyReadsTheVersionAndTheObjects(t *testing.T) {
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := newStatements(mockSchema)
	mock.ExpectQuery(qSchemaVersion.sql(st)).WithoutArgs().
		WillReturnRows(sqlmock.NewRows([]string{"version", "dirty"}).AddRow(int64(LatestVersion()), false))
	objects := sqlmock.NewRows([]string{"nspname", "relname"})
	for _, o := range schemaObjectList {
		objects.AddRow(mockSchema, o.name)
	}
	mock.ExpectQuery(schemaObjectsSQL).WithoutArgs().WillReturnRows(objects)
	if _, err := NewBackend(context.Background(), db, Options{Schema: mockSchema, Migrate: MigrateVerify}); err != nil {
		t.Errorf("NewBackend(verify) = %v", err)
	}
	mock.ExpectQuery(qSchemaVersion.sql(st)).WithoutArgs().
		WillReturnRows(sqlmock.NewRows([]string{"version", "dirty"}).AddRow(int64(LatestVersion()+1), false))
	_, err = NewBackend(context.Background(), db, Options{Schema: mockSchema, Migrate: MigrateVerify})
	checkCode(t, err, contract.SchemaMismatch)
	// A missing version table (or schema) reads as version 0: older.
	mock.ExpectQuery(qSchemaVersion.sql(st)).WithoutArgs().WillReturnError(&pq.Error{Severity: "ERROR", Code: "42P01", Message: "relation does not exist"})
	_, err = NewBackend(context.Background(), db, Options{Schema: mockSchema, Migrate: MigrateVerify})
	checkCode(t, err, contract.SchemaMismatch)
	if err != nil && !strings.Contains(err.Error(), "older") {
		t.Errorf("error %q does not say the schema is older", err)
	}
	expectationsMet(t, mock)
}

func checkCode(t *testing.T, err error, want contract.Code) {
	t.Helper()
	if got := contract.CodeOf(err); got != want || (err == nil) != (want == contract.Unknown) {
		t.Errorf("error = %v (code %v), want code %v", err, got, want)
	}
}

func pqErr(code string) *pq.Error {
	return &pq.Error{Severity: "ERROR", Code: pq.ErrorCode(code), Message: "secret detail: SELECT password FROM x"}
}

// TestSQLMockErrorMapping injects driver failures into a write
// (AcquireLease) and a read (GetLease) and checks the contract code, how
// often the statement reached the driver, and that the error text leaks
// nothing.
func TestSQLMockErrorMapping(t *testing.T) {
	req := contract.LeaseRequest{Scope: "s", Resource: "res-1", Owner: "o", TTL: 10 * time.Second}
	acquire := func(st *statements, mock sqlmock.Sqlmock) *sqlmock.ExpectedQuery {
		return mock.ExpectQuery(qAcquireLease.sql(st)).WithArgs(mockNowArg, 1.0, "s", "res-1", "o", 10.0, nil, channelName("s_mock"), leaseNotifyPayload("s", "res-1"))
	}
	getLease := func(st *statements, mock sqlmock.Sqlmock) *sqlmock.ExpectedQuery {
		return mock.ExpectQuery(qGetLease.sql(st)).WithArgs("s", "res-1")
	}
	leaseRows := func() *sqlmock.Rows {
		return sqlmock.NewRows(leaseColumns).AddRow("o", int64(1), mockNow, mockNow.Add(10*time.Second), nil)
	}
	grantRows := func() *sqlmock.Rows {
		return sqlmock.NewRows(cols(leaseColumns, []string{"notified"})).AddRow("o", int64(1), mockNow, mockNow.Add(10*time.Second), nil, false)
	}
	write := func(ctx context.Context, b *Backend) error { _, err := b.AcquireLease(ctx, req); return err }
	read := func(ctx context.Context, b *Backend) error { _, err := b.GetLease(ctx, "s", "res-1"); return err }

	for _, c := range []struct {
		name   string
		expect func(st *statements, mock sqlmock.Sqlmock) // the statements the driver sees, in order
		op     func(ctx context.Context, b *Backend) error
		ctx    func() (context.Context, context.CancelFunc)
		want   contract.Code // Unknown: success
		cause  error         // if set, must be in the error's chain
	}{
		{name: "SerializationFailureIsRetriedThenUnavailable", op: write, want: contract.Unavailable,
			expect: func(st *statements, mock sqlmock.Sqlmock) {
				for range maxTxRetries + 1 {
					acquire(st, mock).WillReturnError(pqErr("40001"))
				}
			}},
		{name: "SerializationFailureThenSuccess", op: write, want: contract.Unknown,
			expect: func(st *statements, mock sqlmock.Sqlmock) {
				acquire(st, mock).WillReturnError(pqErr("40001"))
				acquire(st, mock).WillReturnRows(grantRows())
			}},
		{name: "DeadlockIsRetriedThenUnavailable", op: write, want: contract.Unavailable,
			expect: func(st *statements, mock sqlmock.Sqlmock) {
				for range maxTxRetries + 1 {
					acquire(st, mock).WillReturnError(pqErr("40P01"))
				}
			}},
		{name: "DeadlockOnARead", op: read, want: contract.Unknown,
			expect: func(st *statements, mock sqlmock.Sqlmock) {
				getLease(st, mock).WillReturnError(pqErr("40P01"))
				getLease(st, mock).WillReturnRows(leaseRows())
			}},
		{name: "ErrorAfterTheRowIsTheStatementsError", op: write, want: contract.Unavailable,
			expect: func(st *statements, mock sqlmock.Sqlmock) {
				// The server sent the row, then failed the statement (its
				// transaction rolled back): not a success.
				for range maxTxRetries + 1 {
					acquire(st, mock).WillReturnRows(grantRows().CloseError(pqErr("40001")))
				}
			}},
		{name: "StatementTimeoutIsUnavailable", op: write, want: contract.Unavailable,
			expect: func(st *statements, mock sqlmock.Sqlmock) { acquire(st, mock).WillReturnError(pqErr("57014")) }},
		{name: "UniqueViolationIsAlreadyExists", op: write, want: contract.AlreadyExists,
			expect: func(st *statements, mock sqlmock.Sqlmock) { acquire(st, mock).WillReturnError(pqErr("23505")) }},
		{name: "ConnectionFailureIsUnavailable", op: write, want: contract.Unavailable,
			expect: func(st *statements, mock sqlmock.Sqlmock) { acquire(st, mock).WillReturnError(pqErr("08006")) }},
		{name: "AdminShutdownIsUnavailable", op: read, want: contract.Unavailable,
			expect: func(st *statements, mock sqlmock.Sqlmock) { getLease(st, mock).WillReturnError(pqErr("57P01")) }},
		{name: "MissingSchemaIsSchemaMismatch", op: write, want: contract.SchemaMismatch,
			expect: func(st *statements, mock sqlmock.Sqlmock) { acquire(st, mock).WillReturnError(pqErr("3F000")) }},
		{name: "MissingTableIsSchemaMismatch", op: read, want: contract.SchemaMismatch,
			expect: func(st *statements, mock sqlmock.Sqlmock) { getLease(st, mock).WillReturnError(pqErr("42P01")) }},
		{name: "BadConnOnAWriteIsOutcomeUnknownAndNotResent", op: write, want: contract.OutcomeUnknown, cause: driver.ErrBadConn,
			// database/sql would re-send on driver.ErrBadConn; the write
			// path must not let it: exactly one statement, and the error
			// is that statement's (a re-send would end with another one).
			expect: func(st *statements, mock sqlmock.Sqlmock) { acquire(st, mock).WillReturnError(driver.ErrBadConn) }},
		{name: "BadConnOnAReadIsUnavailable", op: read, want: contract.Unavailable,
			expect: func(st *statements, mock sqlmock.Sqlmock) { getLease(st, mock).WillReturnError(driver.ErrBadConn) }},
		{name: "UnexpectedEOFOnAWriteIsOutcomeUnknown", op: write, want: contract.OutcomeUnknown,
			expect: func(st *statements, mock sqlmock.Sqlmock) { acquire(st, mock).WillReturnError(io.ErrUnexpectedEOF) }},
		{name: "ConnDoneIsClosed", op: write, want: contract.Closed,
			expect: func(st *statements, mock sqlmock.Sqlmock) { acquire(st, mock).WillReturnError(sql.ErrConnDone) }},
		{name: "DeadlineInFlightOnAWriteIsOutcomeUnknown", op: write, want: contract.OutcomeUnknown,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 50*time.Millisecond)
			},
			expect: func(st *statements, mock sqlmock.Sqlmock) {
				acquire(st, mock).WillDelayFor(2 * time.Second).WillReturnRows(grantRows())
			}},
		{name: "DeadlineInFlightOnAReadIsCanceled", op: read, want: contract.Canceled,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 50*time.Millisecond)
			},
			expect: func(st *statements, mock sqlmock.Sqlmock) {
				getLease(st, mock).WillDelayFor(2 * time.Second).WillReturnRows(leaseRows())
			}},
		{name: "DeadlineBeforeSendingAWriteIsCanceled", op: write, want: contract.Canceled,
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
				return ctx, cancel
			},
			expect: func(*statements, sqlmock.Sqlmock) {}}, // nothing reaches the driver
	} {
		t.Run(c.name, func(t *testing.T) {
			b, mock, _, st := newMock(t, Options{Schema: "s_mock"})
			c.expect(st, mock)
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if c.ctx != nil {
				ctx, cancel = c.ctx()
			}
			defer cancel()
			err := c.op(ctx, b)
			if c.want == contract.Unknown {
				if err != nil {
					t.Errorf("error = %v, want success", err)
				}
			} else {
				checkCode(t, err, c.want)
			}
			if c.want == contract.Canceled || c.want == contract.OutcomeUnknown && c.ctx != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false", err)
				}
			}
			if c.cause != nil && !errors.Is(err, c.cause) {
				t.Errorf("errors.Is(%v, %v) = false", err, c.cause)
			}
			checkNoLeak(t, err, append([]string{"secret", "password"}, sqlWords...)...)
			expectationsMet(t, mock)
		})
	}
}

// TestSQLMockClosed: a closed *sql.DB and a closed backend → Closed, and
// nothing reaches the driver.
func TestSQLMockClosed(t *testing.T) {
	ctx := context.Background()
	t.Run("ClosedDB", func(t *testing.T) {
		b, mock, db, _ := newMock(t, Options{})
		mock.ExpectClose()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "r", Owner: "o", TTL: time.Second})
		checkCode(t, err, contract.Closed)
		_, err = b.GetLease(ctx, "", "r")
		checkCode(t, err, contract.Closed)
		expectationsMet(t, mock)
	})
	t.Run("ClosedBackend", func(t *testing.T) {
		b, mock, db, _ := newMock(t, Options{})
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "wf", Status: "running"})
		checkCode(t, err, contract.Closed)
		_, err = b.WaitKey(ctx, contract.KeyRef{Key: "k"})
		checkCode(t, err, contract.Closed)
		checkCode(t, b.FenceTx(ctx, nil, "", &contract.Fence{}), contract.Closed)
		// The caller's db stays open (sqlmock answers pings by default).
		if err := db.PingContext(ctx); err != nil {
			t.Errorf("the caller's db was closed by Backend.Close: %v", err)
		}
		expectationsMet(t, mock)
	})
}
