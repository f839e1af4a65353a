package idempotency

import (
	"encoding/json"
	"net/http"
)

// problem is an RFC 9457 problem detail. The type is "about:blank", so the
// title is the status's reason phrase, except for the problems with a type
// of their own ([OutcomeExpiredType]); the detail is a fixed text that
// never contains the key or other request data.
type problem struct {
	status int
	body   []byte
}

func newProblem(status int, detail string) *problem {
	return newTypedProblem(status, "about:blank", http.StatusText(status), detail)
}

// newTypedProblem is a problem of its own type, whose title names it.
func newTypedProblem(status int, typ, title, detail string) *problem {
	body, err := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{typ, title, status, detail})
	if err != nil {
		panic(err)
	}
	return &problem{status: status, body: append(body, '\n')}
}

// The problems the middleware answers with.
var (
	probMissingKey   = newProblem(http.StatusBadRequest, "This request requires an idempotency key header.")
	probMalformedKey = newProblem(http.StatusBadRequest, "The idempotency key header must be a structured-field string of 1 to 255 printable ASCII characters.")
	probUnreadable   = newProblem(http.StatusBadRequest, "The request body could not be read.")
	probTooLarge     = newProblem(http.StatusRequestEntityTooLarge, "The request body is too large for an idempotent request.")
	probMismatch     = newProblem(http.StatusUnprocessableEntity, "The idempotency key was already used for a different request.")
	probInFlight     = newTypedProblem(http.StatusConflict, InFlightType, "Idempotency key in flight",
		"A request with the same idempotency key is still being processed. Retry later.")
	probUnavailable = newProblem(http.StatusServiceUnavailable, "Idempotent requests cannot be processed at the moment. Retry later.")
	probNotStored   = newProblem(http.StatusServiceUnavailable, "The outcome of this request could not be recorded. Retry later with the same idempotency key.")
	probInternal    = newProblem(http.StatusInternalServerError, "The idempotent request could not be processed.")
	probExpired     = newTypedProblem(http.StatusGone, OutcomeExpiredType, "Idempotent outcome expired",
		"The request with this idempotency key was already processed, and its outcome is no longer stored, so it cannot be replayed. The request was not processed again. Do not retry it with this idempotency key.")
	probTooLargeTx = newProblem(http.StatusInternalServerError, "The response was too large to be recorded, so the request's changes were rolled back.")
	probCorrupt    = newProblem(http.StatusInternalServerError, "The stored outcome of this idempotency key cannot be read. Contact the operator; retrying will not help.")
)

// InFlightType is the problem type of the 409 Conflict answer to a request
// whose key's first request is still being processed (sent with
// Retry-After): a retry with the same key later gets its outcome. It tells
// this 409, which a client should retry, from a handler's own 409s, which
// it should not (the client kit, package client, retries only this one).
const InFlightType = "https://github.com/durable-go/durable/problems/idempotency-key-in-flight"

// OutcomeExpiredType is the problem type of the 410 Gone answer to a retry
// whose key's outcome is no longer stored (only its tombstone is left; see
// durable.WithTombstoneRetention): the request was processed once, its
// response cannot be replayed, and it must not be retried with this key.
const OutcomeExpiredType = "https://github.com/durable-go/durable/problems/idempotency-outcome-expired"

// writeProblem writes p, with a Retry-After header unless retryAfter is "".
func writeProblem(w http.ResponseWriter, p *problem, retryAfter string) {
	h := w.Header()
	h["Content-Type"] = []string{"application/problem+json"}
	h["Cache-Control"] = []string{"no-store"}
	if retryAfter != "" {
		h["Retry-After"] = []string{retryAfter}
	}
	w.WriteHeader(p.status)
	w.Write(p.body)
}
