package postgres

import (
	"database/sql/driver"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/durable-go/durable/backends/postgres/internal/mockspec"
	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/claimrule"
)

// This file fills the bridge to package pgmock (see internal/mockspec):
// for one operation and one outcome, the statements the backend sends on
// database/sql and the rows the server answers. The text comes from the
// statement definitions (sql.go), the arguments from the same parameter
// builders the methods call (workflows.go, keys.go, leases.go, delete.go,
// list.go), and each row is the inverse of the backend's conversion of a
// row into a record, turned into values in SELECT-list order by the row's
// own dest method. Where an operation decides from its row (ClaimKey, CompleteKey,
// UpdateWorkflow), the generator runs the backend's own decision on the
// row it built, so a row that would not produce the outcome asked for
// panics here instead of misleading a test.

func init() {
	mockspec.New = newMockGen
	mockspec.Names = func() []string {
		names := make([]string, len(registry))
		for i, s := range registry {
			names[i] = s.name
		}
		return names
	}
}

// schemaObjectsName names the catalog query of the schema check
// (schemaObjectsSQL, not a registered statement) in a mockspec.Statement.
const schemaObjectsName = "SchemaObjects"

type mockGen struct {
	b       *Backend
	migrate MigrateMode
}

// newMockGen validates and normalizes o, a postgres.Options, with
// configure, as New on a *sql.DB does. The inert client it hands configure is
// never used: the generator sends nothing.
func newMockGen(o any) (mockspec.Gen, error) {
	opts, ok := o.(Options)
	if !ok {
		return nil, fmt.Errorf("postgres: mock options are %T, not postgres.Options", o)
	}
	b, err := configure(pgclient.Inert(), opts)
	if err != nil {
		return nil, err
	}
	return &mockGen{b: b, migrate: opts.Migrate}, nil
}

func (g *mockGen) Tolerance() time.Duration { return g.b.tol }

// stmt is the statement s with args (as the backend built them) and rows.
func (g *mockGen) stmt(s *statement, args []any, cols []string, rows ...[]any) mockspec.Statement {
	args = pgclient.SQLArgs(args)
	if g.b.clock != nil {
		g.set(s, args, "now", mockspec.Now{})
	}
	return mockspec.Statement{Name: s.name, SQL: s.sql(g.b.st), Args: args, Columns: cols, Rows: rows}
}

// set replaces the argument of s's parameter name (if it has one) by v.
func (g *mockGen) set(s *statement, args []any, name string, v any) {
	if i := slices.Index(s.params, name); i >= 0 {
		args[i] = v
	}
}

// held replaces a token argument that is mockspec.HeldToken by its
// placeholder.
func (g *mockGen) held(s *statement, args []any, token string) {
	if token == mockspec.HeldToken {
		g.set(s, args, "token", mockspec.Held{})
	}
}

// columns names the columns of a row: n unnamed ones, then tail.
func columns(n int, tail ...string) []string {
	out := make([]string, 0, n+len(tail))
	for range n {
		out = append(out, "?column?")
	}
	return append(out, tail...)
}

// values returns what the scan targets dest hold, as one row of driver
// values: a nil pointer or a nil []byte is NULL.
func values(dest []any) []any {
	out := make([]any, len(dest))
	for i, d := range dest {
		v := reflect.ValueOf(d).Elem()
		if dv, ok := v.Interface().(driver.Valuer); ok {
			var err error
			if out[i], err = dv.Value(); err != nil {
				panic(err) // the row types' Value never fails
			}
			continue
		}
		switch {
		case v.Kind() == reflect.Pointer && v.IsNil(), v.Kind() == reflect.Slice && v.IsNil():
			out[i] = nil
		case v.Kind() == reflect.Pointer:
			out[i] = v.Elem().Interface()
		default:
			out[i] = v.Interface()
		}
	}
	return out
}

// dbTime is t as the server returns it: microseconds, UTC. The zero time
// stays zero.
func dbTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

