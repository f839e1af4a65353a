package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Defaults of [Transport].
const (
	DefaultHeader            = "Idempotency-Key"
	DefaultMaxAttempts       = 5
	DefaultBudget            = 30 * time.Second
	DefaultAttemptTimeout    = 10 * time.Second
	DefaultMinBackoff        = 100 * time.Millisecond
	DefaultMaxBackoff        = 5 * time.Second
	DefaultMaxRetryAfter     = 30 * time.Second
	DefaultMaxResponseBuffer = 1 << 20 // bytes
)

// ReplayedHeader marks a replayed response ("Idempotent-Replayed: true").
const ReplayedHeader = "Idempotent-Replayed"

// InFlightType is the problem type (RFC 9457) of the 409 Conflict that
// durable's middleware answers while a key's first request is still being
// processed; only a 409 of this type is retried. It equals
// idempotency.InFlightType.
const InFlightType = "https://github.com/durable-go/durable/problems/idempotency-key-in-flight"

// DefaultMethods are the methods managed by default.
var DefaultMethods = []string{http.MethodPost, http.MethodPatch}

// ErrBodyNotRewindable is returned, before anything is sent, for a managed
// request whose body cannot be sent again (GetBody is nil) when
// Transport.BufferBody does not allow buffering it.
var ErrBodyNotRewindable = errors.New("idempotency client: the request body cannot be rewound for a retry (GetBody is nil); use a bytes or strings reader, set GetBody, or set Transport.BufferBody")

// ErrBudgetExhausted is in the chain of an [*Error] when the Transport
// stopped because Budget ran out.
var ErrBudgetExhausted = errors.New("idempotency client: time budget exhausted")

// Transport is an http.RoundTripper that sends each managed request with an
// idempotency key and retries it with the same key; see the package
// documentation. The zero value is usable; every zero field means its
// default. It is safe for concurrent use; do not change its fields once it
// is in use.
//
// A key the Transport generates lives on its own copy of the request, not
// on the caller's. When an http.Client follows a 307 or 308 redirect it
// sends the caller's request again, so the redirected request gets a new
// key: set the key on the request yourself (or set Key) when the server
// may redirect an unsafe request.
type Transport struct {
	// Base sends each attempt (default http.DefaultTransport).
	Base http.RoundTripper
	// Header is the key's header (default "Idempotency-Key").
	Header string
	// Key returns the key for a managed request that has none (default: 128
	// random bits in hex). It is called once per request; the key must be
	// 1 to 255 printable ASCII characters, and is sent as an RFC 8941
	// string.
	Key func(*http.Request) string
	// Methods are the methods managed (nil means POST and PATCH). A request
	// of another method that carries the key header is managed too.
	Methods []string
	// MaxAttempts bounds the requests sent for one request, the first
	// included (default 5).
	MaxAttempts int
	// Budget bounds the time from the call to the final answer, waits and
	// attempts included (default 30 s); the request's context bounds it
	// too.
	Budget time.Duration
	// AttemptTimeout bounds each attempt, until its response body is read
	// (default 10 s). An attempt cut by it is retried.
	AttemptTimeout time.Duration
	// MinBackoff and MaxBackoff bound the exponential backoff between
	// attempts (defaults 100 ms and 5 s).
	MinBackoff, MaxBackoff time.Duration
	// MaxRetryAfter caps the wait a Retry-After header asks for (default
	// 30 s).
	MaxRetryAfter time.Duration
	// BufferBody, if positive, lets a request body that cannot be rewound
	// (GetBody nil) be buffered in memory, up to this many bytes, so that
	// it can be sent again. By default (0) such a request is refused with
	// ErrBodyNotRewindable.
	BufferBody int64
	// MaxResponseBuffer is how much of a final response's body is read
	// before the response is returned, so that a cut in the middle of it is
	// retried (default 1 MiB). Negative: bodies are not read ahead.
	MaxResponseBuffer int64
	// Retryable, if set, replaces the rule that decides which errors of
	// Base are retried (see the package documentation).
	Retryable func(error) bool
}

// Result is what the Transport reports about a response (see [ResultOf]).
type Result struct {
	// Key is the idempotency key sent (unquoted).
	Key string
	// Attempts is how many requests were sent, the final one included.
	Attempts int
	// Replayed reports whether the final answer was a replay: it carried
	// "Idempotent-Replayed: true".
	Replayed bool
}

