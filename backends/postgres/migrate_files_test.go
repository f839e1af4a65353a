package postgres

import (
	"errors"
	"hash/crc32"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/durable-go/durable/contract"
)

// migrationFileNames lists the embedded migration files, sorted.
func migrationFileNames(t *testing.T) []string {
	t.Helper()
	entries, err := fs.ReadDir(migrationFS, migrationDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) < 2 {
		t.Fatalf("only %d migration files", len(names))
	}
	return names
}

// sqlWithoutComments drops -- comments, which may name objects freely.
func sqlWithoutComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		line, _, _ = strings.Cut(line, "--")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestMigrationFilesAreSchemaQualified: in the embedded files every table
// and sequence is named through the {schema} placeholder (an index is
// created in its table's schema), and MigrationFiles replaces every
// placeholder with the quoted schema, so no statement depends on
// search_path.
func TestMigrationFilesAreSchemaQualified(t *testing.T) {
	names := migrationFileNames(t)
	objectName := regexp.MustCompile(`(\{schema\}\.|"[a-z_0-9]+"\.|\b)(workflows|idempotency_keys|leases|lease_tokens|schema_migrations)\b`)
	ddl := regexp.MustCompile(`(?i)\b(CREATE(?:\s+OR\s+REPLACE)?|ALTER|DROP)\s+(TABLE|SEQUENCE|INDEX|VIEW|TYPE|FUNCTION)\s+(IF\s+(NOT\s+)?EXISTS\s+)?([^\s(;]+)(\s+ON\s+([^\s(;]+))?`)
	for _, name := range names {
		raw, err := fs.ReadFile(migrationFS, path.Join(migrationDir, name))
		if err != nil {
			t.Fatal(err)
		}
		code := sqlWithoutComments(string(raw))
		if !strings.Contains(code, schemaPlaceholder) {
			t.Errorf("%s: no %s placeholder", name, schemaPlaceholder)
		}
		for _, m := range objectName.FindAllStringSubmatch(code, -1) {
			if m[1] != schemaPlaceholder+"." {
				t.Errorf("%s: %q is not named through the placeholder", name, m[0])
			}
		}
		for _, m := range ddl.FindAllStringSubmatch(code, -1) {
			target := m[5]
			if strings.EqualFold(m[2], "INDEX") && m[7] != "" {
				target = m[7] // CREATE INDEX name ON table: the index goes to the table's schema
			}
			if !strings.HasPrefix(target, schemaPlaceholder+".") {
				t.Errorf("%s: %q names an object without its schema", name, strings.TrimSpace(m[0]))
			}
		}
	}

	files, err := MigrationFiles("my_schema")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, name := range names {
		paths = append(paths, path.Join(migrationDir, name))
		data, err := fs.ReadFile(files, path.Join(migrationDir, name))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := fs.ReadFile(migrationFS, path.Join(migrationDir, name))
		if strings.Contains(string(data), schemaPlaceholder) {
			t.Errorf("%s: a placeholder is left after substitution", name)
		}
		if want := strings.ReplaceAll(string(raw), schemaPlaceholder, `"my_schema"`); string(data) != want {
			t.Errorf("%s: substituted text differs from the embedded file with the quoted schema", name)
		}
	}
	// A well-behaved fs.FS: golang-migrate's iofs source and any other tool
	// can read it.
	if err := fstest.TestFS(files, paths...); err != nil {
		t.Error(err)
	}
	entries, err := fs.ReadDir(files, migrationDir)
	if err != nil || len(entries) != len(names) {
		t.Fatalf("ReadDir = %d entries, %v; want %d", len(entries), err, len(names))
	}
	if _, err := fs.ReadFile(files, path.Join(migrationDir, "nosuch.sql")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("reading a missing file = %v, want ErrNotExist", err)
	}

	for _, bad := range []string{"", "Bad", "pg_x", `a"b`, "a.b"} {
		if _, err := MigrationFiles(bad); contract.CodeOf(err) != contract.InvalidArgument {
			t.Errorf("MigrationFiles(%q) = %v, want InvalidArgument", bad, err)
		}
	}
}

