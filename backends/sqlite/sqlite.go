package sqlite

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/coalesce"
	"go.uber.org/multierr"
	_ "modernc.org/sqlite" // registers the database/sql driver "sqlite"
)

func init() {
	durable.Register("sqlite", driver{})
}

// Clock tells the backend what time it is. Expiry is judged on it alone.
//
// Deprecated: use contract.Clock; this alias remains for one release.
type Clock = contract.Clock

// MemoryPath is the Path of a private in-memory database: one per backend,
// gone when the backend closes.
const MemoryPath = ":memory:"

// Defaults of Options and of the DSN.
const (
	DefaultTolerance   = time.Second
	DefaultBusyTimeout = 5 * time.Second
	DefaultReaders     = 4
)

// MigrateMode says what opening a backend does about the schema:
// [contract.MigrateMode], named here for the callers of this package.
type MigrateMode = contract.MigrateMode

const (
	// MigrateAuto applies pending migrations (the default).
	MigrateAuto = contract.MigrateAuto
	// MigrateVerify only reads the schema version and fails with
	// ErrSchemaMismatch unless it is current.
	MigrateVerify = contract.MigrateVerify
	// MigrateOff neither checks nor changes the schema.
	MigrateOff = contract.MigrateOff
)

// Options configures a backend. The zero value of every field but Path
// means its default.
type Options struct {
	// Path is the database file, or MemoryPath.
	Path string
	// JournalMode is "wal" (default), "delete", "truncate" or "persist".
	JournalMode string
	// Synchronous is "full" (default), "normal" or "extra".
	Synchronous string
	// BusyTimeout is how long a statement waits for another process's
	// lock (default 5 s; negative: not at all).
	BusyTimeout time.Duration
	// Tolerance is the clock tolerance (default 1 s; negative: none).
	Tolerance time.Duration
	// Migrate says what opening does about the schema (default auto).
	Migrate MigrateMode
	// Readers is the number of read connections (default 4).
	Readers int
	// Clock judges expiry; nil means the system clock (contract.SystemClock).
	// Tests inject a contract.ManualClock.
	Clock contract.Clock
	// Coalesce is "on" (default) or "off": whether the writes that queue
	// for the write connection are applied in one transaction (see
	// "Coalesced writes" in the package documentation).
	Coalesce string
}

// Backend is the SQLite backend: a contract.Backend with the optional
// capabilities KeyWaiter, ToleranceReporter, CleanupCounter, RecordDeleter,
// RecordLister, LeaseRenewer, PermitAcquirer, LeaseWatcher and TxCompleter. Its methods trust their input: use it through a
// durable.Store.
type Backend struct {
	path        string // canonical absolute path; never printed
	memory      bool
	walOrMemory bool // reads never wait for a lock
	goBusy      bool // the write connection's lock waits are begin's (busy_timeout 0 on it)
	clock       contract.Clock
	tol         time.Duration
	busyTO      time.Duration

	wdb  *sql.DB
	wc   *sql.Conn           // the one write connection
	wsem chan struct{}       // held while wc is in use
	ws   *stmts              // prepared on wc
	rdb  *sql.DB             // nil in memory
	rs   *stmts              // prepared on rdb (= ws in memory)
	cur  atomic.Pointer[txn] // the open transaction of BeginTx, if any (it holds wsem)

	writes *coalesce.Batcher[*writeOp, struct{}] // nil: coalescing off

	// Test hooks (export_test.go), set before any write: testAfterBody
	// runs after each write's body, in its transaction, and its error
	// fails the write; testFlush sees each flush of the write batcher.
	testAfterBody func(ctx context.Context) error
	testFlush     func(ctx context.Context, n int)

	hub     *hub
	watchMu sync.Mutex
	watches map[*leaseWatch]struct{} // the WatchLease watches made through this backend; nil once closed

	closed atomic.Bool
	done   chan struct{}
	once   sync.Once
}

var (
	_ contract.Backend           = (*Backend)(nil)
	_ contract.KeyWaiter         = (*Backend)(nil)
	_ contract.ToleranceReporter = (*Backend)(nil)
	_ contract.CleanupCounter    = (*Backend)(nil)
	_ contract.RecordDeleter     = (*Backend)(nil)
	_ contract.RecordLister      = (*Backend)(nil)
	_ contract.SystemNamer       = (*Backend)(nil)
)

