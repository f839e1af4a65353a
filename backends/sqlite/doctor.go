package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/sqlmigrate"
)

// Check is the result of one of Doctor's checks: [contract.Check], named
// here for the callers of this package. Its Name is "connect", "journal",
// "schema" or "write"; its Detail never holds the path.
type Check = contract.Check

var _ contract.Doctor = (*Backend)(nil)

// Doctor checks that the backend is usable and changes nothing:
//
//   - connect: the database answers a query (and SQLite's version);
//   - journal: the journal mode and synchronous setting (WAL is what
//     several processes need to read while one writes);
//   - schema: the schema version is the one this code needs;
//   - write: the write lock can be taken within the busy timeout (a
//     BEGIN IMMEDIATE that is rolled back), so the file and its directory
//     are writable and no process holds the lock for long.
func (b *Backend) Doctor(ctx context.Context) []Check {
	var checks []Check
	fail := func(name string, err error, hint string) []Check {
		return append(checks, Check{Name: name, Detail: err.Error(), Hint: hint, Err: err})
	}
	if err := b.lockWriter(ctx); err != nil {
		return fail("connect", err, "")
	}
	defer b.unlockWriter()
	var version string
	if err := b.wc.QueryRowContext(ctx, `SELECT sqlite_version()`).Scan(&version); err != nil {
		return fail("connect", classify(ctx, err), "")
	}
	what := "file"
	if b.memory {
		what = "in-memory database"
	}
	checks = append(checks, Check{Name: "connect", OK: true, Detail: fmt.Sprintf("SQLite %s (modernc.org/sqlite, pure Go), %s", version, what)})

	var mode string
	var syncLevel int
	if err := b.wc.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return fail("journal", classify(ctx, err), "")
	}
	if err := b.wc.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&syncLevel); err != nil {
		return fail("journal", classify(ctx, err), "")
	}
	syncName := map[int]string{0: "off", 1: "normal", 2: "full", 3: "extra"}[syncLevel]
	jc := Check{Name: "journal", OK: true, Detail: fmt.Sprintf("journal_mode=%s, synchronous=%s, busy_timeout=%v", strings.ToLower(mode), syncName, b.busyTO)}
	if !b.memory && !strings.EqualFold(mode, "wal") {
		jc.Detail += ": readers wait while a writer commits"
		jc.Hint = "journal_mode=wal (the default) lets readers run during writes"
	}
	checks = append(checks, jc)

	s, err := b.readStatus(ctx)
	if err != nil {
		err = classify(ctx, err)
	}
	checks = append(checks, sqlmigrate.SchemaCheck(s, err))

	err = b.retryBusy(ctx, func() error { return b.begin(ctx) })
	if err != nil {
		e := classify(ctx, err)
		hint := ""
		if contract.CodeOf(e) == contract.Unavailable {
			hint = "another process holds the write lock for longer than busy_timeout"
		}
		return append(checks, Check{Name: "write", Detail: e.Error(), Hint: hint, Err: e})
	}
	b.rollback()
	return append(checks, Check{Name: "write", OK: true, Detail: "the write lock can be taken"})
}
