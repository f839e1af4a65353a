// Package client is the client half of idempotency over HTTP: an
// http.RoundTripper that gives each unsafe request an Idempotency-Key and
// retries it, with the same key, until it gets an answer it can trust.
//
//	c := &http.Client{Transport: &client.Transport{}}
//	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
//	if err != nil {
//		var e *client.Error // gave up: e.Key is the key to retry with later
//	}
//	r, _ := client.ResultOf(resp) // r.Replayed, r.Attempts, r.Key
//
// It speaks to servers that follow the IETF Idempotency-Key draft, such as
// durable's middleware/idempotency; it uses only the standard library.
//
// # Which requests
//
// A request is managed when its method is one of Transport.Methods (POST
// and PATCH by default; GET, HEAD and OPTIONS only if listed) or when it
// already carries the key header (the caller chose its key). Other requests
// go to Base once, untouched.
//
// A managed request without the header gets one: a random 128-bit key
// (32 hex digits), or Transport.Key's, sent as an RFC 8941 string
// ("…"). Every attempt of the request carries the same key, so the server
// runs it at most once and replays its outcome to the retries.
//
// # When it retries
//
// An attempt is retried, while attempts (MaxAttempts) and time (Budget)
// remain, when:
//
//   - the connection failed: the dial failed, the connection was reset or
//     closed before the whole response arrived (the body included, see
//     "Response bodies"), or the attempt took longer than AttemptTimeout;
//   - the answer is 409 Conflict with the problem type of a key in flight
//     ([InFlightType], what the middleware sends while the key's first
//     request is still running). Other 409s are the handler's and are not
//     retried;
//   - the answer is 429 Too Many Requests or 503 Service Unavailable: after
//     its Retry-After (seconds or an HTTP date) when it has one;
//   - the answer is another 5xx, except 501 Not Implemented and 505 HTTP
//     Version Not Supported, which a retry will not change.
//
// It never retries any other 4xx (400, 422, 410, …) or a 2xx or 3xx. Between
// attempts it waits a capped, jittered exponential backoff (from
// MinBackoff, doubling to MaxBackoff, each wait drawn from its upper
// half), or the answer's Retry-After if it has one (up to MaxRetryAfter).
// The request's context and the Budget bound everything: an attempt is cut
// when either ends, and no retry starts whose wait would outlast the
// Budget. When it stops retrying on a status, the caller gets that last
// response; when it stops on an error, the caller gets an [*Error] that
// carries the key, so the operation can be retried later with the same key.
//
// # Request bodies
//
// Every attempt sends the whole body again. The first uses the request's
// Body; the others a fresh one from req.GetBody, which http.NewRequest sets
// for bytes, strings and their readers. A managed request with a body that
// cannot be rewound (GetBody nil) is refused before anything is sent, with
// [ErrBodyNotRewindable], unless BufferBody allows buffering it (up to that
// many bytes; a longer body is refused too).
//
// # Response bodies
//
// A cut in the middle of a response body is a lost answer like any other,
// so the Transport reads the body of a managed request's final answer
// before returning it (up to MaxResponseBuffer, 1 MiB by default; the
// middleware stores no more than that by default either), and retries if
// the read fails. A longer body is returned as it streams, after what was
// read; a failure past that point reaches the caller's reads and is not
// retried. The bodies of answers it retries are drained a little (so that
// the connection can be reused) and closed.
//
// # Results
//
// [ResultOf] reports, for a response the Transport returned, the key it
// sent, how many attempts it took and whether the final answer was a
// replay (Idempotent-Replayed: true). The Transport records it in the
// context of the response's Request (resp.Request), the clone of the
// caller's request that it sent last; it never modifies the caller's
// request. Base's own retries (net/http's Transport resends a request with
// an Idempotency-Key header on a reused connection that broke before
// anything was read) are not counted as attempts.
//
// Errors never contain the key or request data; [Error.Key] holds it.
package client
