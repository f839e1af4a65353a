// Package pgmock registers, on a go-sqlmock mock, the exact statements
// that durable's PostgreSQL backend sends for one operation and the
// server's answer for the outcome a test chooses. It is for services whose
// unit tests already mock database/sql with github.com/DATA-DOG/go-sqlmock
// and open durable on that *sql.DB with postgres.New: one line per
// durable call, and no SQL, argument order or result columns in the test.
//
//	db, mock, _ := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
//	opts := postgres.Options{Schema: "billing", Migrate: postgres.MigrateOff}
//	store, _ := postgres.New(ctx, db, opts)
//	m := pgmock.New(mock, pgmock.Backend(opts), pgmock.MatchEqual())
//
//	m.ExpectClaimKey(req).New()
//	m.ExpectCompleteKey(durable.Completion{KeyRef: req.KeyRef, Outcome: out}).Stores()
//	res, err := store.Do(ctx, req, durable.DoOptions{}, charge) // runs charge
//
// # Where the statements come from
//
// pgmock holds no SQL. The text of every statement, its arguments as the
// backend builds them from the request, and its result rows come from the
// backend's own statement definitions and conversions, through an internal
// bridge, so the expectations follow the backend from release to release.
//
// # What the Store sends
//
// Each Expect method takes the request the code under test passes to the
// Store (not to the backend) and runs it through a Store built with the
// same options ([Store]) over a recorder, so that the Store's defaults
// (the default claim and lease TTLs, key retention, list and cleanup
// limits, StatusPending) and its validation apply exactly: a request the
// Store rejects sends nothing, and its Expect method panics saying why.
//
// # Outcomes
//
// An Expect method registers nothing by itself: the outcome method called
// on its result (Returns, NotFound, New, Granted, FailsWith, …) registers
// the statements, in order, with the rows the server would return for
// that outcome, and returns what the Store call will return where there is
// something to return. Some outcomes send more than one statement (an
// UpdateWorkflow whose snapshot shows no reason reads again) or the same
// one several times (FailsWith a serialization failure, which the backend
// retries); pgmock registers all of them. Calling a second Expect method
// before choosing the first one's outcome panics.
//
// Store.WatchLease has no helper: on a go-sqlmock *sql.DB, which cannot
// LISTEN, a watch polls the lease's rows in a goroutine of its own, at
// times no sequence of expectations can follow. Test code that waits for
// a lease on such a mock should not watch it.
//
// FailsWith(err) makes the first statement fail with the driver error err
// (for example a *pq.Error or a *pgconn.PgError with its SQLSTATE, or
// driver.ErrBadConn), as often as the backend would send it, so the Store
// returns the same durable error as on a real server: 23505 →
// ErrAlreadyExists, 40001 → retried, then ErrUnavailable, 57014 →
// ErrUnavailable, driver.ErrBadConn on a write → ErrOutcomeUnknown, and so
// on, as the backend maps a driver's errors.
//
// # Claim tokens
//
// ClaimKey sends a new random token (32 hex digits) that the test cannot
// choose: the expectation accepts any such token, and the Claim the Store
// returns carries it. Every later expectation on the same key whose token
// is "" (ExpectCompleteKey with a zero Completion.Token, ExpectRenewKey,
// ExpectReleaseKey) expects exactly that token, which is what Store.Do and
// a service that passes the claim's token on do.
//
// # Times
//
// With [postgres.Options].Clock set, @now is the clock's time and must be
// the same when the statement runs as the clock says when it is matched (a
// test clock). Without it the backend sends NULL (the server's now()) and
// the rows carry the mocked server's time: [ServerTime], or the local time
// when the expectation is made. Times in rows are cut to the microsecond,
// as PostgreSQL stores them.
//
// # Matching SQL
//
// sqlmock does not tell which QueryMatcher a mock was created with. By
// default pgmock registers each statement as an anchored regular
// expression of its quoted text (regexp.QuoteMeta), for sqlmock's default
// QueryMatcherRegexp; with [MatchEqual] it registers the exact text, for
// sqlmock.QueryMatcherEqual. Either way the statement must match exactly.
//
// # Opening
//
// With Migrate: postgres.MigrateOff building the backend sends nothing.
// With MigrateVerify (or MigrateAuto on a current schema) it reads the
// schema version and lists the schema's objects: [Mock.ExpectOpen].
//
// # What is not mocked
//
// WaitKey on a sqlmock *sql.DB polls GetKey (sqlmock cannot LISTEN):
// expect one GetKey per poll. Migrations (MigrateAuto on a schema that is
// not current, Backend.Migrate) are not mockable sequences; open with
// MigrateOff or MigrateVerify in unit tests. Most unit tests need no SQL
// at all: durable's memory backend (backends/memory) is the simpler
// double; pgmock is for code that must run on the *sql.DB it already
// mocks.
package pgmock

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/backends/postgres/internal/mockspec"
	"github.com/durable-go/durable/contract"
)

