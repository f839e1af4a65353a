package grpcidem

import (
	"context"

	"github.com/durable-go/durable"
)

type txKey struct{}

func withTx(ctx context.Context, tx durable.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFrom returns the transaction the interceptor began for the call in
// transactional mode (ServerOptions.Transactional), or false: outside that
// mode, and for calls the interceptor does not protect (no key when keys
// are optional, methods not listed), which must begin a transaction of
// their own. The handler writes its effects through it and neither commits
// nor rolls it back: the interceptor does, after storing the response in
// it.
func TxFrom(ctx context.Context) (durable.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(durable.Tx)
	return tx, ok && tx != nil
}

// Tx returns the call's transaction (see [TxFrom]) as the client library's
// type T: *sql.Tx on SQLite, pgx.Tx on Postgres over pgx. It reports false
// when the call has no transaction or T is not its type.
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
