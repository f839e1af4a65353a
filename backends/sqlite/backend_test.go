package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/contract"
)

func TestParseDSN(t *testing.T) {
	for _, tc := range []struct {
		dsn  string
		want sqlite.Options
		bad  string // a fragment of the error, when it must fail
	}{
		{dsn: "sqlite:///var/lib/app/durable.db", want: sqlite.Options{Path: "/var/lib/app/durable.db"}},
		{dsn: "sqlite://./durable.db", want: sqlite.Options{Path: "./durable.db"}},
		{dsn: "sqlite://data/durable.db", want: sqlite.Options{Path: "data/durable.db"}},
		{dsn: "SQLite://:memory:", want: sqlite.Options{Path: ":memory:"}},
		{dsn: "sqlite:///tmp/a%20b.db", want: sqlite.Options{Path: "/tmp/a b.db"}},
		{dsn: "sqlite:///x.db?journal_mode=delete&synchronous=normal&busy_timeout=250&tolerance=2s&migrate=verify&readers=8",
			want: sqlite.Options{Path: "/x.db", JournalMode: "delete", Synchronous: "normal", BusyTimeout: 250 * time.Millisecond,
				Tolerance: 2 * time.Second, Migrate: sqlite.MigrateVerify, Readers: 8}},
		{dsn: "sqlite:///x.db?busy_timeout=1s&tolerance=0s", want: sqlite.Options{Path: "/x.db", BusyTimeout: time.Second, Tolerance: -1}},
		{dsn: "sqlite:///x.db?busy_timeout=0", want: sqlite.Options{Path: "/x.db", BusyTimeout: -1}},
		{dsn: "sqlite:///x.db?migrate=off", want: sqlite.Options{Path: "/x.db", Migrate: sqlite.MigrateOff}},
		{dsn: "sqlite://", bad: "names no database"},
		{dsn: "sqlite://?journal_mode=wal", bad: "names no database"},
		{dsn: "sqlite:///x.db?password=hunter2", bad: `unknown sqlite DSN parameter "password"`},
		{dsn: "sqlite:///x.db?Bad-Name=1", bad: "(name not shown)"},
		{dsn: "sqlite:///x.db?journal_mode=off", bad: "journal_mode must be"},
		{dsn: "sqlite:///x.db?synchronous=off", bad: "synchronous must be"},
		{dsn: "sqlite:///x.db?busy_timeout=soon", bad: "busy_timeout must be"},
		{dsn: "sqlite:///x.db?tolerance=-1s", bad: "tolerance must be"},
		{dsn: "sqlite:///x.db?tolerance=2h", bad: "tolerance must be"},
		{dsn: "sqlite:///x.db?migrate=yes", bad: "migrate must be"},
		{dsn: "sqlite:///x.db?readers=0", bad: "readers must be"},
		{dsn: "sqlite:///x.db?readers=1&readers=2", bad: "more than once"},
		{dsn: "sqlite:///x%zz.db", bad: "percent-encoding"},
		{dsn: "sqlite:///x.db#frag", bad: "fragment"},
		{dsn: "sqlite://file:x.db", bad: "not a file: URI"},
	} {
		t.Run(tc.dsn, func(t *testing.T) {
			got, err := sqlite.ParseDSN(tc.dsn)
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) || !errors.Is(err, contract.ErrInvalidArgument) {
					t.Fatalf("err = %v, want InvalidArgument with %q", err, tc.bad)
				}
				if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "/x") {
					t.Errorf("error quotes the DSN: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestOpenThroughRegistry(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "reg.db")
	s, err := durable.Open(ctx, "sqlite://"+path+"?synchronous=normal")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var b *sqlite.Backend
	if !s.As(&b) {
		t.Fatal("Store.As does not reach *sqlite.Backend")
	}
	if got := s.MinTTL(); got != 2*time.Second {
		t.Errorf("MinTTL = %v, want 2s (1s + the default tolerance)", got)
	}
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "a", Status: durable.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	// The journal mode is WAL.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q (%v), want wal", mode, err)
	}
}

func TestMemoryDSN(t *testing.T) {
	ctx := t.Context()
	s, err := durable.Open(ctx, "sqlite://:memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "a", Status: durable.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "r", Owner: "o", TTL: 5 * time.Second})
	if err != nil || l.Token != 1 {
		t.Fatalf("lease %+v, %v", l, err)
	}
	// A second memory store is a private one.
	s2, err := durable.Open(ctx, "sqlite://:memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.GetWorkflow(ctx, "", "a"); !errors.Is(err, durable.ErrNotFound) {
		t.Errorf("second memory store sees the first's record: %v", err)
	}
}

// TestWaitKeyWakesAtOnce: a completion by another backend of this process
// on the same file wakes a waiter at once, far sooner than the polling
// interval would.
func TestWaitKeyWakesAtOnce(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "wait.db")
	a, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ref := durable.KeyRef{Key: "k"}
	c, err := a.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		// Let the waiter's polling back off to its longest interval.
		var wg sync.WaitGroup
		wg.Add(1)
		var rec durable.KeyRecord
		var werr error
		go func() {
			defer wg.Done()
			rec, werr = b.WaitKey(ctx, ref)
		}()
		time.Sleep(1200 * time.Millisecond)
		start := time.Now()
		if i < 2 {
			// Renewals do not end the wait.
			if _, err := a.RenewKey(ctx, ref, c.Token, time.Minute); err != nil {
				t.Fatal(err)
			}
			ok, err := a.ReleaseKey(ctx, ref, c.Token)
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			wg.Wait()
			if !errors.Is(werr, durable.ErrNotFound) {
				t.Fatalf("after release: %v", werr)
			}
			c, err = a.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
		} else {
			if _, err := a.CompleteKey(ctx, durable.Completion{KeyRef: ref, Token: c.Token, Outcome: durable.Outcome{Code: 201}}); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if werr != nil || rec.Outcome == nil || rec.Outcome.Code != 201 {
				t.Fatalf("after completion: %+v, %v", rec, werr)
			}
		}
		if d := time.Since(start); d > 200*time.Millisecond {
			t.Errorf("waiter woke %v after the change; want at once", d)
		}
	}
}

// TestWaitKeyEndsOnClose: Close wakes a waiter with ErrClosed.
func TestWaitKeyEndsOnClose(t *testing.T) {
	ctx := t.Context()
	b, err := sqlite.NewBackend(ctx, sqlite.Options{Path: filepath.Join(t.TempDir(), "close.db")})
	if err != nil {
		t.Fatal(err)
	}
	ref := contract.KeyRef{Key: "k"}
	if _, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := b.WaitKey(ctx, ref); done <- err }()
	time.Sleep(50 * time.Millisecond)
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, contract.ErrClosed) {
			t.Errorf("WaitKey after Close: %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("WaitKey did not return after Close")
	}
}

