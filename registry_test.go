package durable_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/durable-go/durable"
	_ "github.com/durable-go/durable/backends/sqlite" // sqlite://
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

// optsDriver records the options durable.Open hands it.
type optsDriver struct {
	mu   sync.Mutex
	got  []contract.OpenOptions
	open int // calls of Open
}

func (d *optsDriver) Open(context.Context, string) (contract.Backend, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.open++
	return &spy{}, nil
}

func (d *optsDriver) OpenWith(_ context.Context, _ string, o contract.OpenOptions) (contract.Backend, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, o)
	return &spy{}, nil
}

var (
	theOptsDriver      = &optsDriver{}
	registerOptsDriver = sync.OnceFunc(func() { durable.Register("test-opts", theOptsDriver) })
)

// TestOpenHandsTheMigrateModeToTheDriver: durable.Open calls OpenWith on
// a driver that has it, with the mode of WithMigrateMode (none without
// it); a driver without it opens as always; an unknown mode fails before
// any driver is called.
func TestOpenHandsTheMigrateModeToTheDriver(t *testing.T) {
	registerTestDrivers()
	registerOptsDriver()
	ctx := context.Background()
	d := theOptsDriver
	d.mu.Lock()
	d.got, d.open = nil, 0
	d.mu.Unlock()

	s, err := durable.Open(ctx, "test-opts://x")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = durable.Open(ctx, "test-opts://x", durable.WithMigrateMode(durable.MigrateOff))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := durable.Open(ctx, "test-opts://x", durable.WithMigrateMode(durable.MigrateMode(9))); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Errorf("an unknown migrate mode: %v, want InvalidArgument", err)
	}
	if _, err := durable.Open(ctx, "test-opts://x", durable.WithOperationTimeout(-1)); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Errorf("an invalid store option: %v, want InvalidArgument", err)
	}
	d.mu.Lock()
	got, open := d.got, d.open
	d.mu.Unlock()
	if open != 0 || len(got) != 2 {
		t.Fatalf("Open called %d times, OpenWith %d times (%+v); want 0 and 2", open, len(got), got)
	}
	if got[0].Migrate != nil {
		t.Errorf("without WithMigrateMode the driver got mode %v", *got[0].Migrate)
	}
	if got[1].Migrate == nil || *got[1].Migrate != contract.MigrateOff {
		t.Errorf("with WithMigrateMode(MigrateOff) the driver got %+v", got[1])
	}
	// A driver without OpenWith (no schema) ignores the option.
	s, err = durable.Open(ctx, "test-nop://x", durable.WithMigrateMode(durable.MigrateOff))
	if err != nil {
		t.Fatalf("a driver without OpenWith: %v", err)
	}
	s.Close()
	// New opens nothing and ignores it too.
	s, err = durable.New(&spy{}, durable.WithMigrateMode(durable.MigrateVerify))
	if err != nil {
		t.Fatalf("New with WithMigrateMode: %v", err)
	}
	s.Close()
}

// TestMigrateOffOpensASchemaThatNeedsAttention: durable.Open with
// WithMigrateMode(MigrateOff), as the CLI's migrate and doctor commands
// open, opens a schema that is behind or dirty on Postgres and on SQLite
// without migrating it, whatever the DSN's migrate mode; the contract's
// Migrator and Doctor are reachable through As.
func TestMigrateOffOpensASchemaThatNeedsAttention(t *testing.T) {
	type setup struct {
		dsn      string
		setDirty func(t *testing.T)
	}
	for _, c := range []struct {
		name string
		new  func(t *testing.T) setup
	}{
		{"sqlite", func(t *testing.T) setup {
			path := filepath.Join(t.TempDir(), "x.db")
			return setup{dsn: "sqlite://" + path, setDirty: func(t *testing.T) {
				db, err := sql.Open("sqlite", path)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				if _, err := db.Exec(`UPDATE schema_migrations SET dirty = 1`); err != nil {
					t.Fatal(err)
				}
			}}
		}},
		{"postgres", func(t *testing.T) setup {
			srv := pgtest.Require(t)
			schema := srv.Schema(t)
			return setup{dsn: srv.DSN() + "&schema=" + schema, setDirty: func(t *testing.T) {
				if err := srv.Exec(context.Background(), `UPDATE "`+schema+`".schema_migrations SET dirty = true`); err != nil {
					t.Fatal(err)
				}
			}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			su := c.new(t)
			off := durable.WithMigrateMode(durable.MigrateOff)
			status := func(dsn string) contract.SchemaStatus {
				t.Helper()
				s, err := durable.Open(ctx, dsn, off)
				if err != nil {
					t.Fatalf("Open with MigrateOff: %v", err)
				}
				defer s.Close()
				var m contract.Migrator
				if !s.As(&m) {
					t.Fatal("the backend is no contract.Migrator")
				}
				st, err := m.MigrationStatus(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			// Behind (nothing applied): the DSN says auto, and then verify;
			// opening with MigrateOff changes nothing either way.
			for _, dsn := range []string{su.dsn, su.dsn + sep(su.dsn) + "migrate=verify"} {
				if st := status(dsn); st.Version != 0 || st.Current() {
					t.Fatalf("status of a new schema = %+v", st)
				}
			}
			if st := status(su.dsn); st.Version != 0 {
				t.Fatalf("opening with MigrateOff migrated: %+v", st)
			}
			if _, err := durable.Open(ctx, su.dsn+sep(su.dsn)+"migrate=verify"); !errors.Is(err, durable.ErrSchemaMismatch) {
				t.Fatalf("the application's open with migrate=verify on a schema behind = %v, want SchemaMismatch", err)
			}

			// Dirty: the application's open fails, MigrateOff opens, and
			// Doctor reports the schema.
			s, err := durable.Open(ctx, su.dsn) // migrate=auto
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			su.setDirty(t)
			if _, err := durable.Open(ctx, su.dsn); !errors.Is(err, durable.ErrSchemaMismatch) {
				t.Fatalf("the application's open of a dirty schema = %v, want SchemaMismatch", err)
			}
			st := status(su.dsn)
			if !st.Dirty || st.Version != st.Latest {
				t.Fatalf("status of the dirty schema = %+v", st)
			}
			s, err = durable.Open(ctx, su.dsn, off)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var d contract.Doctor
			if !s.As(&d) {
				t.Fatal("the backend is no contract.Doctor")
			}
			found := false
			for _, ch := range d.Doctor(ctx) {
				if ch.Name == "schema" {
					found = true
					if ch.OK || contract.CodeOf(ch.Err) != contract.SchemaMismatch {
						t.Errorf("doctor's schema check on a dirty schema = %+v", ch)
					}
				}
			}
			if !found {
				t.Error("doctor has no schema check")
			}
			if st := status(su.dsn); !st.Dirty {
				t.Errorf("opening with MigrateOff touched the dirty schema: %+v", st)
			}
		})
	}
}

// sep is the separator before one more DSN parameter.
func sep(dsn string) string {
	if strings.Contains(dsn, "?") {
		return "&"
	}
	return "?"
}