// dbTimeP is dbTime for a NULLable column: the zero time is NULL.
func dbTimeP(t time.Time) pgclient.NullTime {
	if t.IsZero() {
		return pgclient.NullTime{}
	}
	return pgclient.NullTime{Time: dbTime(t), Valid: true}
}

// --- the inverse of each row's conversion ---

// workflowRowOf is the row from which workflowRow.workflow returns w.
func workflowRowOf(w contract.Workflow) workflowRow {
	return workflowRow{
		scope: string(w.Scope), id: w.ID, requestID: w.RequestID, status: string(w.Status),
		revision: w.Revision, snapshot: w.Snapshot, created: dbTime(w.CreatedAt), updated: dbTime(w.UpdatedAt),
	}
}

// keyRowOf is the row from which keyRow.record returns rec.
func keyRowOf(rec contract.KeyRecord) keyRow {
	r := keyRow{
		scope: string(rec.Scope), key: rec.Key, fingerprint: rec.Fingerprint, workflowID: rec.WorkflowID,
		state: string(rec.State), leaseUntil: dbTimeP(rec.LeaseUntil), created: dbTime(rec.CreatedAt),
		completed: dbTimeP(rec.CompletedAt), expires: dbTimeP(rec.ExpiresAt), forget: dbTimeP(rec.ForgetAt),
	}
	if o := rec.Outcome; o != nil {
		r.code, r.ref = pgclient.NullInt64{Int64: int64(o.Code), Valid: true}, pgclient.NullString{String: o.Ref, Valid: true}
		r.header, r.body = encodeHeader(o.Header), o.Body
	}
	return r
}

// leaseRowOf is the row from which leaseRow.lease returns l.
func leaseRowOf(l contract.Lease) leaseRow {
	return leaseRow{owner: l.Owner, token: l.Token, acquired: dbTime(l.AcquiredAt), expires: dbTime(l.ExpiresAt), value: valueParam(l.Value)}
}

// --- schema check ---

func (g *mockGen) Open(version int64, dirty bool) ([]mockspec.Statement, error) {
	if g.migrate == MigrateOff {
		return nil, nil
	}
	r := schemaVersionRow{version: version, dirty: dirty}
	out := []mockspec.Statement{g.stmt(qSchemaVersion.statement, nil, []string{"version", "dirty"}, values(r.dest()))}
	s := SchemaStatus{Schema: g.b.schema, Dirty: dirty, Latest: latestVersion}
	if version > 0 {
		s.Version = uint(version)
	}
	// prepareSchema: verify reads the objects of a current schema; auto
	// (migrateUp) does the same, stops on a newer clean schema, and
	// migrates anything else.
	switch {
	case s.Current():
		objects := mockspec.Statement{Name: schemaObjectsName, SQL: schemaObjectsSQL, Columns: []string{"nspname", "relname"}}
		for _, o := range schemaObjectList {
			objects.Rows = append(objects.Rows, []any{g.b.schema, o.name})
		}
		out = append(out, objects)
	case g.migrate == MigrateAuto && (s.Dirty || s.Version <= s.Latest):
		return nil, fmt.Errorf("postgres: migrate=auto would migrate a schema at version %d (dirty %v): not a mockable sequence; open with migrate=verify or off", s.Version, s.Dirty)
	}
	return out, nil
}

// --- workflows ---

func (g *mockGen) CreateWorkflow(w contract.Workflow, created *time.Time) []mockspec.Statement {
	var rows [][]any
	if created != nil {
		r := createdRow{created: dbTime(*created)}
		rows = append(rows, values(r.dest()))
	}
	return []mockspec.Statement{g.stmt(qCreateWorkflow.statement, qCreateWorkflow.args(g.b.createWorkflowParams(w)),
		columns(0, "created_at"), rows...)}
}

func (g *mockGen) GetWorkflow(scope contract.Scope, id string, found *contract.Workflow) []mockspec.Statement {
	var rows [][]any
	if found != nil {
		r := workflowRowOf(*found)
		rows = append(rows, values(r.dest()))
	}
	return []mockspec.Statement{g.stmt(qGetWorkflow.statement, qGetWorkflow.args(getWorkflowParams(scope, id)),
		columns(0, workflowColumns...), rows...)}
}