// Mock registers durable's statements on a sqlmock.Sqlmock. It is safe
// for concurrent use, though expectations are ordered: register them in
// the order the code under test calls the Store.
type Mock struct {
	mu         sync.Mutex
	mock       sqlmock.Sqlmock
	gen        mockspec.Gen
	backend    postgres.Options
	store      *durable.Store // the probe: a Store with the caller's options over rec
	rec        *recorder
	exact      bool
	serverTime time.Time
	retention  time.Duration             // the Store's key retention
	tombstone  time.Duration             // the Store's tombstone retention (0: none, ForgetAt = ExpiresAt)
	claims     map[durable.KeyRef]*claim // the last expected claim of each key
	pending    *expectation
	sent       map[string]bool // the statements registered, by name
}

// claim is what an expected ClaimKey (New or Reclaimed) left for the
// expectations after it on the same key.
type claim struct {
	req     durable.ClaimRequest
	created time.Time
	token   *tokenCell
}

// An Option configures a Mock.
type Option func(*config)

type config struct {
	backend    postgres.Options
	store      []durable.Option
	exact      bool
	serverTime time.Time
}

// Backend gives the options the code under test passes to
// postgres.New: the schema, the tolerance, the clock and the migrate
// mode decide the statements. Without it: postgres.Options{} (schema
// "durable", migrate=auto).
func Backend(opts postgres.Options) Option { return func(c *config) { c.backend = opts } }

// Schema sets only the schema of the backend's options.
func Schema(name string) Option { return func(c *config) { c.backend.Schema = name } }

// Store gives the options of the Store (postgres.New's storeOpts):
// the default TTLs, the key retention and the size limits decide what the
// Store sends and accepts.
func Store(opts ...durable.Option) Option {
	return func(c *config) { c.store = append(c.store, opts...) }
}

// MatchEqual registers the exact text of each statement, for a mock
// created with sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual).
// Without it pgmock registers quoted, anchored regular expressions, for
// sqlmock's default QueryMatcherRegexp.
func MatchEqual() Option { return func(c *config) { c.exact = true } }

// ServerTime sets the time of the mocked server's now(), which the rows
// carry when the backend has no injected clock (default: the local time
// when each expectation is made).
func ServerTime(t time.Time) Option { return func(c *config) { c.serverTime = t } }

// New returns a Mock that registers expectations on mock. It panics when
// the options are invalid (postgres.New or durable.New would fail
// with them).
func New(mock sqlmock.Sqlmock, opts ...Option) *Mock {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if mock == nil {
		panic("pgmock: New needs a sqlmock.Sqlmock")
	}
	gen, err := mockspec.New(cfg.backend)
	if err != nil {
		panic("pgmock: invalid backend options: " + err.Error())
	}
	rec := &recorder{tol: gen.Tolerance()}
	store, err := durable.New(rec, cfg.store...)
	if err != nil {
		panic("pgmock: invalid store options: " + err.Error())
	}
	m := &Mock{
		mock: mock, gen: gen, backend: cfg.backend, store: store, rec: rec, exact: cfg.exact,
		serverTime: cfg.serverTime, claims: map[durable.KeyRef]*claim{}, sent: map[string]bool{},
	}
	c := capture[durable.Completion](m, "CompleteKey", func(ctx context.Context, s *durable.Store) error {
		_, err := s.CompleteKey(ctx, durable.Completion{KeyRef: durable.KeyRef{Key: "k"}, Token: "t"})
		return err
	})
	m.retention, m.tombstone = c.Retain, c.Tombstone
	return m
}