// TestTokensSurviveEverything: fencing tokens keep growing across release,
// cleanup, DeleteRecord and reopening the file.
func TestTokensSurviveEverything(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "tokens.db")
	var last int64
	grant := func(s *durable.Store) durable.Lease {
		t.Helper()
		l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "r", Owner: "o", TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if l.Token <= last {
			t.Fatalf("token %d after %d", l.Token, last)
		}
		last = l.Token
		return l
	}
	for round := range 3 {
		s, err := sqlite.Open(ctx, sqlite.Options{Path: path, Tolerance: -1})
		if err != nil {
			t.Fatal(err)
		}
		l := grant(s)
		if ok, err := s.ReleaseLease(ctx, l); !ok || err != nil {
			t.Fatal(ok, err)
		}
		grant(s)
		if ok, err := s.DeleteRecord(ctx, contract.KindLease, "", "r"); !ok || err != nil {
			t.Fatal(ok, err)
		}
		l = grant(s)
		if round == 2 {
			time.Sleep(2100 * time.Millisecond)
			res, err := s.Cleanup(ctx, durable.CleanupRequest{})
			if err != nil || res.Leases != 1 {
				t.Fatalf("cleanup %+v %v", res, err)
			}
			l = grant(s)
		}
		if ok, err := s.ReleaseLease(ctx, l); !ok || err != nil {
			t.Fatal(ok, err)
		}
		s.Close()
	}
}

