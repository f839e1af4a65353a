// Package grpcidem carries durable's idempotency keys over gRPC: a unary
// server interceptor with the semantics of middleware/idempotency (stored
// outcomes, replay, conflicts, waiting for a call in flight, the
// transactional mode, store-before-send) and a unary client interceptor that
// gives a call a key and retries it safely with that key.
//
// It is a nested module so that google.golang.org/grpc stays out of the root
// module's go.mod.
package grpcidem