// Open returns a Store on the database opts names.
func Open(ctx context.Context, opts Options, storeOpts ...durable.Option) (*durable.Store, error) {
	b, err := NewBackend(ctx, opts)
	if err != nil {
		return nil, err
	}
	s, err := durable.New(b, storeOpts...)
	if err != nil {
		b.Close()
		return nil, err
	}
	return s, nil
}

// NewBackend opens the raw backend (see the package doc): it opens the
// database, creating the file if it is missing, sets its journal mode and
// migrates or verifies the schema per opts.Migrate.
func NewBackend(ctx context.Context, opts Options) (*Backend, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	b := &Backend{clock: opts.Clock, tol: opts.Tolerance, busyTO: opts.BusyTimeout, wsem: make(chan struct{}, 1), done: make(chan struct{})}
	if b.clock == nil {
		b.clock = contract.SystemClock{}
	}
	if opts.Coalesce == "on" {
		// One batch in flight: SQLite has one writer.
		b.writes = coalesce.New(b.flushWrites, coalesce.Options{MaxInFlight: 1})
	}
	b.memory = opts.Path == MemoryPath
	b.walOrMemory = b.memory || opts.JournalMode == "wal"
	if b.memory {
		b.hub = newHub()
	} else {
		p, err := filepath.Abs(opts.Path)
		if err != nil {
			return nil, invalid("the database path cannot be made absolute")
		}
		b.path = p
	}
	fail := func(err error) (*Backend, error) {
		b.closeConns()
		if b.hub != nil && !b.memory {
			releaseHub(b.hub)
		}
		return nil, err
	}
	if err := b.open(ctx, opts); err != nil {
		return fail(err)
	}
	if !b.memory {
		// The file exists once the write connection has opened it: the
		// hub is the file's, whatever path named it.
		fi, err := os.Stat(b.path)
		if err != nil {
			return fail(&contract.Error{Code: contract.Misconfigured, Msg: "the database file cannot be found after opening it"})
		}
		b.hub = acquireHub(fi)
	}
	if err := b.prepareSchema(ctx, opts.Migrate); err != nil {
		return fail(err)
	}
	return b, nil
}

func (o *Options) fill() error {
	if o.Path == "" {
		return invalid("the database path is empty (want a file path or " + MemoryPath + ")")
	}
	if strings.ContainsAny(o.Path, "?#\x00") {
		return invalid("the database path must not contain '?', '#' or NUL")
	}
	if strings.HasPrefix(o.Path, "file:") {
		return invalid("the database path is a plain file path, not a file: URI")
	}
	switch o.JournalMode = strings.ToLower(o.JournalMode); o.JournalMode {
	case "":
		o.JournalMode = "wal"
	case "wal", "delete", "truncate", "persist":
	default:
		return invalid("journal_mode must be wal, delete, truncate or persist")
	}
	switch o.Synchronous = strings.ToLower(o.Synchronous); o.Synchronous {
	case "":
		o.Synchronous = "full"
	case "normal", "full", "extra":
	default:
		return invalid("synchronous must be normal, full or extra")
	}
	switch {
	case o.BusyTimeout == 0:
		o.BusyTimeout = DefaultBusyTimeout
	case o.BusyTimeout < 0:
		o.BusyTimeout = 0
	case o.BusyTimeout > time.Hour:
		return invalid("busy_timeout must be within 0s and 1h")
	}
	switch {
	case o.Tolerance == 0:
		o.Tolerance = DefaultTolerance
	case o.Tolerance < 0:
		o.Tolerance = 0
	case o.Tolerance > time.Hour:
		return invalid("tolerance must be within 0s and 1h")
	}
	o.Tolerance = o.Tolerance.Truncate(time.Microsecond)
	switch {
	case o.Readers == 0:
		o.Readers = DefaultReaders
	case o.Readers < 0 || o.Readers > 64:
		return invalid("readers must be within 1 and 64")
	}
	switch o.Coalesce = strings.ToLower(o.Coalesce); o.Coalesce {
	case "":
		o.Coalesce = "on"
	case "on", "off":
	default:
		return invalid("coalesce must be on or off")
	}
	if o.Migrate < MigrateAuto || o.Migrate > MigrateOff {
		return invalid("unknown migrate mode")
	}
	return nil
}