type resultKey struct{}

// ResultOf returns what the Transport recorded about a response it
// returned (see "Results" in the package documentation), and false for a
// response it did not manage.
func ResultOf(resp *http.Response) (Result, bool) {
	if resp == nil || resp.Request == nil {
		return Result{}, false
	}
	r, ok := resp.Request.Context().Value(resultKey{}).(*Result)
	if !ok {
		return Result{}, false
	}
	return *r, true
}

// Error is the error of a managed request that got no answer to return: a
// connection failure or timeout of its last attempt, the Budget, or the
// request's context. Its message never contains the key.
type Error struct {
	// Key is the key the request was sent with; retry the operation with
	// it to get its outcome.
	Key string
	// Attempts is how many requests were sent.
	Attempts int
	// Err is the last attempt's error (with ErrBudgetExhausted when the
	// budget ran out).
	Err error
}

func (e *Error) Error() string {
	return "idempotency client: no answer after " + strconv.Itoa(e.Attempts) + " attempt(s): " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// budgetError joins ErrBudgetExhausted with the last error.
type budgetError struct{ last error }

func (e *budgetError) Error() string {
	if e.last == nil {
		return ErrBudgetExhausted.Error()
	}
	return ErrBudgetExhausted.Error() + "; last: " + e.last.Error()
}

func (e *budgetError) Unwrap() []error {
	if e.last == nil {
		return []error{ErrBudgetExhausted}
	}
	return []error{ErrBudgetExhausted, e.last}
}

var errAttemptTimeout = errors.New("idempotency client: attempt timed out")

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

func (t *Transport) header() string {
	if t.Header == "" {
		return DefaultHeader
	}
	return http.CanonicalHeaderKey(t.Header)
}

func (t *Transport) managed(r *http.Request, header string) bool {
	if len(r.Header[header]) > 0 {
		return true
	}
	methods := t.Methods
	if methods == nil {
		methods = DefaultMethods
	}
	m := r.Method
	if m == "" {
		m = http.MethodGet
	}
	for _, x := range methods {
		if x == m {
			return true
		}
	}
	return false
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	header := t.header()
	if !t.managed(req, header) {
		return t.base().RoundTrip(req)
	}
	res := &Result{}
	// The key: the caller's, or a new one.
	var keyValue string
	if vs := req.Header[header]; len(vs) > 0 {
		keyValue = vs[0]
		res.Key = unquote(keyValue)
	} else {
		if t.Key != nil {
			res.Key = t.Key(req)
		} else {
			res.Key = randomKey()
		}
		var ok bool
		if keyValue, ok = quote(res.Key); !ok {
			closeBody(req)
			return nil, errors.New("idempotency client: Transport.Key returned a key that is not 1 to 255 printable ASCII characters")
		}
	}
	// The body: rewindable, buffered, or refused.
	getBody := req.GetBody
	if req.Body != nil && req.Body != http.NoBody && getBody == nil {
		if t.BufferBody <= 0 {
			closeBody(req)
			return nil, &Error{Key: res.Key, Err: ErrBodyNotRewindable}
		}
		b, err := io.ReadAll(io.LimitReader(req.Body, t.BufferBody+1))
		closeBody(req)
		if err != nil {
			return nil, &Error{Key: res.Key, Err: err}
		}
		if int64(len(b)) > t.BufferBody {
			return nil, &Error{Key: res.Key, Err: ErrBodyNotRewindable}
		}
		getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		req = req.Clone(req.Context())
		req.Body, _ = getBody()
		req.GetBody, req.ContentLength = getBody, int64(len(b))
	}

	parent := req.Context()
	budget := orDefault(t.Budget, DefaultBudget)
	deadline := time.Now().Add(budget)
	maxAttempts := orDefault(t.MaxAttempts, DefaultMaxAttempts)
	ctx := context.WithValue(parent, resultKey{}, res)
	var lastErr error
	for {
		if time.Until(deadline) <= 0 {
			if res.Attempts == 0 {
				closeBody(req)
			}
			return nil, &Error{Key: res.Key, Attempts: res.Attempts, Err: &budgetError{lastErr}}
		}
		res.Attempts++
		attempt := req.Clone(ctx)
		if attempt.Header == nil {
			attempt.Header = http.Header{}
		}
		attempt.Header[header] = []string{keyValue}
		if res.Attempts > 1 && getBody != nil {
			b, err := getBody()
			if err != nil {
				res.Attempts--
				return nil, &Error{Key: res.Key, Attempts: res.Attempts, Err: err}
			}
			attempt.Body = b
		}
		resp, wait, err := t.try(attempt, deadline)
		switch {
		case err == nil && wait < 0:
			res.Replayed = resp.Header.Get(ReplayedHeader) == "true"
			return resp, nil
		case parent.Err() != nil:
			if resp != nil {
				discard(resp)
			}
			return nil, &Error{Key: res.Key, Attempts: res.Attempts, Err: context.Cause(parent)}
		case err != nil && wait < 0:
			return nil, &Error{Key: res.Key, Attempts: res.Attempts, Err: err}
		}
		if err != nil {
			lastErr = err
		}
		// Retry, if attempts and time remain.
		if wait == 0 {
			wait = t.backoff(res.Attempts)
		}
		if res.Attempts >= maxAttempts || time.Until(deadline) < wait {
			switch {
			case resp != nil:
				// Return the last answer as it is (its body read ahead).
				res.Replayed = resp.Header.Get(ReplayedHeader) == "true"
				return resp, nil
			case res.Attempts >= maxAttempts:
				return nil, &Error{Key: res.Key, Attempts: res.Attempts, Err: lastErr}
			default:
				return nil, &Error{Key: res.Key, Attempts: res.Attempts, Err: &budgetError{lastErr}}
			}
		}
		if resp != nil {
			discard(resp)
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-parent.Done():
			timer.Stop()
			return nil, &Error{Key: res.Key, Attempts: res.Attempts, Err: context.Cause(parent)}
		}
	}
}

// try sends one attempt. It returns the response with a negative wait if
// it is final; a response or an error with wait >= 0 if it is to be
// retried after wait (0: the backoff); an error with wait < 0 if not.
func (t *Transport) try(req *http.Request, deadline time.Time) (*http.Response, time.Duration, error) {
	limit := time.Until(deadline)
	if at := orDefault(t.AttemptTimeout, DefaultAttemptTimeout); at < limit {
		limit = at
	}
	if limit <= 0 {
		closeBody(req)
		return nil, 0, &budgetError{}
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(limit, func() { cancel(errAttemptTimeout) })
	stop := func() { timer.Stop(); cancel(context.Canceled) }
	req = req.WithContext(ctx)
	resp, err := t.base().RoundTrip(req)
	if err != nil {
		stop()
		if context.Cause(ctx) == errAttemptTimeout {
			err = &attemptTimeout{err}
		}
		if t.retryable(err) {
			return nil, 0, err
		}
		return nil, -1, err
	}
	resp.Request = req
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection: its body is the connection itself.
		timer.Stop()
		return resp, -1, nil
	}
	// Read the body ahead: of a final answer, so that a cut in it is
	// retried; of one that may be retried, to look at it and to reuse the
	// connection.
	n := orDefault(t.MaxResponseBuffer, DefaultMaxResponseBuffer)
	if c := resp.StatusCode; c == http.StatusConflict || c == http.StatusTooManyRequests || c >= 500 {
		n = max(n, 16<<10)
	}
	if n > 0 {
		if err := readAhead(resp, n); err != nil {
			stop()
			if context.Cause(ctx) == errAttemptTimeout {
				err = &attemptTimeout{err}
			}
			if t.retryable(err) {
				return nil, 0, err
			}
			return nil, -1, err
		}
	}
	if wait, again := t.retryStatus(resp); again {
		stop()
		return resp, wait, nil
	}
	if rb, ok := resp.Body.(*readBody); ok && rb.rest == nil {
		stop() // the whole body is read
	} else {
		// The body is longer than the buffer: it streams from here, no
		// longer bound by the attempt's timeout; closing it ends the
		// attempt.
		timer.Stop()
		resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: stop}
	}
	return resp, -1, nil
}