func (g *mockGen) UpdateWorkflow(u contract.Update, seen mockspec.UpdateSeen) []mockspec.Statement {
	cols := columns(2, workflowColumns...)
	found := seen.Applied || seen.Found
	var r updateWorkflowRow
	var rows [][]any
	if found {
		r = updateWorkflowRow{applied: seen.Applied, fenceOK: seen.Applied || seen.FenceOK, workflowRow: workflowRowOf(seen.Record)}
		rows = append(rows, values(r.dest()))
	}
	out := []mockspec.Statement{g.stmt(qUpdateWorkflow.statement, qUpdateWorkflow.args(g.b.updateWorkflowParams(u)), cols, rows...)}
	if seen.Applied {
		return out
	}
	if _, _, ok := explainUpdate(u, found, r.fenceOK, &r.workflowRow); ok {
		return out
	}
	// The statement's snapshot shows no reason: UpdateWorkflow reads once
	// more, and sees the same record.
	return append(out, g.stmt(qWhyWorkflow.statement, qWhyWorkflow.args(g.b.whyWorkflowParams(u)), cols, rows...))
}

func (g *mockGen) ListWorkflows(q contract.ListQuery, page []contract.Workflow) []mockspec.Statement {
	s, args := listWorkflowsStatement(q)
	var rows [][]any
	for _, w := range page {
		r := workflowRowOf(w)
		rows = append(rows, values(r.dest()))
	}
	return []mockspec.Statement{g.stmt(s, args, columns(0, workflowColumns...), rows...)}
}

// --- idempotency keys ---

func (g *mockGen) ClaimKey(req contract.ClaimRequest, o mockspec.ClaimOutcome, rec contract.KeyRecord, contended bool) []mockspec.Statement {
	r := claimKeyRow{flags: int64(claimrule.Found | claimrule.Live | claimrule.Match), keyRow: keyRowOf(rec)}
	switch o {
	case mockspec.ClaimOutcome(contract.ClaimNew):
		// The statement read no row and the function took the key.
		r = claimKeyRow{taken: claimTakenNew, now: dbTime(rec.CreatedAt), until: dbTime(rec.LeaseUntil), keyRow: keyRowOf(contract.KeyRecord{})}
	case mockspec.ClaimOutcome(contract.ClaimReclaimed):
		r.taken, r.flags, r.now, r.until = claimTakenReclaim, r.flags|int64(claimrule.Lapsed), dbTime(rec.LeaseUntil.Add(-req.TTL)), dbTime(rec.LeaseUntil)
	case mockspec.ClaimOutcome(contract.ClaimCompleted), mockspec.ClaimOutcome(contract.ClaimInFlight):
	case mockspec.ClaimKeyConflict:
		r.flags &^= int64(claimrule.Match)
	case mockspec.ClaimOutcomeExpired:
		r.flags |= int64(claimrule.Expired)
	default:
		panic(fmt.Sprintf("pgmock: unknown claim outcome %d", o))
	}
	g.checkClaim(req, o, rec, &r)
	token := req.Token
	if token == "" {
		token = "pgmock-token"
	}
	p := g.b.claimKeyParams(req, token)
	s := qClaimKey.statement
	if !contended {
		st := g.stmt(s, qClaimKey.args(p), columns(4, keyColumns...), values(r.dest()))
		g.token(s, st.Args, req, true)
		return []mockspec.Statement{st}
	}
	// Every optimistic attempt reads no row yet takes nothing (a claim
	// committed after its snapshot, released again before the next).
	var out []mockspec.Statement
	for i := range g.b.claimRounds {
		none := claimKeyRow{keyRow: keyRowOf(contract.KeyRecord{})}
		st := g.stmt(s, qClaimKey.args(p), columns(4, keyColumns...), values(none.dest()))
		g.token(s, st.Args, req, i == 0)
		out = append(out, st)
	}
	out = append(out, mockspec.Statement{Control: mockspec.TxBegin})
	// The locked form: it inserted the claim (New), or locked the row
	// whose facts r holds.
	lr := r
	lr.taken = claimTakenNone
	switch o {
	case mockspec.ClaimOutcome(contract.ClaimNew):
		lr.taken = claimTakenNew
	case mockspec.ClaimOutcome(contract.ClaimReclaimed):
		// The abandoned claim, as the lock reads it before the write.
		lr.keyRow = keyRowOf(rec)
		lr.leaseUntil = dbTimeP(rec.LeaseUntil.Add(-req.TTL).Add(-g.b.tol - time.Second))
	}
	lock := g.stmt(qClaimKeyLock.statement, qClaimKeyLock.args(p), columns(4, keyColumns...), values(lr.dest()))
	g.token(qClaimKeyLock.statement, lock.Args, req, false)
	out = append(out, lock)
	switch o {
	case mockspec.ClaimOutcome(contract.ClaimNew):
		return append(out, mockspec.Statement{Control: mockspec.TxCommit})
	case mockspec.ClaimOutcome(contract.ClaimReclaimed):
		tp := claimTakeParams{Now: lr.now, Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint,
			WorkflowID: req.WorkflowID, Token: token, TTL: req.TTL}
		k := keyRowOf(rec)
		take := g.stmt(qClaimKeyTake.statement, qClaimKeyTake.args(tp), columns(0, keyColumns...), values(k.dest()))
		g.token(qClaimKeyTake.statement, take.Args, req, false)
		return append(out, take, mockspec.Statement{Control: mockspec.TxCommit})
	}
	return append(out, mockspec.Statement{Control: mockspec.TxRollback})
}

