package idempotency

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/durable-go/durable"
)

// ReplayedHeader is set to "true" on replayed responses.
const ReplayedHeader = "Idempotent-Replayed"

var replayedTrue = []string{"true"}

// New returns the middleware, or an error with Code InvalidArgument if an
// option is invalid. See the package documentation for what it does.
func New(store *durable.Store, opts Options) (func(http.Handler) http.Handler, error) {
	cfg, err := newConfig(store, opts)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cfg.serve(next, w, r)
		})
	}, nil
}

// notStored ends the handler run when its response must not be stored; Do
// then releases the claim.
type notStored struct{ reason string }

func (e *notStored) Error() string { return "idempotency: response not stored: " + e.reason }

func (c *config) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	if !c.applies(r.Method) {
		next.ServeHTTP(w, r)
		return
	}
	values := r.Header[c.header]
	if len(values) == 0 {
		if c.required {
			c.reject(r, w, probMissingKey, "")
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	key, ok := ParseKey(values)
	if !ok {
		c.reject(r, w, probMalformedKey, "")
		return
	}
	body, prob := c.readBody(r)
	if prob != nil {
		c.reject(r, w, prob, "")
		return
	}

	req := durable.ClaimRequest{
		KeyRef:      durable.KeyRef{Scope: c.scope(r), Key: StoreKey(key)},
		Fingerprint: storeFingerprint(c.fingerprint(r, body)),
		TTL:         c.ttl,
	}
	// One allocation for the per-request state of a run: the recorder, the
	// body reader the handler gets and the Content-Length header value.
	var x *exchange
	var rec *recorder
	run := func(ctx context.Context) (durable.Outcome, error) {
		x = &exchange{}
		rec = &x.rec
		rec.init(w, c)
		next.ServeHTTP(rec, x.withBody(r, ctx, body))
		out, reason := rec.outcome(r.Context().Err() != nil)
		if reason != "" {
			return durable.Outcome{}, &notStored{reason}
		}
		return out, nil
	}
	var res durable.DoResult
	var err error
	if c.transactional {
		res, err = durable.DoTx(r.Context(), c.store, req, c.do, func(ctx context.Context, tx durable.Tx) (durable.Outcome, error) {
			return run(WithTx(ctx, tx))
		})
	} else {
		res, err = c.store.Do(r.Context(), req, c.do, run)
	}
	switch {
	case rec != nil:
		// The handler ran. Its response is still buffered: it goes to the
		// client only if it was stored, or deliberately not stored.
		var ns *notStored
		if err != nil {
			ns = asNotStored(err)
		}
		switch {
		case err == nil:
			x.finish()
			c.count(r, "executed")
		case ns != nil && rec.tooLarge:
			// Transactional mode: the response could not be stored, so the
			// transaction was rolled back; the response must not be sent.
			rec.discard()
			c.log.Warn("idempotency: response larger than MaxBody in transactional mode; rolled back and answered 500", "max_body", c.maxBody)
			c.reject(r, w, probTooLargeTx, "")
		case ns != nil:
			x.finish()
			c.count(r, "executed")
			if rec.overflow {
				c.log.Warn("idempotency: response not stored, a retry will run the handler again", "reason", ns.reason, "max_body", c.maxBody)
			} else {
				c.log.Debug("idempotency: response not stored", "reason", ns.reason)
			}
		default:
			// Storing failed (Do retried within StoreTimeout). The client
			// must not see a response that a retry would not get replayed:
			// answer 503 instead. The claim is kept until its TTL ends, so
			// a retry meanwhile gets 409, not a second handler run.
			rec.discard()
			if errors.Is(err, durable.ErrFenced) {
				c.log.Warn("idempotency: the claim was lost before the response was stored; answered 503, a retry may run the handler again", "err", err)
			} else {
				c.log.Warn("idempotency: storing the response failed; answered 503 and kept the claim until it expires, after which a retry runs the handler again", "err", err, "claim_ttl", c.ttl)
			}
			c.reject(r, w, probNotStored, c.retryAfter)
		}
	case err == nil:
		c.count(r, "replayed")
		c.replay(w, res.Outcome)
	case errors.Is(err, durable.ErrInFlight):
		c.reject(r, w, probInFlight, c.retryAfter)
	case errors.Is(err, durable.ErrKeyConflict):
		c.reject(r, w, probMismatch, "")
	case errors.Is(err, durable.ErrOutcomeExpired):
		c.reject(r, w, probExpired, "")
	case r.Context().Err() != nil:
		// The client went away while we waited; nobody reads a response.
	case errors.Is(err, durable.ErrInvalidArgument):
		c.log.Error("idempotency: the store rejected the claim; check the Scope function", "err", err)
		c.reject(r, w, probInternal, "")
	case errors.Is(err, durable.ErrCorrupt):
		// The key's stored record cannot be read: replaying it or running
		// the handler again could both be wrong, so fail closed even with
		// FailOpen until an operator removes it (durable delete key).
		c.log.Error("idempotency: the stored record of this key is corrupt; inspect and delete it with the durable CLI", "err", err)
		c.reject(r, w, probCorrupt, "")
	default:
		if c.failOpen {
			c.log.Warn("idempotency: store unavailable, running the handler unprotected", "err", err)
			c.count(r, "fail_open")
			next.ServeHTTP(w, (&exchange{}).withBody(r, r.Context(), body))
			return
		}
		c.log.Warn("idempotency: store unavailable", "err", err)
		c.reject(r, w, probUnavailable, c.retryAfter)
	}
}

// asNotStored returns the notStored error in err's chain, or nil.
func asNotStored(err error) *notStored {
	var ns *notStored
	if errors.As(err, &ns) {
		return ns
	}
	return nil
}

// exchange is the state of one handler run, allocated at once.
type exchange struct {
	rec  recorder
	body bodyReader
	cl   [1]string // the Content-Length value finish sets
}

// bodyReader is the request body the handler reads: the buffered body.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

// withBody returns a shallow copy of r with ctx that reads body from
// memory (the middleware has consumed the original).
func (x *exchange) withBody(r *http.Request, ctx context.Context, body []byte) *http.Request {
	r2 := r.WithContext(ctx)
	if len(body) == 0 {
		r2.Body, r2.ContentLength = http.NoBody, 0
	} else {
		x.body.Reset(body)
		r2.Body, r2.ContentLength = &x.body, int64(len(body))
	}
	return r2
}

// finish sends the buffered response (see recorder.finish).
func (x *exchange) finish() { x.rec.finish(&x.cl) }

// readBody reads the whole request body, up to the limit.
func (c *config) readBody(r *http.Request) ([]byte, *problem) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > c.maxReqBody {
		return nil, probTooLarge
	}
	if r.ContentLength > 0 {
		// The usual case: one allocation of the announced size, and one
		// byte more to find a body longer than announced.
		n := int(r.ContentLength)
		body := make([]byte, n+1)
		if _, err := io.ReadFull(r.Body, body[:n]); err != nil {
			return nil, probUnreadable
		}
		if m, _ := r.Body.Read(body[n:]); m > 0 {
			return nil, probUnreadable // longer than announced
		}
		return body[:n:n], nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, c.maxReqBody+1))
	switch {
	case err != nil:
		return nil, probUnreadable
	case int64(len(body)) > c.maxReqBody:
		return nil, probTooLarge
	}
	return body, nil
}

// replay writes a stored response.
func (c *config) replay(w http.ResponseWriter, o durable.Outcome) {
	if o.Code < 200 || o.Code > 999 {
		c.log.Error("idempotency: stored response has an invalid status")
		writeProblem(w, probInternal, "")
		return
	}
	h := w.Header()
	for k, vs := range o.Header {
		h[k] = vs
	}
	h[ReplayedHeader] = replayedTrue
	if bodyAllowed(o.Code) {
		h["Content-Length"] = []string{strconv.Itoa(len(o.Body))}
	}
	w.WriteHeader(o.Code)
	if len(o.Body) > 0 {
		w.Write(o.Body)
	}
}