// attemptTimeout is an attempt's error when AttemptTimeout (or the budget)
// cut it.
type attemptTimeout struct{ err error }

func (e *attemptTimeout) Error() string { return errAttemptTimeout.Error() + ": " + e.err.Error() }
func (e *attemptTimeout) Unwrap() error { return e.err }
func (e *attemptTimeout) Timeout() bool { return true }

// retryable reports whether an error of Base is a connection failure worth
// another attempt.
func (t *Transport) retryable(err error) bool {
	if t.Retryable != nil {
		return t.Retryable(err)
	}
	var at *attemptTimeout
	if errors.As(err, &at) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the caller's context
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) {
		// Dial, read and write failures; not certificate errors, which are
		// not net.OpErrors.
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	// net/http's Transport reports a server that closed the connection
	// before answering with errors of its own, not exported.
	msg := err.Error()
	return strings.Contains(msg, "server closed") || strings.Contains(msg, "connection broken") ||
		strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe")
}

// retryStatus reports whether a response is to be retried, and after how
// long (0: the backoff).
func (t *Transport) retryStatus(resp *http.Response) (time.Duration, bool) {
	switch c := resp.StatusCode; {
	case c == http.StatusConflict:
		if !inFlight(resp) {
			return 0, false
		}
	case c == http.StatusTooManyRequests, c == http.StatusServiceUnavailable:
	case c == http.StatusNotImplemented, c == http.StatusHTTPVersionNotSupported:
		return 0, false
	case c >= 500 && c <= 599:
	default:
		return 0, false
	}
	d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now())
	if !ok {
		return 0, true
	}
	return min(d, orDefault(t.MaxRetryAfter, DefaultMaxRetryAfter)), true
}