// checkClaim panics unless the backend decides o from the row r of the
// claim req.
func (g *mockGen) checkClaim(req contract.ClaimRequest, o mockspec.ClaimOutcome, rec contract.KeyRecord, r *claimKeyRow) {
	c, err, decided := claimResult(req, r, "")
	want := map[mockspec.ClaimOutcome]contract.Code{mockspec.ClaimKeyConflict: contract.KeyConflict, mockspec.ClaimOutcomeExpired: contract.OutcomeExpired}[o]
	switch {
	case !decided, want != 0 && contract.CodeOf(err) != want,
		want == 0 && (err != nil || c.Kind != contract.ClaimKind(o)):
		panic(fmt.Sprintf("pgmock: the mocked ClaimKey row for outcome %d decides %v, %v (record %+v)", o, c.Kind, err, rec))
	}
}

// token sets the token argument of a claim's statement s: the request's
// own token, or the placeholder of the token ClaimKey draws (NewToken in
// its first statement, Held in the later ones, which send the same).
func (g *mockGen) token(s *statement, args []any, req contract.ClaimRequest, first bool) {
	switch {
	case req.Token != "":
		g.set(s, args, "token", req.Token)
	case first:
		g.set(s, args, "token", mockspec.NewToken{})
	default:
		g.set(s, args, "token", mockspec.Held{})
	}
}

// completeKey is the statement s (CompleteKey's or CompleteKeyTx's, which
// have the same parameters and row) for the outcome o.
func (g *mockGen) completeKey(s *statement, c contract.Completion, o mockspec.CompleteOutcome, rec contract.KeyRecord) []mockspec.Statement {
	r := completeKeyRow{tokenOK: true, live: true, fenceOK: true, keyRow: keyRowOf(rec)}
	found := true
	switch o {
	case mockspec.CompleteApplied:
		r.applied = true
	case mockspec.CompleteReplayed:
	case mockspec.CompleteStale:
		found = false
	case mockspec.CompleteFenceInvalid:
		r.fenceOK = false
	default:
		panic(fmt.Sprintf("pgmock: unknown completion outcome %d", o))
	}
	_, err, decided := completeResult(c, found, &r)
	want := contract.Unknown
	if o == mockspec.CompleteStale || o == mockspec.CompleteFenceInvalid {
		want = contract.Fenced
	}
	if !decided || contract.CodeOf(err) != want || (err == nil) != (want == contract.Unknown) {
		panic(fmt.Sprintf("pgmock: the mocked CompleteKey row for outcome %d decides %v (record %+v, fence %v)", o, err, rec, c.Fence))
	}
	var rows [][]any
	if found {
		rows = append(rows, values(r.dest()))
	}
	st := g.stmt(s, qCompleteKey.args(g.b.completeKeyParams(c)), columns(4, keyColumns...), rows...)
	g.held(s, st.Args, c.Token)
	return []mockspec.Statement{st}
}

