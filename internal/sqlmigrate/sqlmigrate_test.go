package sqlmigrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/durable-go/durable/contract"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
)

// fakeDB is a version table and a log of statements, with a transaction
// that applies its writes only on commit.
type fakeDB struct {
	version  int64
	dirty    bool
	present  bool // the table holds a row
	log      []string
	failOn   string // Exec fails on a statement containing it
	begins   int
	commits  int
	rollback int
}

type fakeTx struct {
	db      *fakeDB
	version int64
	dirty   bool
	present bool
}

func (db *fakeDB) begin(context.Context) (Tx, error) {
	db.begins++
	return &fakeTx{db: db, version: db.version, dirty: db.dirty, present: db.present}, nil
}

func (t *fakeTx) Exec(_ context.Context, sql string) error {
	t.db.log = append(t.db.log, sql)
	if t.db.failOn != "" && strings.Contains(sql, t.db.failOn) {
		return errors.New("statement failed")
	}
	if strings.HasPrefix(sql, "DELETE FROM t") {
		t.present = false
		var v int64
		var d bool
		if _, err := fmt.Sscanf(sql, "DELETE FROM t; INSERT INTO t (version, dirty) VALUES (%d, %t)", &v, &d); err == nil {
			t.version, t.dirty, t.present = v, d, true
		}
	}
	return nil
}

func (t *fakeTx) Query(_ context.Context, sql string, dest []any, row func() error) error {
	if sql != "SELECT version, dirty FROM t LIMIT 1" {
		return fmt.Errorf("unexpected query %q", sql)
	}
	if !t.present {
		return nil
	}
	*dest[0].(*int64), *dest[1].(*bool) = t.version, t.dirty
	return row()
}

func (t *fakeTx) Commit(context.Context) error {
	t.db.commits++
	t.db.version, t.db.dirty, t.db.present = t.version, t.dirty, t.present
	return nil
}

func (t *fakeTx) Rollback() { t.db.rollback++ }

func files() fs.FS {
	return fstest.MapFS{
		"m/000001_a.up.sql":   {Data: []byte("CREATE a")},
		"m/000001_a.down.sql": {Data: []byte("DROP a")},
		"m/000002_b.up.sql":   {Data: []byte("CREATE b")},
		"m/000002_b.down.sql": {Data: []byte("DROP b")},
	}
}

func TestLatestVersion(t *testing.T) {
	if v := LatestVersion(files(), "m"); v != 2 {
		t.Fatalf("LatestVersion = %d, want 2", v)
	}
}

// TestDriverRunsEverythingInOneTransaction: Up applies every file in one
// transaction and commits; a failing file rolls all of it back and leaves
// the previous version, not a dirty one.
func TestDriverRunsEverythingInOneTransaction(t *testing.T) {
	ctx := context.Background()
	db := &fakeDB{}
	var applied []int
	committed := 0
	cfg := Config{Name: "fake", Table: "t", Begin: db.begin,
		Applying: func(v int) { applied = append(applied, v) }, Committing: func() { committed++ }}
	if err := Run(NewDriver(ctx, cfg), files(), "m", func(m *migrate.Migrate) error { return m.Up() }); err != nil {
		t.Fatal(err)
	}
	if db.version != 2 || db.dirty || db.begins != 1 || db.commits != 1 || committed != 1 {
		t.Fatalf("after Up: %+v, committed %d", db, committed)
	}
	if fmt.Sprint(applied) != "[1 2]" {
		t.Errorf("applying reports = %v", applied)
	}
	// Nothing to do is success.
	if err := Run(NewDriver(ctx, cfg), files(), "m", func(m *migrate.Migrate) error { return m.Up() }); err != nil {
		t.Fatalf("Up on a current schema: %v", err)
	}

	db = &fakeDB{failOn: "CREATE b"}
	cfg.Begin = db.begin
	cfg.TxError = func(err error) error { return fmt.Errorf("rolled back: %w", err) }
	err := Run(NewDriver(ctx, cfg), files(), "m", func(m *migrate.Migrate) error { return m.Up() })
	if err == nil || !strings.Contains(err.Error(), "rolled back: statement failed") {
		t.Fatalf("Up with a failing file = %v", err)
	}
	if db.present || db.commits != 0 || db.rollback != 1 {
		t.Fatalf("after a failed Up: %+v", db)
	}
}

func TestDriverLocking(t *testing.T) {
	db := &fakeDB{}
	d := NewDriver(context.Background(), Config{Name: "fake", Table: "t", Begin: db.begin})
	if _, _, err := d.Version(); !errors.Is(err, database.ErrNotLocked) {
		t.Errorf("Version without the lock = %v", err)
	}
	if err := d.Unlock(); !errors.Is(err, database.ErrNotLocked) {
		t.Errorf("Unlock without the lock = %v", err)
	}
	if err := d.Lock(); err != nil {
		t.Fatal(err)
	}
	if err := d.Lock(); !errors.Is(err, database.ErrLocked) {
		t.Errorf("a second Lock = %v", err)
	}
	if v, dirty, err := d.Version(); err != nil || v != database.NilVersion || dirty {
		t.Errorf("Version of an empty table = %d, %v, %v", v, dirty, err)
	}
	if err := d.SetVersion(database.NilVersion, true); err != nil {
		t.Fatal(err)
	}
	if got := db.log[len(db.log)-1]; got != "DELETE FROM t; INSERT INTO t (version, dirty) VALUES (-1, true)" {
		t.Errorf("SetVersion(-1, dirty) ran %q", got)
	}
	if err := d.SetVersion(database.NilVersion, false); err != nil {
		t.Fatal(err)
	}
	if got := db.log[len(db.log)-1]; got != "DELETE FROM t" {
		t.Errorf("SetVersion(-1, clean) ran %q", got)
	}
	// Close rolls back the open transaction.
	if err := d.Close(); err != nil || db.rollback != 1 || db.commits != 0 {
		t.Errorf("Close: %v, %+v", err, db)
	}
	if err := d.Drop(); err == nil {
		t.Error("Drop succeeded")
	}
	if _, err := d.Open("x://"); err == nil {
		t.Error("Open succeeded")
	}
}

