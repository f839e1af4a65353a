package grpcidem

import (
	"context"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/middleware/idempotency"
)

// withTx puts the call's transaction where the HTTP middleware puts a
// request's, so that handlers shared by both find it the same way.
func withTx(ctx context.Context, tx durable.Tx) context.Context { return idempotency.WithTx(ctx, tx) }

// TxFrom returns the transaction the interceptor began for the call in
// transactional mode (ServerOptions.Transactional), or false: outside that
// mode, and for calls the interceptor does not protect (no key when keys
// are optional, methods not listed), which must begin a transaction of
// their own. The handler writes its effects through it and neither commits
// nor rolls it back: the interceptor does, after storing the response in
// it. It is idempotency.TxFrom: the transaction is kept in the context the
// same way for HTTP and gRPC.
func TxFrom(ctx context.Context) (durable.Tx, bool) { return idempotency.TxFrom(ctx) }

// Tx returns the call's transaction (see [TxFrom]) as the client library's
// type T: *sql.Tx on SQLite, pgx.Tx on Postgres over pgx, *redis.Tx on
// Redis. It reports false when the call has no transaction or T is not its
// type.
func Tx[T any](ctx context.Context) (T, bool) { return idempotency.Tx[T](ctx) }