// inFlight reports whether a 409 is the in-flight problem, from its body
// read ahead.
func inFlight(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "application/problem+json" {
		return false
	}
	rb, ok := resp.Body.(*readBody)
	if !ok {
		return false
	}
	var p struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(rb.Bytes(), &p) == nil && p.Type == InFlightType
}

// retryAfter parses a Retry-After value: delay-seconds or an HTTP-date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

// backoff is the wait before attempt n+1: exponential from MinBackoff,
// capped at MaxBackoff, drawn from its upper half.
func (t *Transport) backoff(n int) time.Duration {
	lo := orDefault(t.MinBackoff, DefaultMinBackoff)
	hi := orDefault(t.MaxBackoff, DefaultMaxBackoff)
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	if d <= 1 {
		return max(d, 1)
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// readBody is a response body read ahead: buf, then rest (nil when the
// whole body is in buf).
type readBody struct {
	buf  bytes.Reader
	raw  *bytes.Buffer
	rest io.ReadCloser
	orig io.Closer
}

func (b *readBody) Read(p []byte) (int, error) {
	if b.buf.Len() > 0 || b.rest == nil {
		return b.buf.Read(p)
	}
	return b.rest.Read(p)
}

func (b *readBody) Close() error { return b.orig.Close() }

// readAhead reads up to limit bytes of resp's body into memory and
// replaces the body with a reader of them followed by the rest. It is a
// no-op on a body already read ahead.
func readAhead(resp *http.Response, limit int64) error {
	if _, ok := resp.Body.(*readBody); ok {
		return nil
	}
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		resp.Body.Close()
		return err
	}
	rb := &readBody{raw: &buf, orig: resp.Body}
	rb.buf.Reset(buf.Bytes())
	if n > limit {
		rb.rest = resp.Body
	} else {
		resp.Body.Close()
		rb.orig = io.NopCloser(nil)
	}
	resp.Body = rb
	return nil
}

// bytes returns what was read ahead (the problem check).
func (b *readBody) Bytes() []byte { return b.raw.Bytes() }

// cancelBody ends the attempt's context when the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// discard drains a little of a response's body, so that its connection
// can be reused, and closes it.
func discard(resp *http.Response) {
	io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}

func randomKey() string {
	var b [16]byte
	crand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// quote returns key as an RFC 8941 string, and false if it is not 1 to 255
// printable ASCII characters.
func quote(key string) (string, bool) {
	if len(key) == 0 || len(key) > 255 {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < 0x20 || c > 0x7e {
			return "", false
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), true
}

// unquote returns the key in a header value: an RFC 8941 string's content,
// or the value as it is.
func unquote(v string) string {
	v = strings.TrimSpace(v)
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return v
	}
	var b strings.Builder
	for i := 1; i < len(v)-1; i++ {
		if v[i] == '\\' && i+1 < len(v)-1 {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}