// driverDSN is the modernc DSN of the database: the file name (never a
// "file:" URI, so no parameter of ours reaches SQLite's URI parser) and
// the pragmas every connection runs when it opens.
func driverDSN(o Options, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", o.BusyTimeout.Milliseconds()))
	if o.Path != MemoryPath {
		q.Add("_pragma", "synchronous("+o.Synchronous+")")
	}
	q.Add("_pragma", "foreign_keys(off)")
	if readOnly {
		q.Add("_pragma", "query_only(on)")
	} else {
		// BeginTx's transactions take the write lock when they begin (the
		// backend's own transactions run BEGIN IMMEDIATE themselves).
		q.Add("_txlock", "immediate")
	}
	return o.Path + "?" + q.Encode()
}

func (b *Backend) open(ctx context.Context, o Options) error {
	wdb, err := sql.Open("sqlite", driverDSN(o, false))
	if err != nil {
		return classifyOpen(err)
	}
	b.wdb = wdb
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	wc, err := wdb.Conn(ctx)
	if err != nil {
		return classifyOpen(err)
	}
	b.wc = wc
	if !b.memory {
		// journal_mode is a property of the file: setting WAL takes a
		// lock, so it is retried like a write.
		mode := o.JournalMode
		err := b.retryBusy(ctx, func() error {
			var got string
			if err := wc.QueryRowContext(ctx, "PRAGMA journal_mode = "+mode).Scan(&got); err != nil {
				return err
			}
			if !strings.EqualFold(got, mode) {
				return &contract.Error{Code: contract.Misconfigured, Msg: "the database refused journal_mode=" + mode + " (got " + strings.ToLower(got) + ")"}
			}
			return nil
		})
		if err != nil {
			return classifyOpen(err)
		}
	}
	if !b.memory && o.JournalMode == "wal" {
		// In WAL mode only BEGIN IMMEDIATE waits on the write connection,
		// and begin waits in Go instead of in SQLite's busy handler (see
		// begin).
		if _, err := wc.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
			return classifyOpen(err)
		}
		b.goBusy = true
	}
	if b.writes != nil && !b.memory {
		// A batch's savepoints journal the pages they change in a
		// sub-journal, a temporary file: kept in memory instead (it
		// holds at most the pages one batch changes).
		if _, err := wc.ExecContext(ctx, "PRAGMA temp_store = memory"); err != nil {
			return classifyOpen(err)
		}
	}
	b.ws = newStmts(wc)
	if b.memory {
		b.rs = b.ws
		return nil
	}
	rdb, err := sql.Open("sqlite", driverDSN(o, true))
	if err != nil {
		return classifyOpen(err)
	}
	b.rdb = rdb
	rdb.SetMaxOpenConns(o.Readers)
	rdb.SetMaxIdleConns(o.Readers)
	rdb.SetConnMaxLifetime(0)
	rdb.SetConnMaxIdleTime(0)
	b.rs = newStmts(rdb)
	return nil
}