func (g *mockGen) CompleteKey(c contract.Completion, o mockspec.CompleteOutcome, rec contract.KeyRecord) []mockspec.Statement {
	return g.completeKey(qCompleteKey.statement, c, o, rec)
}

func (g *mockGen) CompleteKeyTx(c contract.Completion, o mockspec.CompleteOutcome, rec contract.KeyRecord) []mockspec.Statement {
	return g.completeKey(qCompleteKeyTx.statement, c, o, rec)
}

func (g *mockGen) BeginTx() []mockspec.Statement {
	return []mockspec.Statement{{Control: mockspec.TxBegin}}
}

func (g *mockGen) RenewKey(k contract.KeyRef, token string, ttl time.Duration, renewed *contract.KeyRecord) []mockspec.Statement {
	var rows [][]any
	if renewed != nil {
		r := keyRowOf(*renewed)
		rows = append(rows, values(r.dest()))
	}
	s := qRenewKey.statement
	st := g.stmt(s, qRenewKey.args(g.b.renewKeyParams(k, token, ttl)), columns(0, keyColumns...), rows...)
	g.held(s, st.Args, token)
	return []mockspec.Statement{st}
}

func (g *mockGen) ReleaseKey(k contract.KeyRef, token string, released bool) []mockspec.Statement {
	r := countRow{}
	if released {
		r.n = 1
	}
	s := qReleaseKey.statement
	st := g.stmt(s, qReleaseKey.args(g.b.releaseKeyParams(k, token)), columns(0, "count"), values(r.dest()))
	g.held(s, st.Args, token)
	return []mockspec.Statement{st}
}

func (g *mockGen) GetKey(k contract.KeyRef, found *contract.KeyRecord) []mockspec.Statement {
	var rows [][]any
	if found != nil {
		r := keyRowOf(*found)
		rows = append(rows, values(r.dest()))
	}
	return []mockspec.Statement{g.stmt(qGetKey.statement, qGetKey.args(g.b.getKeyParams(k)), columns(0, keyColumns...), rows...)}
}

// --- leases ---

func (g *mockGen) leaseRows(l *contract.Lease) [][]any {
	if l == nil {
		return nil
	}
	r := leaseRowOf(*l)
	return [][]any{values(r.dest())}
}

// grantColumns are the columns of a grant: the lease's, and whether the
// statement notified.
var grantColumns = append(slices.Clone(leaseColumns), "notified")

// AcquireLease: a grant nobody watches (it does not notify).
func (g *mockGen) AcquireLease(req contract.LeaseRequest, granted *contract.Lease) []mockspec.Statement {
	var rows [][]any
	if granted != nil {
		r := grantRow{leaseRow: leaseRowOf(*granted)}
		rows = append(rows, values(r.dest()))
	}
	s, args := qAcquireLease.statement, qAcquireLease.args(g.b.acquireLeaseParams(req))
	if semaphore, ok := semaphoreOf(req.Resource); ok {
		s, args = qAcquireLeaseOnPermit.statement, qAcquireLeaseOnPermit.args(acquirePermitLeaseParams{g.b.acquireLeaseParams(req), semaphore})
	}
	return []mockspec.Statement{g.stmt(s, args, grantColumns, rows...)}
}

