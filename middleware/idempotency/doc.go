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
//     the handler runs, the claim is renewed every Options.RenewEvery, so a
//     handler slower than the claim TTL is not run twice. (If renewals fail
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
//   - The store unavailable: 503 with Retry-After (fail closed), or the
//     handler runs unprotected with Options.FailOpen.
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
// The handler's response is buffered, up to Options.MaxBody, and sent to
// the client only after it has been stored. So a client that has seen a
// response always gets exactly that response replayed. A handler that
// flushes (http.Flusher or http.ResponseController) streams: what is
// buffered is sent at the flush and the rest goes straight to the client,
// still captured and stored if it fits. Informational (1xx) responses are
// sent at once and never stored; trailers are not stored.
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
//	503  the store is unavailable (with Retry-After)
//	500  the store rejected the claim (an invalid scope from Options.Scope)
//
// # Non-HTTP code
//
// [durable.Store.Do] gives the same guarantees to any function; the
// middleware is built on it.
package idempotency