// TestCheckVersion: a clean recorded version goes through CheckVersion,
// a dirty one does not.
func TestCheckVersion(t *testing.T) {
	db := &fakeDB{version: 2, present: true}
	calls := 0
	d := NewDriver(context.Background(), Config{Name: "fake", Table: "t", Begin: db.begin,
		CheckVersion: func(_ context.Context, _ Tx, v int) (int, error) {
			calls++
			return v - 1, nil
		}})
	if err := d.Lock(); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if v, _, err := d.Version(); err != nil || v != 1 || calls != 1 {
		t.Errorf("Version = %d, %v after %d checks; want 1 after 1", v, err, calls)
	}
	db2 := &fakeDB{version: 2, dirty: true, present: true}
	d2 := NewDriver(context.Background(), Config{Name: "fake", Table: "t", Begin: db2.begin,
		CheckVersion: func(context.Context, Tx, int) (int, error) { calls++; return 0, errors.New("no") }})
	if err := d2.Lock(); err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if v, dirty, err := d2.Version(); err != nil || v != 2 || !dirty || calls != 1 {
		t.Errorf("Version of a dirty record = %d, %v, %v after %d checks", v, dirty, err, calls)
	}
}

func TestKnownError(t *testing.T) {
	if _, ok := KnownError(errors.New("other"), 3); ok {
		t.Error("an unknown error is known")
	}
	if _, ok := KnownError(nil, 3); ok {
		t.Error("nil is known")
	}
	ce := &contract.Error{Code: contract.Unavailable}
	if e, ok := KnownError(fmt.Errorf("x: %w", ce), 3); !ok || e != ce {
		t.Errorf("a contract error = %v, %v", e, ok)
	}
	e, ok := KnownError(migrate.ErrDirty{Version: 2}, 3)
	if !ok || contract.CodeOf(e) != contract.SchemaMismatch || !strings.Contains(e.Error(), "migration 2 is dirty") {
		t.Errorf("ErrDirty = %v, %v", e, ok)
	}
	e, ok = KnownError(fmt.Errorf("read: %w", fs.ErrNotExist), 3)
	if !ok || contract.CodeOf(e) != contract.SchemaMismatch {
		t.Errorf("a version without files = %v, %v", e, ok)
	}
}

func TestPrepare(t *testing.T) {
	for _, c := range []struct {
		mode contract.MigrateMode
		want string
	}{{contract.MigrateAuto, "up"}, {contract.MigrateVerify, "verify"}, {contract.MigrateOff, ""}} {
		var got string
		err := Prepare(context.Background(), c.mode,
			func(context.Context) error { got = "verify"; return nil },
			func(context.Context) error { got = "up"; return nil })
		if err != nil || got != c.want {
			t.Errorf("Prepare(%v) ran %q, %v; want %q", c.mode, got, err, c.want)
		}
	}
}

func TestSchemaCheck(t *testing.T) {
	for _, c := range []struct {
		st     contract.SchemaStatus
		ok     bool
		detail string
		hint   string
	}{
		{contract.SchemaStatus{Schema: "s", Version: 2, Latest: 2}, true, "s at version 2 (latest)", ""},
		{contract.SchemaStatus{Schema: "s", Version: 1, Latest: 2}, false, "s is at version 1 of 2", "durable migrate up"},
		{contract.SchemaStatus{Schema: "s", Version: 3, Latest: 2}, false, "newer than this binary's 2", "upgrade durable"},
		{contract.SchemaStatus{Schema: "s", Version: 2, Latest: 2, Dirty: true}, false, "s is dirty at version 2", "durable migrate force"},
	} {
		ch := SchemaCheck(c.st, nil)
		if ch.Name != "schema" || ch.OK != c.ok || !strings.Contains(ch.Detail, c.detail) || !strings.Contains(ch.Hint, c.hint) ||
			(!c.ok && contract.CodeOf(ch.Err) != contract.SchemaMismatch) || (c.ok && ch.Err != nil) {
			t.Errorf("SchemaCheck(%+v) = %+v", c.st, ch)
		}
	}
	err := &contract.Error{Code: contract.Unavailable, Msg: "down"}
	if ch := SchemaCheck(contract.SchemaStatus{}, err); ch.OK || ch.Err != err || ch.Detail != err.Error() {
		t.Errorf("SchemaCheck of a failed read = %+v", ch)
	}
}