// now is the mocked server's time for new rows.
func (m *Mock) now() time.Time {
	var t time.Time
	switch {
	case m.backend.Clock != nil:
		t = m.backend.Clock.Now()
	case !m.serverTime.IsZero():
		t = m.serverTime
	default:
		t = time.Now()
	}
	return t.UTC().Truncate(time.Microsecond)
}

// orNow is t, or the server's time when t is zero, as the server stores
// it.
func (m *Mock) orNow(t time.Time) time.Time {
	if t.IsZero() {
		return m.now()
	}
	return t.UTC().Truncate(time.Microsecond)
}

// dbTime is t as the server stores it: UTC, to the microsecond; the zero
// time stays zero.
func dbTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Microsecond)
}

// --- expectations ---

// expectation is what every Expect method returns: it waits for its
// outcome.
type expectation struct {
	m     *Mock
	op    string
	first func() mockspec.Statement // the operation's first statement, for FailsWith
	done  bool
}

// begin starts the expectation of op, after checking that the previous
// one has its outcome.
func (m *Mock) begin(op string, first func() mockspec.Statement) expectation {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.pending; p != nil && !p.done {
		panic("pgmock: Expect" + p.op + " has no outcome: call one of its methods (Returns, NotFound, FailsWith, …) before Expect" + op)
	}
	return expectation{m: m, op: op, first: first}
}

// track makes e the pending expectation; every Expect method calls it on
// the value it returns.
func (m *Mock) track(e *expectation) {
	m.mu.Lock()
	m.pending = e
	m.mu.Unlock()
}

// finish registers stmts as e's outcome.
func (e *expectation) finish(stmts []mockspec.Statement) {
	m := e.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.done {
		panic("pgmock: Expect" + e.op + " already has an outcome")
	}
	e.done = true
	for _, s := range stmts {
		m.register(s)
	}
}

// FailsWith makes the operation's first statement fail with the driver
// error err, as often as the backend sends it then (a serialization
// failure or a deadlock is retried), so that the Store returns the error a
// real server would cause. driver.ErrBadConn closes the only connection
// of a sqlmock *sql.DB for good: every later statement on it fails to
// connect (and database/sql's re-sends of a read do), so make it the last
// statement of a test.
func (e *expectation) FailsWith(err error) {
	e.finish([]mockspec.Statement{e.m.gen.Fail(e.first(), err)})
}

// register adds s to the mock (m.mu held).
func (m *Mock) register(s mockspec.Statement) {
	switch s.Control {
	case mockspec.TxBegin:
		m.mock.ExpectBegin()
		return
	case mockspec.TxCommit:
		m.mock.ExpectCommit()
		return
	case mockspec.TxRollback:
		m.mock.ExpectRollback()
		return
	}
	m.sent[s.Name] = true
	text := s.SQL
	if !m.exact {
		text = "^" + regexp.QuoteMeta(text) + "$"
	}
	args := make([]driver.Value, len(s.Args))
	for i, a := range s.Args {
		args[i] = m.arg(a)
	}
	for range max(s.Times, 1) {
		e := m.mock.ExpectQuery(text)
		if len(args) == 0 {
			e.WithoutArgs()
		} else {
			e.WithArgs(args...)
		}
		if s.Err != nil {
			e.WillReturnError(s.Err)
			continue
		}
		rows := m.mock.NewRows(s.Columns)
		for _, r := range s.Rows {
			vals := make([]driver.Value, len(r))
			for i, v := range r {
				vals[i] = v
			}
			rows.AddRow(vals...)
		}
		e.WillReturnRows(rows)
	}
}