// retryBusy runs f again while it fails with SQLITE_BUSY or SQLITE_LOCKED
// (after the busy timeout, a few times, with jitter), until ctx ends.
func (b *Backend) retryBusy(ctx context.Context, f func() error) error {
	delay := time.Millisecond
	for attempt := 0; ; attempt++ {
		err := f()
		if err == nil || !isBusy(err) || attempt >= maxBusyRetries || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(delay/2 + rand.N(delay))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// maxBusyRetries bounds the retries of a statement or transaction that
// failed with SQLITE_BUSY or SQLITE_LOCKED after waiting the busy timeout.
const maxBusyRetries = 5

// ClockTolerance implements contract.ToleranceReporter.
func (b *Backend) ClockTolerance() time.Duration { return b.tol }

// SystemName implements contract.SystemNamer.
func (b *Backend) SystemName() string { return "sqlite" }

// Close closes the backend's connections and wakes its waiters with
// ErrClosed. The file stays (a memory database is gone).
func (b *Backend) Close() error {
	b.once.Do(func() {
		b.closed.Store(true)
		close(b.done)
		// Wait for a write in progress.
		b.wsem <- struct{}{}
		b.closeConns()
		b.dropWatches()
		if !b.memory {
			releaseHub(b.hub)
		}
	})
	return nil
}

func (b *Backend) closeConns() {
	if b.ws != nil {
		b.ws.close()
	}
	if b.rs != nil && b.rs != b.ws {
		b.rs.close()
	}
	if b.wc != nil {
		_ = b.wc.Close()
	}
	if b.wdb != nil {
		_ = b.wdb.Close()
	}
	if b.rdb != nil {
		_ = b.rdb.Close()
	}
}

func (b *Backend) check(ctx context.Context) error {
	if b.closed.Load() {
		return errClosed()
	}
	if err := ctx.Err(); err != nil {
		return &contract.Error{Code: contract.Canceled, Err: err}
	}
	return nil
}

// now returns the store clock in microseconds since the Unix epoch.
func (b *Backend) now() int64 { return b.clock.Now().UnixMicro() }

func micros(d time.Duration) int64 { return d.Microseconds() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func nullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

func newToken() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// --- the write connection ---

// lockWriter takes the write connection, waiting until ctx ends.
func (b *Backend) lockWriter(ctx context.Context) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	select {
	case b.wsem <- struct{}{}:
	case <-ctx.Done():
		return &contract.Error{Code: contract.Canceled, Err: ctx.Err()}
	case <-b.done:
		return errClosed()
	}
	if b.closed.Load() {
		<-b.wsem
		return errClosed()
	}
	return nil
}

func (b *Backend) unlockWriter() { <-b.wsem }

// writeTx runs f in one BEGIN IMMEDIATE transaction on the write
// connection and commits it. An error from f rolls back: nothing of the
// operation is applied. A transaction that could not begin or commit
// because another process held the lock is retried (bounded), then
// reported as Unavailable.
//
// Only BEGIN IMMEDIATE waits for another connection (for the write lock,
// up to busy_timeout), and that wait ends when ctx ends (see begin). Once
// it holds the lock, the statements of f and COMMIT wait for no one (a WAL
// commit's checkpoint is passive), so they run under a context without
// ctx's cancellation: modernc and database/sql would otherwise watch it
// for every statement (a goroutine and a progress handler each), a good
// part of a fast operation's cost. f gets that context.
func (b *Backend) writeTx(ctx context.Context, f func(ctx context.Context) error) error {
	if err := b.lockWriter(ctx); err != nil {
		return err
	}
	defer b.unlockWriter()
	return b.writeLocked(ctx, f)
}

// writeLocked is writeTx once it holds the write connection.
func (b *Backend) writeLocked(ctx context.Context, f func(ctx context.Context) error) error {
	qctx := context.WithoutCancel(ctx)
	committing := false
	err := b.retryBusy(ctx, func() error {
		committing = false
		if err := b.begin(ctx); err != nil {
			return err
		}
		if err := f(qctx); err != nil {
			b.rollback()
			return err
		}
		committing = true
		if _, err := b.wc.ExecContext(qctx, "COMMIT"); err != nil {
			// A failed COMMIT leaves the transaction open (BUSY) or
			// already rolled back (I/O errors): roll back either way.
			b.rollback()
			return err
		}
		return nil
	})
	if err == nil {
		return nil
	}
	return b.writeErr(ctx, err, committing)
}

// writeErr maps the error of a write transaction: committing says whether
// it came from the COMMIT, which leaves the outcome unknown after an I/O
// error; any other error means that nothing was applied.
func (b *Backend) writeErr(ctx context.Context, err error, committing bool) error {
	var ce *contract.Error
	if errors.As(err, &ce) {
		return err
	}
	if committing && isIOErr(err) {
		return &contract.Error{Code: contract.OutcomeUnknown, Msg: "commit failed with an I/O error" + codeSuffix(err), Err: err}
	}
	return classify(ctx, err)
}

// begin runs BEGIN IMMEDIATE on the write connection, which the caller
// holds, waiting up to busy_timeout for another connection's write lock
// and no longer than ctx. In WAL mode the wait is a loop here (from 100 µs
// doubling to 20 ms, with jitter), and the statement runs without ctx's
// cancellation, which modernc would otherwise watch at a cost of some
// 15 µs of CPU per transaction; in the rollback-journal modes, where
// COMMIT may wait for readers too, SQLite's busy handler waits, under ctx.
// It returns SQLITE_BUSY when the wait ran out, or an error that holds
// ctx.Err() when ctx ended first.
func (b *Backend) begin(ctx context.Context) error {
	if !b.goBusy {
		_, err := b.wc.ExecContext(ctx, "BEGIN IMMEDIATE")
		return err
	}
	qctx := context.WithoutCancel(ctx)
	return b.waitBusy(ctx, func() error {
		_, err := b.wc.ExecContext(qctx, "BEGIN IMMEDIATE")
		return err
	})
}

// waitBusy runs try, which begins an immediate transaction on the write
// connection without waiting (goBusy), again while it fails with
// SQLITE_BUSY: from 100 µs doubling to 20 ms, with jitter, for up to
// busy_timeout and no longer than ctx or the backend.
func (b *Backend) waitBusy(ctx context.Context, try func() error) error {
	var deadline time.Time
	delay := 100 * time.Microsecond
	for {
		err := try()
		if err == nil || !isBusy(err) {
			return err
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(b.busyTO)
		}
		left := deadline.Sub(now)
		if left <= 0 {
			return err
		}
		t := time.NewTimer(min(delay/2+rand.N(delay), left))
		select {
		case <-ctx.Done():
			t.Stop()
			return multierr.Combine(ctx.Err(), err)
		case <-b.done:
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
}

func (b *Backend) rollback() {
	_, _ = b.wc.ExecContext(context.Background(), "ROLLBACK")
}

// read runs f, which reads with b.rs, retrying when another process held
// a lock SQLite could not wait out. In WAL mode (and in memory) a read
// never waits for another connection, so f runs under a context without
// ctx's cancellation (see write); in the rollback-journal modes a reader
// waits while a writer commits, and f runs under ctx, whose end ends the
// wait.
func (b *Backend) read(ctx context.Context, f func(ctx context.Context) error) error {
	if b.memory {
		if err := b.lockWriter(ctx); err != nil {
			return err
		}
		defer b.unlockWriter()
	} else if err := b.check(ctx); err != nil {
		return err
	}
	qctx := ctx
	if b.walOrMemory {
		qctx = context.WithoutCancel(ctx)
	}
	err := b.retryBusy(ctx, func() error { return f(qctx) })
	if err == nil {
		return nil
	}
	var ce *contract.Error
	if errors.As(err, &ce) {
		return err
	}
	if b.closed.Load() {
		// Close closed the read pool under this call.
		return &contract.Error{Code: contract.Closed, Msg: "backend is closed", Err: err}
	}
	return classify(ctx, err)
}

// --- prepared statements ---

type preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// stmts prepares each statement once, on first use (the schema may not
// exist when the backend opens with migrate=off). Lookups take no lock.
type stmts struct {
	p  preparer
	m  sync.Map   // query → *sql.Stmt
	mu sync.Mutex // serializes preparation
}

func newStmts(p preparer) *stmts { return &stmts{p: p} }

func (s *stmts) get(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := s.m.Load(query); ok {
		return st.(*sql.Stmt), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.m.Load(query); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := s.p.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s.m.Store(query, st)
	return st, nil
}

func (s *stmts) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := s.get(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (s *stmts) queryRow(ctx context.Context, query string, args []any, dest ...any) (bool, error) {
	st, err := s.get(ctx, query)
	if err != nil {
		return false, err
	}
	err = st.QueryRowContext(ctx, args...).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (s *stmts) query(ctx context.Context, query string, args []any, each func(*sql.Rows) error) (err error) {
	st, err := s.get(ctx, query)
	if err != nil {
		return err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer multierr.AppendInvoke(&err, multierr.Close(rows))
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// reset forgets every prepared statement (after a migration changed the
// schema).
func (s *stmts) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.Range(func(k, v any) bool {
		_ = v.(*sql.Stmt).Close()
		s.m.Delete(k)
		return true
	})
}

func (s *stmts) close() { s.reset() }

// --- DSN ---

type driver struct{}

// Open implements contract.Driver.
func (driver) Open(ctx context.Context, dsn string) (contract.Backend, error) {
	return driver{}.OpenWith(ctx, dsn, contract.OpenOptions{})
}

// OpenWith implements contract.OptionsDriver: durable.Open of a sqlite
// DSN with durable.WithMigrateMode opens with that mode instead of the
// DSN's migrate parameter (which is still checked). Maintenance tools
// (the durable CLI) open with MigrateOff. Without the registry, set
// [Options].Migrate (after [ParseDSN], for a DSN).
func (driver) OpenWith(ctx context.Context, dsn string, o contract.OpenOptions) (contract.Backend, error) {
	opts, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	if o.Migrate != nil {
		opts.Migrate = *o.Migrate
	}
	return NewBackend(ctx, opts)
}

var _ contract.OptionsDriver = driver{}

// ParseDSN reads a sqlite:// DSN (see the package doc) into Options.
func ParseDSN(dsn string) (Options, error) {
	var o Options
	i := strings.Index(dsn, "://")
	if i < 0 || !strings.EqualFold(dsn[:i], "sqlite") {
		return o, invalid("a sqlite DSN starts with sqlite://")
	}
	rest := dsn[i+3:]
	if j := strings.IndexByte(rest, '#'); j >= 0 {
		return o, invalid("a sqlite DSN has no fragment ('#')")
	}
	p, rawQuery, _ := strings.Cut(rest, "?")
	path, err := url.PathUnescape(p)
	if err != nil {
		return o, invalid("malformed sqlite DSN path (bad percent-encoding)")
	}
	o.Path = path
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return o, invalid("malformed sqlite DSN parameters")
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return o, invalid(fmt.Sprintf("sqlite DSN parameter %s is given more than once", safeName(k)))
		}
		v := vs[0]
		switch k {
		case "journal_mode":
			if v == "" {
				return o, invalid("journal_mode must be wal, delete, truncate or persist")
			}
			o.JournalMode = v
		case "synchronous":
			if v == "" {
				return o, invalid("synchronous must be normal, full or extra")
			}
			o.Synchronous = v
		case "busy_timeout":
			d, err := parseDuration(v)
			if err != nil || d < 0 || d > time.Hour {
				return o, invalid("busy_timeout must be a Go duration (5s) or milliseconds within 0 and 1h")
			}
			if d == 0 {
				d = -1
			}
			o.BusyTimeout = d
		case "tolerance":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > time.Hour {
				return o, invalid("tolerance must be a Go duration within 0s and 1h, such as 1s")
			}
			if d == 0 {
				d = -1
			}
			o.Tolerance = d
		case "migrate":
			m, ok := contract.ParseMigrateMode(v)
			if !ok {
				return o, invalid("migrate must be auto, verify or off")
			}
			o.Migrate = m
		case "coalesce":
			if v == "" {
				return o, invalid("coalesce must be on or off")
			}
			o.Coalesce = v
		case "readers":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 64 {
				return o, invalid("readers must be an integer within 1 and 64")
			}
			o.Readers = n
		default:
			return o, invalid(fmt.Sprintf("unknown sqlite DSN parameter %s (known: journal_mode, synchronous, busy_timeout, tolerance, migrate, readers, coalesce)", safeName(k)))
		}
	}
	if o.Path == "" {
		return o, invalid("the sqlite DSN names no database: sqlite:///abs/path.db, sqlite://./rel.db or sqlite://" + MemoryPath)
	}
	return o, (&o).validate()
}

// validate checks o as fill would, without keeping the defaults.
func (o *Options) validate() error {
	c := *o
	return c.fill()
}

func parseDuration(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(n) * time.Millisecond, nil
	}
	return time.ParseDuration(v)
}

// safeName quotes a parameter name for a message when it looks like one
// (short, [a-z0-9_]), so that a value pasted by mistake is never echoed.
func safeName(k string) string {
	if len(k) == 0 || len(k) > 32 {
		return "(name not shown)"
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return "(name not shown)"
		}
	}
	return strconv.Quote(k)
}