// AcquirePermit: one statement, which grants granted (a permit nobody
// watches), or finds every permit held (granted nil).
func (g *mockGen) AcquirePermit(req contract.PermitRequest, granted *contract.Lease) []mockspec.Statement {
	r := permitRow{}
	if granted != nil {
		base, n, ok := contract.SplitPermit(granted.Resource)
		if !ok || base != req.Resource || n > req.Permits {
			panic(fmt.Sprintf("pgmock: a permit %q granted for %d permits of %q", granted.Resource, req.Permits, req.Resource))
		}
		r = permitRow{granted: true, free: true, resource: granted.Resource, grantRow: grantRow{leaseRow: leaseRowOf(*granted)}}
	}
	// Not granted: the grant's columns hold placeholders, which the
	// backend ignores.
	return []mockspec.Statement{g.stmt(qAcquirePermit.statement, qAcquirePermit.args(g.b.acquirePermitParams(req)),
		columns(2, append([]string{"resource"}, grantColumns...)...), values(r.dest()))}
}

func (g *mockGen) RenewLease(l contract.Lease, ttl time.Duration, renewed *contract.Lease) []mockspec.Statement {
	return []mockspec.Statement{g.stmt(qRenewLease.statement, qRenewLease.args(g.b.renewLeaseParams(l, ttl)),
		columns(0, leaseColumns...), g.leaseRows(renewed)...)}
}

func (g *mockGen) ReleaseLease(l contract.Lease, released bool) []mockspec.Statement {
	var rows [][]any
	if released {
		r := releaseRow{token: l.Token}
		rows = append(rows, values(r.dest()))
	}
	s, args := qReleaseLease.statement, qReleaseLease.args(g.b.releaseLeaseParams(l))
	if semaphore, ok := semaphoreOf(l.Resource); ok {
		s, args = qReleasePermit.statement, qReleasePermit.args(releasePermitParams{g.b.releaseLeaseParams(l), semaphore})
	}
	return []mockspec.Statement{g.stmt(s, args, columns(0, "token", "notified"), rows...)}
}

func (g *mockGen) GetLease(scope contract.Scope, resource string, found *contract.Lease) []mockspec.Statement {
	return []mockspec.Statement{g.stmt(qGetLease.statement, qGetLease.args(getLeaseParamsOf(scope, resource)),
		columns(0, leaseColumns...), g.leaseRows(found)...)}
}

func (g *mockGen) FenceTx(scope contract.Scope, fence *contract.Fence, valid bool) []mockspec.Statement {
	if fence == nil {
		panic("pgmock: FenceTx without a fence sends nothing")
	}
	var rows [][]any
	if valid {
		r := tokenRow{token: fence.Token}
		rows = append(rows, values(r.dest()))
	}
	return []mockspec.Statement{g.stmt(qFenceTx.statement, qFenceTx.args(g.b.fenceTxParams(scope, fence)),
		columns(0, "token"), rows...)}
}

// --- cleanup ---

func (g *mockGen) Cleanup(req contract.CleanupRequest, res contract.CleanupResult) []mockspec.Statement {
	r := cleanupRow{workflows: int64(res.Workflows), keys: int64(res.Keys), leases: int64(res.Leases), more: res.More,
		notified: int64(res.Keys), outcomes: int64(res.Outcomes)}
	return []mockspec.Statement{g.stmt(qCleanup.statement, qCleanup.args(g.b.cleanupParams(req)), columns(7), values(r.dest()))}
}

func (g *mockGen) CountCleanup(req contract.CleanupRequest, res contract.CleanupResult) []mockspec.Statement {
	// The statement counts each kind up to limit+1; CountCleanup reports
	// More when one count passed the limit.
	lim := req.Limit
	counts := []int{res.Workflows, res.Keys, res.Leases, res.Outcomes}
	if res.More {
		i := slices.Index(counts, lim)
		if i < 0 {
			panic(fmt.Sprintf("pgmock: CountCleanup reports More only when a count reaches the limit %d: %+v", lim, res))
		}
		counts[i] = lim + 1
	}
	r := countCleanupRow{workflows: int64(counts[0]), keys: int64(counts[1]), leases: int64(counts[2]), outcomes: int64(counts[3])}
	return []mockspec.Statement{g.stmt(qCountCleanup.statement, qCountCleanup.args(g.b.countCleanupParams(req)), columns(4), values(r.dest()))}
}

