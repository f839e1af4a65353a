package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/durable-go/durable/contract"
	"go.uber.org/multierr"
	msqlite "modernc.org/sqlite"
)

// SQLite's primary result codes (the low byte of an extended code).
const (
	codeError      = 1
	codeInternal   = 2
	codePerm       = 3
	codeAbort      = 4
	codeBusy       = 5
	codeLocked     = 6
	codeNoMem      = 7
	codeReadOnly   = 8
	codeInterrupt  = 9
	codeIOErr      = 10
	codeCorrupt    = 11
	codeFull       = 13
	codeCantOpen   = 14
	codeProtocol   = 15
	codeSchema     = 17
	codeTooBig     = 18
	codeConstraint = 19
	codeMismatch   = 20
	codeMisuse     = 21
	codeNoLFS      = 22
	codeAuth       = 23
	codeNotADB     = 26
)

var codeNames = map[int]string{
	codeError: "SQLITE_ERROR", codeInternal: "SQLITE_INTERNAL", codePerm: "SQLITE_PERM",
	codeAbort: "SQLITE_ABORT", codeBusy: "SQLITE_BUSY", codeLocked: "SQLITE_LOCKED",
	codeNoMem: "SQLITE_NOMEM", codeReadOnly: "SQLITE_READONLY", codeInterrupt: "SQLITE_INTERRUPT",
	codeIOErr: "SQLITE_IOERR", codeCorrupt: "SQLITE_CORRUPT", codeFull: "SQLITE_FULL",
	codeCantOpen: "SQLITE_CANTOPEN", codeProtocol: "SQLITE_PROTOCOL", codeSchema: "SQLITE_SCHEMA",
	codeTooBig: "SQLITE_TOOBIG", codeConstraint: "SQLITE_CONSTRAINT", codeMismatch: "SQLITE_MISMATCH",
	codeMisuse: "SQLITE_MISUSE", codeNoLFS: "SQLITE_NOLFS", codeAuth: "SQLITE_AUTH", codeNotADB: "SQLITE_NOTADB",
}

// sqliteCode returns the primary result code of a SQLite error in err's
// chain.
func sqliteCode(err error) (int, bool) {
	var se *msqlite.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff, true
	}
	return 0, false
}

// CodeName returns the name of SQLite's primary result code of err, such
// as "SQLITE_BUSY", or "" when err holds no SQLite error. The name is the
// safe part of a SQLite error: it never contains a path, SQL text or data.
func CodeName(err error) string {
	c, ok := sqliteCode(err)
	if !ok {
		return ""
	}
	if n := codeNames[c]; n != "" {
		return n
	}
	return "SQLITE_" + itoa(c)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// codeSuffix is " (SQLITE_X)" for a SQLite error, "" otherwise.
func codeSuffix(err error) string {
	if n := CodeName(err); n != "" {
		return " (" + n + ")"
	}
	return ""
}

func isBusy(err error) bool {
	c, ok := sqliteCode(err)
	return ok && (c == codeBusy || c == codeLocked)
}

func isIOErr(err error) bool {
	c, ok := sqliteCode(err)
	return ok && c == codeIOErr
}

func invalid(msg string) error {
	return &contract.Error{Code: contract.InvalidArgument, Msg: msg}
}

func errClosed() error { return &contract.Error{Code: contract.Closed, Msg: "backend is closed"} }

// noSuchTable reports whether err says a table is missing. SQLite gives
// that the generic code SQLITE_ERROR, so its text is looked at here, once;
// it is never put in a message.
func noSuchTable(err error) bool {
	c, ok := sqliteCode(err)
	return ok && c == codeError && strings.Contains(err.Error(), "no such table")
}

// classify maps a driver error of an operation that was not applied (a
// write transaction rolled back, or a read) to a contract error. Every
// write runs in a transaction that either committed (no error) or rolled
// back, so only a failed COMMIT may leave the outcome unknown (see write).
func classify(ctx context.Context, err error) error {
	var ce *contract.Error
	if errors.As(err, &ce) {
		return err
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return &contract.Error{Code: contract.Canceled, Err: multierr.Combine(ctxErr, err)}
	}
	if errors.Is(err, sql.ErrConnDone) || errors.Is(err, sql.ErrTxDone) {
		return &contract.Error{Code: contract.Closed, Msg: "database connection is closed", Err: err}
	}
	if noSuchTable(err) {
		return &contract.Error{Code: contract.SchemaMismatch, Msg: "durable's tables are missing: run migrations (migrate=auto or `durable migrate up`)" + codeSuffix(err), Err: err}
	}
	c, ok := sqliteCode(err)
	if !ok {
		return &contract.Error{Code: contract.Unknown, Msg: "database error", Err: err}
	}
	sfx := " (" + CodeName(err) + ")"
	switch c {
	case codeBusy, codeLocked:
		return &contract.Error{Code: contract.Unavailable, Msg: "the database is locked by another connection or process; gave up after the busy timeout and retries" + sfx, Err: err}
	case codeInterrupt:
		return &contract.Error{Code: contract.Unavailable, Msg: "the statement was interrupted" + sfx, Err: err}
	case codeFull:
		return &contract.Error{Code: contract.Misconfigured, Msg: "the disk holding the database is full, or the database hit its size limit: free space, then retry" + sfx, Err: err}
	case codeReadOnly:
		return &contract.Error{Code: contract.PermissionDenied, Msg: "the database is read-only: the process needs write access to the file, its directory and its -wal and -shm files" + sfx, Err: err}
	case codePerm, codeAuth:
		return &contract.Error{Code: contract.PermissionDenied, Msg: "access to the database was denied" + sfx, Err: err}
	case codeCantOpen:
		return &contract.Error{Code: contract.Misconfigured, Msg: "cannot open the database file: check that its directory exists and is writable" + sfx, Err: err}
	case codeCorrupt, codeNotADB:
		return &contract.Error{Code: contract.Misconfigured, Msg: "the file is not a valid SQLite database or is damaged: restore it from a backup" + sfx, Err: err}
	case codeIOErr, codeNoMem, codeNoLFS, codeProtocol:
		return &contract.Error{Code: contract.Unavailable, Msg: "the database failed to read or write" + sfx, Err: err}
	case codeSchema:
		return &contract.Error{Code: contract.Unavailable, Msg: "the schema changed during the statement" + sfx, Err: err}
	case codeConstraint:
		return &contract.Error{Code: contract.Corrupt, Msg: "a stored record breaks a constraint" + sfx, Err: err}
	}
	return &contract.Error{Code: contract.Unknown, Msg: "database error" + sfx, Err: err}
}

// classifyOpen maps a failure to open or set up the database.
func classifyOpen(err error) error {
	var ce *contract.Error
	if errors.As(err, &ce) {
		return err
	}
	e := classify(context.Background(), err)
	if errors.As(e, &ce) && ce.Code == contract.Unknown {
		ce.Code, ce.Msg = contract.Misconfigured, "cannot open the database"+codeSuffix(err)
	}
	return e
}
