package postgres

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOnlyPgclientImportsClientLibraries: every use of a client library
// lives in internal/pgclient. Outside internal/, no non-test file imports
// lib/pq, pgx itself, pgconn, pgx's stdlib or puddle; pgxpool only in
// postgres.go, for the signatures of New, NewBackend and Backend.Pool,
// which hand the pool to pgclient.
func TestOnlyPgclientImportsClientLibraries(t *testing.T) {
	banned := []string{
		"github.com/lib/pq",
		"github.com/jackc/pgx/v5",
		"github.com/jackc/pgx/v5/pgconn",
		"github.com/jackc/pgx/v5/stdlib",
		"github.com/jackc/puddle/v2",
	}
	allowed := map[string]string{"github.com/jackc/pgx/v5/pgxpool": "postgres.go"}
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "internal" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			for _, b := range banned {
				if p == b || strings.HasPrefix(p, b+"/") && allowed[p] == "" {
					t.Errorf("%s imports %s: client-library code belongs in internal/pgclient", path, p)
				}
			}
			if file, ok := allowed[p]; ok && path != file {
				t.Errorf("%s imports %s, which only %s may (for the public constructors)", path, p, file)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("checked %d files; the walk missed the package", checked)
	}
}
