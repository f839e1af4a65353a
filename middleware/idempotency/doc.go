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
// Errors are RFC 9457 problem details (application/problem+json) of type
// "about:blank", whose title is the status's reason phrase and whose
// detail is a fixed text that never contains the key or request data:
//
//	400  the key is missing (when required) or malformed
//	413  the request body exceeds Options.MaxRequestBody
//	422  the key was used with another request fingerprint
//	409  the key's first request is still in flight (with Retry-After)
//	503  the store is unavailable or timed out, or the response could not
//	     be stored (with Retry-After)
//	500  the store rejected the claim (an invalid scope from Options.Scope)
//
// # Non-HTTP code
//
// [durable.Store.Do] gives the same guarantees to any function; the
// middleware is built on it.
package idempotency