func (g *mockGen) DeleteRecord(kind contract.RecordKind, scope contract.Scope, id string, found bool) []mockspec.Statement {
	r := deleteRecordRow{found: found}
	if found && kind == contract.KindKey {
		r.notified = 1
	}
	return []mockspec.Statement{g.stmt(qDeleteRecord.statement, qDeleteRecord.args(g.b.deleteRecordParams(kind, scope, id)),
		columns(2), values(r.dest()))}
}

// --- operator lists ---

// checkPage panics unless ids, the page's identifiers, can be a page of a
// list in scope after after of at most limit records (0: no limit), each
// in scope.
func checkPage(op string, scope contract.Scope, after string, limit int, scopes []contract.Scope, ids []string) {
	if limit > 0 && len(ids) > limit {
		panic(fmt.Sprintf("pgmock: a %s page of %d records for a limit of %d", op, len(ids), limit))
	}
	prev := after
	for i, id := range ids {
		if scopes[i] != scope {
			panic(fmt.Sprintf("pgmock: a %s page lists a record of scope %q for scope %q", op, scopes[i], scope))
		}
		if id <= prev {
			panic(fmt.Sprintf("pgmock: a %s page lists %q after %q: pages are in byte order, after the cursor", op, id, prev))
		}
		prev = id
	}
}

func (g *mockGen) ListKeys(q contract.KeyListQuery, page []contract.KeyRecord) []mockspec.Statement {
	scopes, ids := make([]contract.Scope, len(page)), make([]string, len(page))
	var rows [][]any
	for i, rec := range page {
		if q.State != "" && rec.State != q.State {
			panic(fmt.Sprintf("pgmock: a ListKeys page for state %q lists a key in state %q", q.State, rec.State))
		}
		scopes[i], ids[i] = rec.Scope, rec.Key
		r := keyRowOf(rec)
		rows = append(rows, values(r.dest()))
	}
	checkPage("ListKeys", q.Scope, q.After, q.Limit, scopes, ids)
	s, args := g.b.listKeysStatement(q)
	return []mockspec.Statement{g.stmt(s, args, columns(0, keyColumns...), rows...)}
}

func (g *mockGen) ListLeases(q contract.LeaseListQuery, page []contract.Lease) []mockspec.Statement {
	scopes, ids := make([]contract.Scope, len(page)), make([]string, len(page))
	var rows [][]any
	for i, l := range page {
		scopes[i], ids[i] = l.Scope, l.Resource
		r := listedLeaseRow{scope: string(l.Scope), resource: l.Resource, leaseRow: leaseRowOf(l)}
		rows = append(rows, values(r.dest()))
	}
	checkPage("ListLeases", q.Scope, q.After, q.Limit, scopes, ids)
	s, args := g.b.listLeasesStatement(q)
	return []mockspec.Statement{g.stmt(s, args, columns(0, append([]string{"scope", "resource"}, leaseColumns...)...), rows...)}
}

// --- failures ---

// Fail: a statement that fails is sent again as Backend.do does (a
// serialization failure or a deadlock, or a failure marked safe to retry),
// except the version read, which readStatus runs once. (database/sql also
// re-sends a read after driver.ErrBadConn, on another connection; a
// sqlmock *sql.DB has only one, which that error closes for good, so the
// mock sees the statement once and the re-sends fail to connect, which
// the backend reports as a real server's would: Unavailable.)
func (g *mockGen) Fail(s mockspec.Statement, err error) mockspec.Statement {
	if err == nil {
		panic("pgmock: a mocked failure needs an error")
	}
	s.Rows, s.Err, s.Times = nil, err, 1
	if s.Name != qSchemaVersion.name && (retryableTx(err) || pgclient.SafeToRetry(err) && configFailure(err, endpoint{}, false) == nil) {
		s.Times = maxTxRetries + 1 // Backend.do's condition
	}
	return s
}