// TestMigrations: a fresh file migrates; verify and off do not; a newer
// schema is refused; down and up, force.
func TestMigrations(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "m.db")
	if _, err := sqlite.NewBackend(ctx, sqlite.Options{Path: path, Migrate: sqlite.MigrateVerify}); !errors.Is(err, contract.ErrSchemaMismatch) {
		t.Fatalf("verify on a fresh file: %v, want SchemaMismatch", err)
	}
	b, err := sqlite.NewBackend(ctx, sqlite.Options{Path: path, Migrate: sqlite.MigrateOff})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetWorkflow(ctx, "", "a"); !errors.Is(err, contract.ErrSchemaMismatch) {
		t.Errorf("a read without tables: %v, want SchemaMismatch", err)
	}
	st, err := b.MigrationStatus(ctx)
	if err != nil || st.Version != 0 || st.Current() {
		t.Fatalf("status %+v %v", st, err)
	}
	if err := b.Migrate(ctx, sqlite.Up); err != nil {
		t.Fatal(err)
	}
	st, err = b.MigrationStatus(ctx)
	if err != nil || !st.Current() || st.Version != sqlite.LatestVersion() {
		t.Fatalf("status after up %+v %v", st, err)
	}
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "a", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Migrate(ctx, sqlite.Down); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.MigrationStatus(ctx); st.Version != 0 {
		t.Fatalf("after down: %+v", st)
	}
	if err := b.Migrate(ctx, sqlite.Up); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetWorkflow(ctx, "", "a"); !errors.Is(err, contract.ErrNotFound) {
		t.Errorf("after down and up: %v", err)
	}
	b.Close()

	// A newer schema is refused, by every mode but off.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE schema_migrations SET version = 99`); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []sqlite.MigrateMode{sqlite.MigrateAuto, sqlite.MigrateVerify} {
		_, err := sqlite.NewBackend(ctx, sqlite.Options{Path: path, Migrate: mode})
		if !errors.Is(err, contract.ErrSchemaMismatch) || !strings.Contains(err.Error(), "newer than this code") {
			t.Errorf("mode %d on version 99: %v", mode, err)
		}
	}
	b, err = sqlite.NewBackend(ctx, sqlite.Options{Path: path, Migrate: sqlite.MigrateOff})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Migrate(ctx, sqlite.Up); !errors.Is(err, contract.ErrSchemaMismatch) {
		t.Errorf("up on version 99: %v", err)
	}
	if err := b.Force(ctx, int(sqlite.LatestVersion())); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.MigrationStatus(ctx); !st.Current() {
		t.Errorf("after force: %+v", st)
	}
	// A dirty version is reported.
	if _, err := db.Exec(`UPDATE schema_migrations SET dirty = 1`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := sqlite.NewBackend(ctx, sqlite.Options{Path: path, Migrate: sqlite.MigrateVerify}); !errors.Is(err, contract.ErrSchemaMismatch) || !strings.Contains(err.Error(), "dirty") {
		t.Errorf("dirty: %v", err)
	}
}