// arg turns a placeholder of the bridge into a sqlmock.Argument.
func (m *Mock) arg(a any) driver.Value {
	switch a.(type) {
	case mockspec.Now:
		return clockArg{clock: m.backend.Clock}
	case mockspec.NewToken:
		return newTokenArg{cell: &tokenCell{}}
	case mockspec.Held:
		panic("pgmock: a held token without its claim")
	}
	return a
}

// clockArg matches @now of a backend with an injected clock: the clock's
// time, cut to the microsecond as the backend sends it.
type clockArg struct{ clock contract.Clock }

func (a clockArg) Match(v driver.Value) bool {
	t, ok := v.(time.Time)
	return ok && t.Equal(a.clock.Now().Truncate(time.Microsecond))
}

// tokenCell holds the token a ClaimKey expectation saw.
type tokenCell struct {
	mu sync.Mutex
	v  string
}

func (c *tokenCell) get() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.v
}

// newTokenArg matches the token of a new claim and keeps it: a token of
// the contract's form (16–128 bytes of printable ASCII), the backend's
// own or one the caller chose (Store.Do and the middleware choose one per
// call, durable.NewClaimToken).
type newTokenArg struct{ cell *tokenCell }

func (a newTokenArg) Match(v driver.Value) bool {
	s, ok := v.(string)
	if !ok || len(s) < 16 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	a.cell.mu.Lock()
	a.cell.v = s
	a.cell.mu.Unlock()
	return true
}

// heldTokenArg matches the token an earlier claim expectation kept.
type heldTokenArg struct{ cell *tokenCell }

func (a heldTokenArg) Match(v driver.Value) bool {
	s, ok := v.(string)
	return ok && s != "" && s == a.cell.get()
}

// withTokens replaces the token placeholders of stmts: NewToken by an
// argument that keeps the token in cell, Held by one that expects the
// token in cell.
func withTokens(stmts []mockspec.Statement, cell *tokenCell) []mockspec.Statement {
	for i := range stmts {
		args := append([]any(nil), stmts[i].Args...)
		for j, a := range args {
			switch a.(type) {
			case mockspec.NewToken:
				args[j] = newTokenArg{cell: cell}
			case mockspec.Held:
				args[j] = heldTokenArg{cell: cell}
			}
		}
		stmts[i].Args = args
	}
	return stmts
}

// heldToken returns the token to give the Store for a token argument:
// token itself, or, when it is "", a placeholder that stands for the token
// of the last expected claim of k, and that claim.
func (m *Mock) heldToken(op string, k durable.KeyRef, token string) (string, *claim) {
	if token != "" {
		return token, nil
	}
	m.mu.Lock()
	c := m.claims[k]
	m.mu.Unlock()
	if c == nil {
		panic(fmt.Sprintf("pgmock: Expect%s with no token: no earlier ExpectClaimKey(…).New() or .Reclaimed() on key %q in scope %q gives one", op, k.Key, k.Scope))
	}
	return mockspec.HeldToken, c
}

// claimOf returns the last expected claim of k, or nil.
func (m *Mock) claimOf(k durable.KeyRef) *claim {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claims[k]
}

// sentNames reports the names of the statements m registered so far (the
// names of the backend's statement registry), for pgmock's own tests.
func (m *Mock) sentNames() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]bool, len(m.sent))
	for k := range m.sent {
		out[k] = true
	}
	return out
}

// --- the probe: the Store's own defaults and validation ---

// errProbe ends every call of the recorder.
var errProbe = errors.New("pgmock: probe")

// capture runs call on m's probe Store and returns the request that reached
// the backend. It panics when the Store sent nothing (it rejected the
// request).
func capture[T any](m *Mock, op string, call func(ctx context.Context, s *durable.Store) error) T {
	m.rec.mu.Lock()
	defer m.rec.mu.Unlock()
	m.rec.got = nil
	err := call(context.Background(), m.store)
	v, ok := m.rec.got.(T)
	if !ok {
		panic(fmt.Sprintf("pgmock: the Store sends nothing for this %s: %v", op, err))
	}
	return v
}