// TestMigrationObjectListMatchesTheFiles: schemaObjectList, which the
// mismatch check reads, is exactly the tables, sequences and functions the
// up migrations leave, each with the migration that creates it.
func TestMigrationObjectListMatchesTheFiles(t *testing.T) {
	create := regexp.MustCompile(`(?i)\bCREATE\s+(?:OR\s+REPLACE\s+)?(TABLE|SEQUENCE|FUNCTION)\s+(IF\s+NOT\s+EXISTS\s+)?\{schema\}\.([a-z_0-9]+)`)
	drop := regexp.MustCompile(`(?i)\bDROP\s+(TABLE|SEQUENCE|FUNCTION)\s+(IF\s+EXISTS\s+)?\{schema\}\.([a-z_0-9]+)`)
	got := map[string]schemaObject{}
	for _, name := range migrationFileNames(t) {
		if !strings.HasSuffix(name, ".up.sql") {
			continue
		}
		digits, _, _ := strings.Cut(name, "_")
		v, err := strconv.ParseUint(digits, 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := fs.ReadFile(migrationFS, path.Join(migrationDir, name))
		code := sqlWithoutComments(string(raw))
		for _, m := range create.FindAllStringSubmatch(code, -1) {
			kind := "r"
			switch strings.ToUpper(m[1]) {
			case "SEQUENCE":
				kind = "S"
			case "FUNCTION":
				kind = "f"
			}
			got[m[3]] = schemaObject{m[3], kind, uint(v)}
		}
		for _, m := range drop.FindAllStringSubmatch(code, -1) {
			delete(got, m[3])
		}
	}
	if len(got) != len(schemaObjectList) {
		t.Errorf("the migrations leave %d tables, sequences and functions, schemaObjectList has %d", len(got), len(schemaObjectList))
	}
	for _, o := range schemaObjectList {
		if got[o.name] != o {
			t.Errorf("schemaObjectList has %+v, the migrations %+v", o, got[o.name])
		}
	}
}

// TestMigrationLockKeyIsGolangMigrates: the key is golang-migrate's
// (database.GenerateAdvisoryLockId of the database, the schema and the
// version table), recomputed here from its definition: CRC-32 (IEEE) of
// "schema\x00table\x00database" times its salt, as a uint32.
func TestMigrationLockKeyIsGolangMigrates(t *testing.T) {
	for _, c := range []struct{ db, schema string }{{"postgres", "durable"}, {"app", "dt_1_2_ab"}, {"", "x"}} {
		got, err := migrationLockKey(c.db, c.schema)
		if err != nil {
			t.Fatal(err)
		}
		sum := crc32.ChecksumIEEE([]byte(c.schema + "\x00" + MigrationsTable + "\x00" + c.db))
		want := int64(sum * uint32(1486364155))
		if got != want {
			t.Errorf("migrationLockKey(%q, %q) = %d, want %d", c.db, c.schema, got, want)
		}
	}
	a, _ := migrationLockKey("postgres", "a")
	b, _ := migrationLockKey("postgres", "b")
	if a == b {
		t.Error("two schemas share a lock key")
	}
}

// TestMigrationMismatchMessages: what the SchemaMismatch of missing objects
// says in each case; it names schemas and objects, never SQL.
func TestMigrationMismatchMessages(t *testing.T) {
	all := []string{"idempotency_keys", "lease_tokens", "leases", "workflows"}
	for _, c := range []struct {
		name string
		rows []catalogRow
		want []string
		not  []string
	}{
		{"NoneElsewhereToo", nil,
			[]string{`schema "s" records version 2`, "has none of its objects", "tables workflows, idempotency_keys, leases and sequence lease_tokens", "durable migrate up", `creates them in "s"`},
			[]string{"public", "partly"}},
		{"NoneInPublic", []catalogRow{{"public", "workflows"}, {"public", "leases"}, {"public", "idempotency_keys"}, {"public", "lease_tokens"}, {"other", "unrelated"}},
			[]string{"has none of its objects", `exist in schema "public"`, "transaction pooler", "durable migrate up", `drop the copies in "public"`},
			[]string{"partly", `"other"`}},
		{"Partial", []catalogRow{{"s", "workflows"}, {"s", "idempotency_keys"}, {"s", "lease_tokens"}, {"x", "leases"}},
			[]string{"lacks table leases (it has workflows, idempotency_keys, lease_tokens)", `exist in schema "x"`, "partly migrated", "by hand"},
			[]string{"has none"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := analyzeObjects("s", 2, c.rows)
			if len(o.missing) == 0 {
				t.Fatal("nothing missing")
			}
			err := objectsMismatch("s", 2, o)
			if contract.CodeOf(err) != contract.SchemaMismatch || !errors.Is(err, errObjectsMissing) {
				t.Fatalf("error = %v, want SchemaMismatch caused by errObjectsMissing", err)
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
			for _, n := range append(c.not, "SELECT", "CREATE", "pg_catalog", "postgres://") {
				if strings.Contains(msg, n) {
					t.Errorf("message %q contains %q", msg, n)
				}
			}
		})
	}
	if got, want := quoteNames([]string{"a", "b", "c", "d", "e", "f", "public"}), `"public", "a", "b", "c", "d" and 2 more`; got != want {
		t.Errorf("quoteNames = %s, want %s", got, want)
	}
	o := analyzeObjects("s", 2, []catalogRow{{"s", "workflows"}, {"s", "idempotency_keys"}, {"s", "leases"}, {"s", "lease_tokens"}, {"public", "leases"}})
	if len(o.missing) != 0 || len(o.elsewhere) != 0 || !slices.Equal(slices.Sorted(slices.Values(o.present)), all) {
		t.Errorf("a complete schema: %+v", o)
	}
	if o := analyzeObjects("s", 0, nil); len(o.missing) != 0 {
		t.Errorf("version 0 needs no objects: %+v", o)
	}
}
