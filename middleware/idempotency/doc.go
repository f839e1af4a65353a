// Package idempotency is net/http middleware for the Idempotency-Key
// header (IETF draft-ietf-httpapi-idempotency-key-header), with the
// semantics of Stripe's idempotent requests, on any durable backend.
//
// A client that may retry a non-idempotent request (a POST that charges a
// card) sends a unique key with it. The first request with a key runs the
// handler; every retry gets the first response again, without running the
// handler, for as long as responses are retained:
//
//	store, err := durable.Open(ctx, "postgres://…") // or "memory://"
//	mw, err := idempotency.New(store, idempotency.Options{Required: true})
//	http.ListenAndServe(addr, mw(mux))
//
// # Behaviour
//
// The middleware applies to the methods in Options.Methods (POST and PATCH
// by default); other requests pass through untouched. For those:
//
//   - No key: 400 if Options.Required, otherwise the request passes through
//     unprotected.
//   - A malformed or over-long key: 400.
//   - The first request with a key claims it and runs the handler. While
//     the handler runs, and until its response is stored, the claim is
//     renewed every Options.RenewEvery, so a handler slower than the claim
//     TTL is not run twice. (If renewals fail
//     for a whole TTL, the handler's context is cancelled before another
//     request can take the key over.)
//   - A retry after the first request completed gets its response again:
//     the same status, the stored headers (Options.StoreHeaders) and the
//     body byte for byte, plus "Idempotent-Replayed: true".
//   - A retry after the response's retention (Options.Retention) ended,
//     while the key's tombstone is kept (durable.WithTombstoneRetention,
//     7 days by default): 410 Gone (see "Expired outcomes"); the handler
//     does not run again. After the tombstone ends the key is free.
//   - The same key with another request (by default another method, path or
//     body; see Options.Fingerprint): 422.
//   - A retry while the first request is still running: 409 with
//     Retry-After, or, with Options.WaitInFlight, the replay once the first
//     finishes (409 if it takes longer).
//   - The store unavailable, or not answering within Options.StoreTimeout,
//     before the handler ran: 503 with Retry-After (fail closed), or the
//     handler runs unprotected with Options.FailOpen.
//   - The handler ran but its response could not be stored: 503 with
//     Retry-After, never the handler's response (see "Storing
//     failures").
//
// Keys live in the scope Options.Scope returns for the request, so one
// tenant's keys never replay for another. Client keys are hashed (see
// [StoreKey]); their characters never reach storage.
//
// # Keys
//
// The header value is an RFC 8941 String of 1 to 255 printable ASCII
// characters, as the draft specifies:
//
//	Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// For compatibility an unquoted value is accepted too, taken whole as the
// key, if it has no spaces, double quotes, backslashes, commas or
// semicolons.
//
// # Which responses are stored
//
// A response is stored when the handler returns normally with a status
// that Options.StoreStatus accepts: by default every status except 408, 429
// and 5xx. In every other case the claim is released so that a retry runs
// the handler again:
//
//   - a 5xx, 408 or 429 response: the request was not (fully) processed;
//   - a panic: the claim is released and the panic continues, so
//     net/http's recovery (or yours) still sees it;
//   - the client went away (the request context ended) and the handler
//     wrote nothing or an error status: it gave up. A 2xx or 3xx response
//     is stored even then, since its effect happened;
//   - a body larger than Options.MaxBody, or a hijacked connection: the
//     response cannot be replayed. This is logged, and a retry runs the
//     handler again, so set MaxBody above your largest response.
//
// Handlers should bind their side effects to the request context (for
// example a database transaction begun with r.Context()): when the claim
// is lost, or the client goes away, the context is cancelled.
//
// # Buffering
//
// A response is sent only after it is stored. The handler's response (its
// status, headers and body, up to Options.MaxBody) is buffered and sent to
// the client only once the store has accepted it, so a client that has seen
// a response always gets exactly that response replayed. Flushes
// (http.Flusher or http.ResponseController) are deferred until then too: a
// handler that flushes does not stream, its client gets the whole response
// at the end. The exceptions are responses that are deliberately not stored
// (see above): they are sent once the claim is released, and a body larger
// than MaxBody is streamed from the moment it outgrows MaxBody, flushes
// included. Informational (1xx) responses are sent at once and never
// stored; trailers are not stored.
//
// # Storing failures
//
// If storing the response fails after the handler ran, the middleware
// retries, renewing the claim meanwhile, for up to Options.StoreTimeout. If
// the response still is not stored, the client gets 503 with Retry-After
// instead of the handler's response (which is discarded, and the failure
// logged at Warn), and the claim is kept, not released: a retry while it
// lives gets 409, not a second run of the handler. Residual hazard: the
// claim expires one claim TTL (Options.ClaimTTL, or the Store's default)
// after its last renewal, and a retry after that takes the key over and
// runs the handler again. (If the claim was
// lost before the response was stored, for example taken over after
// renewals failed for a whole TTL, a retry may run the handler again at
// once.) Where a duplicate effect is unacceptable, make the effect itself
// conditional too.
//
// Each request claims its key with a claim token of its own, reused when
// the claim is retried after a lost reply, so that a claim stored whose
// answer never arrived comes back to the same request instead of making
// it, and every retry until the claim's TTL ends, answer 409.
//
// # Expired outcomes
//
// A stored response is replayed for Options.Retention (the Store's key
// retention by default). After that only a tombstone of the key is kept
// (its request fingerprint and the response's status code) until the
// Store's tombstone retention ends (durable.WithTombstoneRetention, 7 days
// by default, counted from the first response). A retry of the same
// request meanwhile gets 410 Gone, with Cache-Control: no-store and a
// problem of type [OutcomeExpiredType], title "Idempotent outcome expired":
// the request was processed once, its response cannot be replayed, and it
// must not be retried with this key (a new key makes it a new request).
// Another request with the key still gets 422.
//
// # Transactional mode
//
// With Options.Transactional, on a store whose backend has transactions
// the caller can share (PostgreSQL, SQLite, Redis), the middleware begins a
// transaction before the handler runs and stores the handler's response in
// it, so that the handler's database effects and the stored response
// commit together:
//
//	mw, err := idempotency.New(store, idempotency.Options{Transactional: true})
//	…
//	func pay(w http.ResponseWriter, r *http.Request) {
//		tx, _ := idempotency.Tx[pgx.Tx](r.Context())
//		if _, err := tx.Exec(r.Context(), "INSERT INTO payments …", …); err != nil { … }
//		w.WriteHeader(http.StatusCreated)
//	}
//
// The handler writes through the transaction and neither commits nor rolls
// it back. When it returns, the middleware stores the response in the
// transaction, commits, and only then sends the response; no response
// reaches the client that was not committed with its effects. If the
// response is not to be stored (a 5xx, 408 or 429, the client gone with an
// error, a panic), the transaction is rolled back and the claim released,
// so the effects are undone and a retry runs the handler again. A response
// body larger than Options.MaxBody is not streamed in this mode: the
// transaction is rolled back and the client gets 500 (set MaxBody above
// your largest response). Hijacking the connection is refused.
// If the commit's reply is lost, the client gets 503 with Retry-After and
// the claim is kept: a retry gets 409 while it lives, then the stored
// response if the commit applied, or a single new run if it did not —
// never two runs. The residual hazard of "Storing failures" is gone for
// every effect written through the transaction; effects outside it (a
// call to another service, an e-mail) keep it.
//
// Requests the middleware does not protect (other methods, or no key when
// keys are optional) get no transaction ([TxFrom] reports false) and
// begin their own. New fails with Code Unimplemented on a backend without
// shared transactions (memory, etcd), and with Options.FailOpen.
//
// # Time bounds
//
// Request contexts usually have no deadline, so the middleware bounds its
// own store calls: each phase in which a request waits for the store ends
// within Options.StoreTimeout (default 10 s) — claiming the key (with
// Options.WaitInFlight, claiming and waiting together take at most
// WaitInFlight plus StoreTimeout), and storing the response or releasing
// the claim after the handler returned. A hung store therefore yields 503
// with Retry-After within the bound rather than a hung request. The handler
// itself is not bounded.
//
// # Errors
//
// Errors are RFC 9457 problem details (application/problem+json), with
// Cache-Control: no-store, of type "about:blank", whose title is the
// status's reason phrase (409's and 410's have a type and title of their
// own, [InFlightType] and [OutcomeExpiredType]), and
// whose detail is a fixed text that never contains the key or request
// data:
//
//	400  the key is missing (when required) or malformed
//	413  the request body exceeds Options.MaxRequestBody
//	422  the key was used with another request fingerprint
//	409  the key's first request is still in flight (with Retry-After;
//	     type InFlightType, so that clients can tell it from a handler's 409)
//	410  the key's response is no longer stored, only its tombstone: the
//	     request ran once and must not be retried with this key (type
//	     OutcomeExpiredType, Cache-Control: no-store)
//	503  the store is unavailable or timed out, or the response could not
//	     be stored (with Retry-After)
//	500  the store rejected the claim (an invalid scope from Options.Scope),
//	     or, in transactional mode, the response was too large to store
//
// # Non-HTTP code
//
// [durable.Store.Do] gives the same guarantees to any function; the
// middleware is built on it.
package idempotency