// recorder is the backend of the probe Store: it keeps the request it is
// given.
type recorder struct {
	mu  sync.Mutex
	tol time.Duration
	got any
}

type renewKeyReq struct {
	k     durable.KeyRef
	token string
	ttl   time.Duration
}

type keyTokenReq struct {
	k     durable.KeyRef
	token string
}

type renewLeaseReq struct {
	l   durable.Lease
	ttl time.Duration
}

type scopedIDReq struct {
	scope durable.Scope
	id    string
}

type deleteReq struct {
	kind  contract.RecordKind
	scope durable.Scope
	id    string
}

type countReq struct{ req durable.CleanupRequest }

var (
	_ contract.Backend           = (*recorder)(nil)
	_ contract.ToleranceReporter = (*recorder)(nil)
	_ contract.CleanupCounter    = (*recorder)(nil)
	_ contract.RecordDeleter     = (*recorder)(nil)
	_ contract.RecordLister      = (*recorder)(nil)
	_ contract.PermitAcquirer    = (*recorder)(nil)
)

func (r *recorder) keep(v any) error { r.got = v; return errProbe }

func (r *recorder) ClockTolerance() time.Duration { return r.tol }

func (r *recorder) CreateWorkflow(_ context.Context, w contract.Workflow) (contract.Workflow, error) {
	return contract.Workflow{}, r.keep(w)
}

func (r *recorder) GetWorkflow(_ context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	return contract.Workflow{}, r.keep(scopedIDReq{scope, id})
}

func (r *recorder) UpdateWorkflow(_ context.Context, u contract.Update) (contract.Workflow, error) {
	return contract.Workflow{}, r.keep(u)
}

func (r *recorder) ListWorkflows(_ context.Context, q contract.ListQuery) ([]contract.Workflow, error) {
	return nil, r.keep(q)
}

func (r *recorder) ClaimKey(_ context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	return contract.Claim{}, r.keep(req)
}

func (r *recorder) CompleteKey(_ context.Context, c contract.Completion) (contract.KeyRecord, error) {
	return contract.KeyRecord{}, r.keep(c)
}

func (r *recorder) RenewKey(_ context.Context, k contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	return contract.KeyRecord{}, r.keep(renewKeyReq{k, token, ttl})
}

func (r *recorder) ReleaseKey(_ context.Context, k contract.KeyRef, token string) (bool, error) {
	return false, r.keep(keyTokenReq{k, token})
}

func (r *recorder) GetKey(_ context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	return contract.KeyRecord{}, r.keep(k)
}

func (r *recorder) AcquireLease(_ context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	return contract.Lease{}, r.keep(req)
}

func (r *recorder) AcquirePermit(_ context.Context, req contract.PermitRequest) (contract.Lease, error) {
	return contract.Lease{}, r.keep(req)
}

func (r *recorder) RenewLease(_ context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	return contract.Lease{}, r.keep(renewLeaseReq{l, ttl})
}

func (r *recorder) ReleaseLease(_ context.Context, l contract.Lease) (bool, error) {
	return false, r.keep(l)
}

func (r *recorder) GetLease(_ context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	return contract.Lease{}, r.keep(scopedIDReq{scope, resource})
}

func (r *recorder) Cleanup(_ context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	return contract.CleanupResult{}, r.keep(req)
}

func (r *recorder) CountCleanup(_ context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	return contract.CleanupResult{}, r.keep(countReq{req})
}

func (r *recorder) DeleteRecord(_ context.Context, kind contract.RecordKind, scope contract.Scope, id string) (bool, error) {
	return false, r.keep(deleteReq{kind, scope, id})
}

func (r *recorder) ListKeys(_ context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	return nil, r.keep(q)
}

func (r *recorder) ListLeases(_ context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	return nil, r.keep(q)
}

func (r *recorder) Close() error { return nil }
