package postgres

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"go.uber.org/multierr"
)

// maxTxRetries bounds how often a statement that failed with a
// serialization failure or a deadlock (40001, 40P01) is run again.
const maxTxRetries = 3

// opKind says whether a failed statement may have changed anything.
type opKind = pgclient.Kind

const (
	read  = pgclient.Read
	write = pgclient.Write
)

// do runs f, retrying a bounded number of times when it failed with a
// serialization failure or a deadlock (the statement rolled back) or before
// the statement was sent (a pooled connection that broke while idle: pgconn
// marks such failures SafeToRetry, and the queriers mark failures to get a
// connection), and maps its error once. Nothing that may have reached the
// server is ever re-sent here.
func (b *Backend) do(ctx context.Context, kind opKind, f func() error) error {
	if b.closed.Load() {
		return errClosed()
	}
	for attempt := 0; ; attempt++ {
		err := f()
		if err == nil {
			return nil
		}
		if attempt < maxTxRetries && (retryableTx(err) || pgclient.SafeToRetry(err) && configFailure(err, endpoint{}, false) == nil) && ctx.Err() == nil {
			b.retried(ctx, err, attempt)
			// Jitter so that the retries of two deadlocked statements do not
			// collide again.
			d := time.Duration(1+rand.IntN(5*(attempt+1))) * time.Millisecond
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
			continue
		}
		return classify(ctx, err, kind)
	}
}

func errClosed() error {
	return &contract.Error{Code: contract.Closed, Msg: "backend is closed"}
}

func retryableTx(err error) bool {
	c, ok := sqlState(err)
	return ok && (c == "40001" || c == "40P01")
}

// sqlState returns the SQLSTATE of the server error in err's chain, from
// either client library.
func sqlState(err error) (string, bool) { return pgclient.SQLState(err) }

// classify maps a driver error to a *contract.Error. It is the only place
// where driver errors are interpreted (through pgclient's client-neutral
// view of them). The result's text is a fixed message;
// the driver error stays reachable through Unwrap.
//
//   - A server error (pgx's PgError, lib/pq's *pq.Error: anything with a
//     SQLSTATE) means the statement failed and its implicit transaction
//     rolled back: nothing was applied. See classifySQLState: class 28
//     (authentication), 3D000 (no such database) and 42501 (a missing
//     privilege) → PermissionDenied or Misconfigured, saying what to fix;
//     class 08, 57P0x, 53, 40001/40P01 (after retries), 55P03, 25006 →
//     Unavailable; 57014 → Canceled when the caller's context ended, else
//     Unavailable; 23505 → AlreadyExists; 3F000, 42P01, 42703, 42883 →
//     SchemaMismatch; anything else → Unknown. The message ends with the
//     SQLSTATE and its condition name, never the server's text.
//   - TLS required by the DSN and refused by the server, or an untrusted
//     server certificate → Misconfigured (see configFailure).
//   - A failure to connect, or any error marked SafeToRetry (pgconn's, and
//     the queriers' marks, see pgclient.NotSent), happened before the
//     statement was sent → Unavailable (Canceled when the context ended).
//   - Any other failure (the connection broke, the context ended while the
//     statement was in flight, and database/sql's driver.ErrBadConn, which
//     lib/pq also returns after sending) → OutcomeUnknown for a write,
//     Unavailable (or Canceled) for a read.
//   - A closed pool (pgxpool, *sql.DB, sql.ErrConnDone) → Closed.
func classify(ctx context.Context, err error, kind opKind) error {
	var ce *contract.Error
	if errors.As(err, &ce) {
		return err
	}
	ctxErr := ctx.Err()
	if code, ok := sqlState(err); ok {
		return classifySQLState(ctxErr, code, err)
	}
	// TLS refused or an untrusted certificate: no SQLSTATE, not retryable.
	if e := configFailure(err, connEndpoint(err), isConnectError(err)); e != nil {
		return e
	}
	if pgclient.PoolClosed(err) {
		return &contract.Error{Code: contract.Closed, Msg: "connection pool is closed", Err: err}
	}
	// A bare context error comes from waiting for a pooled connection: the
	// statement was never sent.
	bare := err == context.Canceled || err == context.DeadlineExceeded
	notSent := bare || pgclient.IsConnectError(err) || pgclient.SafeToRetry(err)
	if ctxErr != nil {
		if notSent || kind == read {
			return &contract.Error{Code: contract.Canceled, Err: multierr.Combine(ctxErr, err)}
		}
		return &contract.Error{Code: contract.OutcomeUnknown, Msg: "context ended while the statement was in flight", Err: multierr.Combine(ctxErr, err)}
	}
	if notSent || kind == read {
		return &contract.Error{Code: contract.Unavailable, Msg: "database unreachable", Err: err}
	}
	return &contract.Error{Code: contract.OutcomeUnknown, Msg: "connection failed after the statement was sent", Err: err}
}
