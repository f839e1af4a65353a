// Package grpcidem carries durable's idempotency keys over gRPC: a unary
// server interceptor with the semantics of middleware/idempotency (stored
// outcomes, replay, conflicts, waiting for a call in flight, the
// transactional mode, store-before-send) and a unary client interceptor that
// gives a call a key and retries it safely with that key.
//
// It is a nested module so that google.golang.org/grpc stays out of the root
// module's go.mod.
//
// # Server
//
//	icpt, err := grpcidem.UnaryServerInterceptor(store, grpcidem.ServerOptions{})
//	srv := grpc.NewServer(grpc.UnaryInterceptor(icpt),
//		grpc.StreamInterceptor(grpcidem.StreamServerInterceptor(grpcidem.ServerOptions{})))
//
// The key travels in the request metadata "idempotency-key"
// (ServerOptions.MetadataKey): one value of 1 to 255 visible ASCII
// characters, bare or as an RFC 8941 String ("…"), as the HTTP header. The
// request's fingerprint is the full method name and the request message's
// deterministic encoding ([DefaultFingerprint]). For a unary call of a
// method the interceptor applies to (ServerOptions.Methods, all by
// default):
//
//   - No key: InvalidArgument (reason IDEMPOTENCY_KEY_MISSING) if
//     ServerOptions.Required, otherwise the call passes through unprotected.
//   - A malformed key, or several values: InvalidArgument (reason
//     IDEMPOTENCY_KEY_MALFORMED).
//   - The first call with a key claims it (durable.Store.Do, which renews
//     the claim while the handler runs) and runs the handler.
//   - A retry after it completed gets its response again: the same message
//     (decoded into its type, found by its full name in
//     ServerOptions.Types, protoregistry.GlobalTypes by default) or the
//     same status with its message and details, the stored header and
//     trailer metadata (ServerOptions.StoreHeader, StoreTrailer; none by
//     default), and header metadata "idempotency-replayed: true".
//   - The key with another request: FailedPrecondition, reason
//     IDEMPOTENCY_KEY_REUSED. Do not retry with this key.
//   - The key still in flight: Aborted, reason IDEMPOTENCY_KEY_IN_FLIGHT,
//     with an errdetails.RetryInfo (ServerOptions.RetryAfter); or, with
//     ServerOptions.WaitInFlight, the first call's response once it ends
//     (Aborted if that takes longer).
//   - The response's retention ended, only the tombstone is left:
//     FailedPrecondition, reason IDEMPOTENCY_OUTCOME_EXPIRED.
//   - The store unavailable before the handler ran, or the response not
//     storable after it ran: Unavailable, reason
//     IDEMPOTENCY_STORE_UNAVAILABLE, with RetryInfo (fail closed; the
//     handler's response is discarded and the claim kept until its TTL
//     ends, as in the HTTP middleware). ServerOptions.FailOpen runs the
//     handler unprotected instead when the store is unavailable.
//   - A stored response whose message type this server does not know, or
//     a corrupt record: Internal; the handler does not run again.
//
// Every status the interceptor answers itself carries an
// errdetails.ErrorInfo of domain [ErrorDomain] and a fixed message that
// never contains the key or request data.
//
// # Which responses are stored
//
// OK, and the statuses that say the caller is at fault (InvalidArgument,
// NotFound, AlreadyExists, PermissionDenied, FailedPrecondition,
// OutOfRange, Unimplemented, Unauthenticated): see [DefaultStoreCode] and
// ServerOptions.StoreCode. Any other status (Unknown, which a plain Go
// error becomes, Internal, Unavailable, DeadlineExceeded,
// ResourceExhausted, Aborted, DataLoss, Canceled) releases the claim so
// that a retry runs the handler again, and so do an error status when the
// caller went away, a response whose message type is not in
// ServerOptions.Types, and a response (the message, or the status with
// its details) larger than ServerOptions.MaxBody; the last is logged. Set
// MaxBody above your largest response.
//
// # Store before send
//
// The handler's response and the metadata it sets (grpc.SetHeader,
// grpc.SendHeader, grpc.SetTrailer: the interceptor hands the handler a
// transport stream that collects them) reach the client only after the
// response is stored, or deliberately not stored. A client that has seen a
// response gets exactly that response on every retry.
//
// # Transactional mode
//
// With ServerOptions.Transactional, on a backend with shared transactions
// (PostgreSQL, SQLite, Redis), the interceptor runs the handler through
// durable.DoTx: the handler finds the transaction with [Tx] or [TxFrom]
// and writes its effects through it; the interceptor stores the response
// in it, commits, and only then replies. A response not to be stored
// rolls the transaction back; one larger than MaxBody also answers
// Internal. UnaryServerInterceptor fails with Code Unimplemented on other
// backends.
//
// # Client
//
// [UnaryClientInterceptor] gives each call of the methods listed in
// ClientOptions.Methods (or a call made with [WithKey] or [Idempotent]) one
// key and retries it with that key on Unavailable, Aborted for a key in
// flight, ResourceExhausted, Internal, Unknown and DeadlineExceeded, within
// MaxAttempts, Budget and the call's context, honouring RetryInfo; it never
// retries the caller's faults. [Report] tells the caller the key, the
// attempts and whether the answer was a replay.
//
// # Streaming
//
// Stored outcomes cover unary calls only. [StreamServerInterceptor]
// refuses a streaming call that carries a key with Unimplemented, so that
// it does not look protected; streaming calls without a key pass through.
package grpcidem
