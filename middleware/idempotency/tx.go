package idempotency

import (
	"context"

	"github.com/durable-go/durable"
)

// txKey is the context key of the request's transaction.
type txKey struct{}

// WithTx returns ctx carrying tx, where [TxFrom] and [Tx] find it: the
// middleware's transactional mode puts the request's transaction there,
// and so does another transport's (middleware/grpcidem's interceptor), so
// that handlers read it one way.
func WithTx(ctx context.Context, tx durable.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFrom returns the transaction the middleware began for the request in
// transactional mode (Options.Transactional), or false: outside that mode,
// and for requests the middleware does not protect (no key when keys are
// optional, other methods), which must begin a transaction of their own.
// The handler writes its effects through it and must neither commit nor
// roll it back: the middleware does, after storing the response in it.
func TxFrom(ctx context.Context) (durable.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(durable.Tx)
	return tx, ok && tx != nil
}

// Tx returns the request's transaction (see [TxFrom]) as the client
// library's type T: pgx.Tx on a Postgres backend over pgx, *sql.Tx over
// lib/pq, pgx's stdlib or SQLite, *redis.Tx on Redis (queue the effect's
// commands on it). It reports false when the request has no transaction
// or T is not its type.
//
//	tx, ok := idempotency.Tx[pgx.Tx](r.Context())
func Tx[T any](ctx context.Context) (T, bool) {
	var zero T
	tx, ok := TxFrom(ctx)
	if !ok {
		return zero, false
	}
	t, err := durable.TxAs[T](tx)
	if err != nil {
		return zero, false
	}
	return t, true
}