// TestConcurrentMigrators: backends opened at once on a fresh file all
// succeed; the migrations run once.
func TestConcurrentMigrators(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "cm.db")
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := sqlite.NewBackend(ctx, sqlite.Options{Path: path})
			if err == nil {
				b.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestDiskFull: SQLITE_FULL is Misconfigured, not retryable, and says what
// to do; no path, SQL or data in the text.
func TestDiskFull(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "secret-name.db")
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var b *sqlite.Backend
	s.As(&b)
	// Cap the file at its current size: the next page it needs is refused.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var pages int
	if err := db.QueryRow("PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	var lastErr error
	// max_page_count is per connection: set on the backend's write
	// connection through a hook for tests.
	sqlite.ExecOnWriterForTest(b, fmt.Sprintf("PRAGMA max_page_count = %d", pages+4))
	for i := range 20 {
		_, lastErr = s.CreateWorkflow(ctx, durable.Workflow{ID: fmt.Sprintf("w-%d", i), Status: durable.StatusRunning, Snapshot: big})
		if lastErr != nil {
			break
		}
	}
	if !errors.Is(lastErr, durable.ErrMisconfigured) || durable.Retryable(lastErr) {
		t.Fatalf("disk full: %v (code %v), want Misconfigured", lastErr, durable.CodeOf(lastErr))
	}
	msg := lastErr.Error()
	for _, bad := range []string{"secret-name", dir, "INSERT", "workflows", "w-"} {
		if strings.Contains(msg, bad) {
			t.Errorf("error text %q contains %q", msg, bad)
		}
	}
	if !strings.Contains(msg, "SQLITE_FULL") || !strings.Contains(msg, "full") {
		t.Errorf("error text %q does not say the disk is full", msg)
	}
	if sqlite.CodeName(lastErr) != "SQLITE_FULL" {
		t.Errorf("CodeName = %q", sqlite.CodeName(lastErr))
	}
}

// TestReadOnly: SQLITE_READONLY is PermissionDenied, not retryable.
func TestReadOnly(t *testing.T) {
	ctx := t.Context()
	s, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(t.TempDir(), "ro.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var b *sqlite.Backend
	s.As(&b)
	sqlite.ExecOnWriterForTest(b, "PRAGMA query_only = 1")
	_, err = s.CreateWorkflow(ctx, durable.Workflow{ID: "a", Status: durable.StatusRunning})
	if !errors.Is(err, durable.ErrPermissionDenied) || durable.Retryable(err) || !strings.Contains(err.Error(), "SQLITE_READONLY") {
		t.Fatalf("read-only: %v", err)
	}
}

// TestBusyIsUnavailable: a write lock held by another connection past the
// busy timeout and the retries → Unavailable, nothing applied; once the
// lock is gone the write goes through.
func TestBusyIsUnavailable(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "busy.db")
	s, err := durable.Open(ctx, "sqlite://"+path+"?busy_timeout=20ms")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = s.CreateWorkflow(ctx, durable.Workflow{ID: "a", Status: durable.StatusRunning})
	if !errors.Is(err, durable.ErrUnavailable) || !durable.Retryable(err) || !strings.Contains(err.Error(), "SQLITE_BUSY") {
		t.Fatalf("busy: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("gave up after %v", d)
	}
	// Reads go on meanwhile (WAL).
	if _, err := s.GetWorkflow(ctx, "", "a"); !errors.Is(err, durable.ErrNotFound) {
		t.Errorf("read under another writer: %v", err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "a", Status: durable.StatusRunning}); err != nil {
		t.Fatalf("after the lock is gone: %v", err)
	}
	// A caller whose context ends while waiting: Canceled.
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	s2, err := durable.Open(ctx, "sqlite://"+path+"?busy_timeout=10s")
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = s2.CreateWorkflow(cctx, durable.Workflow{ID: "b", Status: durable.StatusRunning})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("context ended while waiting for the lock: %v", err)
	}
	conn.ExecContext(ctx, "ROLLBACK")
	if _, err := s2.GetWorkflow(ctx, "", "b"); !errors.Is(err, durable.ErrNotFound) {
		t.Errorf("the canceled write applied: %v", err)
	}
}

// TestCorruptHeader: an outcome header that cannot be decoded is Corrupt
// for that key only, and DeleteRecord removes it.
func TestCorruptHeader(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "corrupt.db")
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"bad", "good"} {
		ref := durable.KeyRef{Key: k}
		c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: ref, Token: c.Token, Outcome: durable.Outcome{Code: 200, Header: map[string][]string{"A": {"b"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE idempotency_keys SET outcome_header = x'ff' WHERE key = 'bad'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetKey(ctx, durable.KeyRef{Key: "bad"}); !errors.Is(err, durable.ErrCorrupt) {
		t.Errorf("bad key: %v", err)
	}
	if _, err := s.GetKey(ctx, durable.KeyRef{Key: "good"}); err != nil {
		t.Errorf("good key: %v", err)
	}
	_, err = s.ListKeys(ctx, durable.KeyListQuery{})
	if ref, ok := durable.CorruptRecord(err); !ok || ref != (durable.RecordRef{Kind: durable.KindKey, ID: "bad"}) {
		t.Errorf("ListKeys: %v; CorruptRecord = %+v, %v; want the key bad", err, ref, ok)
	}
	if ok, err := s.DeleteRecord(ctx, contract.KindKey, "", "bad"); !ok || err != nil {
		t.Errorf("delete: %v %v", ok, err)
	}
}

// TestFirstHeaderFormatStillReads: an outcome header stored by the
// backend's first, untagged encoding (before internal/outcomecodec) reads
// back, by the contract's rule: a name with an empty list gets a nil one.
func TestFirstHeaderFormatStillReads(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "v0.db")
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ref := durable.KeyRef{Key: "old"}
	c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: ref, Token: c.Token, Outcome: durable.Outcome{Code: 200}}); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// {"A": {"bc", ""}, "B": nil, "C": {}} in the first encoding: count,
	// then per name (sorted) its length and bytes, 0 (nil) or 1 and the values.
	old := []byte{3, 1, 'A', 1, 2, 2, 'b', 'c', 0, 1, 'B', 0, 1, 'C', 1, 0}
	if _, err := db.Exec(`UPDATE idempotency_keys SET outcome_header = ? WHERE key = 'old'`, old); err != nil {
		t.Fatal(err)
	}
	rec, err := s.GetKey(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"A": {"bc", ""}, "B": nil, "C": nil}
	if !reflect.DeepEqual(rec.Outcome.Header, want) {
		t.Errorf("header stored in the first encoding read back as %#v, want %#v", rec.Outcome.Header, want)
	}
}

// TestCannotOpen: a database in a missing directory is Misconfigured, not
// retryable, and the text names neither the path nor SQLite's message.
func TestCannotOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "no-such-dir-secret")
	_, err := durable.Open(t.Context(), "sqlite://"+dir+"/x.db")
	if !errors.Is(err, durable.ErrMisconfigured) || durable.Retryable(err) || !strings.Contains(err.Error(), "SQLITE_CANTOPEN") {
		t.Fatalf("missing directory: %v", err)
	}
	if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "unable to open") {
		t.Errorf("error text %q quotes the path or SQLite's message", err)
	}
	// A file that is not a database.
	path := filepath.Join(t.TempDir(), "not-a-db")
	if err := os.WriteFile(path, bytes.Repeat([]byte("not a database "), 512), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = durable.Open(t.Context(), "sqlite://"+path)
	if !errors.Is(err, durable.ErrMisconfigured) || !strings.Contains(err.Error(), "SQLITE_NOTADB") || strings.Contains(err.Error(), "not-a-db") {
		t.Fatalf("not a database: %v", err)
	}
}
