package idempotency

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/durable-go/durable"
)

// recorder captures a handler's response for storage.
//
// It buffers the status, the headers (the stored ones as they were when the
// status was written, like net/http) and up to maxBody bytes of body, and
// sends nothing until the store has answered: the response is stored before
// the client sees it, so a client that has seen it always gets it replayed,
// and a response that could not be stored can be replaced by an error
// (discard). A Flush is deferred until then too. Only a body larger than
// maxBody, which is never stored, switches it to streaming: what is
// buffered is sent and later writes and flushes go straight to the client.
type recorder struct {
	w     http.ResponseWriter
	cfg   *config
	orig  http.Header         // the response headers before the handler ran
	code  int                 // the final status; 0 until written
	saved map[string][]string // the stored headers when the status was written
	buf   []byte              // the captured body
	// vals holds the values of the saved headers when they are few (the
	// usual Content-Type and Location), saving an allocation.
	vals [4]string
	// overflow: the body exceeded maxBody; it cannot be stored, and the
	// status and buffered body have been sent.
	overflow bool
	hijacked bool
	// tooLarge: in transactional mode, the body exceeded maxBody; it is
	// dropped, never sent (see Options.Transactional).
	tooLarge bool
}

// errTooLargeForTx is what Write returns, in transactional mode, once the
// body has outgrown MaxBody.
var errTooLargeForTx = errors.New("idempotency: response body larger than MaxBody in transactional mode: dropped, and the transaction will be rolled back")

// init sets up rec to record a response to w.
func (rec *recorder) init(w http.ResponseWriter, cfg *config) {
	rec.w, rec.cfg = w, cfg
	if h := w.Header(); len(h) > 0 {
		rec.orig = h.Clone() // e.g. set by an outer middleware
	}
}

func (rec *recorder) Header() http.Header { return rec.w.Header() }

// Unwrap lets http.ResponseController reach the underlying writer for
// deadlines and full duplex.
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.w }

func (rec *recorder) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http does
	}
	if rec.code != 0 || rec.hijacked {
		return
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		rec.w.WriteHeader(code) // informational: sent at once, not stored
		return
	}
	rec.code = code
	// Copy the stored headers present: a map of their number and one
	// array for all their values (rec.vals if they fit), each header's
	// slice capped so that an append to one cannot write into the next.
	h := rec.w.Header()
	var buf [8]string
	keys := rec.storedIn(h, buf[:0])
	nv := 0
	for _, k := range keys {
		nv += len(h[k])
	}
	rec.saved = make(map[string][]string, len(keys))
	vals := rec.vals[:0]
	if nv > len(rec.vals) {
		vals = make([]string, 0, nv)
	}
	for _, k := range keys {
		vs := h[k]
		if len(vs) == 0 { // as append([]string(nil), vs...) gives
			rec.saved[k] = nil
			continue
		}
		start := len(vals)
		vals = append(vals, vs...)
		rec.saved[k] = vals[start:len(vals):len(vals)]
	}
}

// storedIn appends to keys the stored headers present in h. It walks
// whichever is shorter, h or the list of stored headers: a response
// usually has a few headers, and looking up every stored one costs more.
func (rec *recorder) storedIn(h http.Header, keys []string) []string {
	if len(h) < len(rec.cfg.storeHeaders) {
		for k := range h {
			if rec.cfg.storeSet[k] {
				keys = append(keys, k)
			}
		}
		return keys
	}
	for _, k := range rec.cfg.storeHeaders {
		if _, ok := h[k]; ok {
			keys = append(keys, k)
		}
	}
	return keys
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.hijacked {
		return 0, http.ErrHijacked
	}
	if rec.code == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if rec.overflow {
		return rec.w.Write(p)
	}
	if rec.tooLarge {
		return 0, errTooLargeForTx
	}
	if len(rec.buf)+len(p) <= rec.cfg.maxBody {
		rec.buf = append(rec.buf, p...)
		return len(p), nil
	}
	if rec.cfg.transactional {
		// In transactional mode nothing may reach the client that is not
		// committed: the response is dropped, the transaction rolled back.
		rec.tooLarge, rec.buf = true, nil
		return 0, errTooLargeForTx
	}
	// Too large to store: send what is buffered and stream the rest.
	rec.overflow = true
	rec.restoreHeaders()
	rec.w.WriteHeader(rec.code)
	buf := rec.buf
	rec.buf = nil
	if len(buf) > 0 {
		if _, err := rec.w.Write(buf); err != nil {
			return 0, err
		}
	}
	return rec.w.Write(p)
}

// restoreHeaders makes the stored headers of the response what they were
// when the status was written, so the client sees what a replay sends.
func (rec *recorder) restoreHeaders() {
	h := rec.w.Header()
	var buf [8]string
	for _, k := range rec.storedIn(h, buf[:0]) {
		if _, ok := rec.saved[k]; !ok {
			delete(h, k)
		}
	}
	for k, vs := range rec.saved {
		h[k] = vs
	}
}

// FlushError implements the interface http.ResponseController looks for.
// While the response may still be stored, the flush is deferred: nothing
// reaches the client before the store has answered. Once the body has
// outgrown maxBody (and is streamed, not stored) it flushes.
func (rec *recorder) FlushError() error {
	if rec.hijacked {
		return http.ErrHijacked
	}
	if rec.code == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if !rec.overflow {
		return nil
	}
	return http.NewResponseController(rec.w).Flush()
}

// Flush implements http.Flusher.
func (rec *recorder) Flush() { _ = rec.FlushError() }

// Hijack implements http.Hijacker. A hijacked response is not stored.
func (rec *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if rec.cfg.transactional {
		// Whatever the handler sent on the connection could not be
		// rolled back with its transaction.
		return nil, nil, http.ErrNotSupported
	}
	conn, rw, err := http.NewResponseController(rec.w).Hijack()
	if err == nil {
		rec.hijacked = true
	}
	return conn, rw, err
}

// outcome returns the response to store, or the reason it must not be
// stored. clientGone says the request's context ended before the handler
// returned.
func (rec *recorder) outcome(clientGone bool) (durable.Outcome, string) {
	switch {
	case rec.hijacked:
		return durable.Outcome{}, "the connection was hijacked"
	case rec.overflow, rec.tooLarge:
		return durable.Outcome{}, "the response body is larger than MaxBody"
	case clientGone && (rec.code == 0 || rec.code >= 400):
		// The handler gave up, or wrote an error, because the client left.
		return durable.Outcome{}, "the client went away"
	}
	if rec.code == 0 {
		rec.WriteHeader(http.StatusOK) // what net/http sends for an empty response
	}
	if !rec.cfg.storeStatus(rec.code) {
		return durable.Outcome{}, "the status is not stored"
	}
	return durable.Outcome{Code: rec.code, Header: rec.saved, Body: rec.buf}, ""
}

// finish sends what is still buffered once the handler has returned and the
// store has answered. cl is the storage for a Content-Length value.
func (rec *recorder) finish(cl *[1]string) {
	if rec.hijacked || rec.overflow || rec.code == 0 {
		return // nothing written: net/http sends an empty 200, as without us
	}
	rec.restoreHeaders()
	h := rec.w.Header()
	if bodyAllowed(rec.code) && first(h["Content-Length"]) == "" && first(h["Transfer-Encoding"]) == "" {
		cl[0] = strconv.Itoa(len(rec.buf))
		h["Content-Length"] = cl[:]
	}
	rec.w.WriteHeader(rec.code)
	if len(rec.buf) > 0 {
		rec.w.Write(rec.buf)
	}
}

// first returns the first value of a header, or "", like Header.Get for a
// canonical key.
func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// discard drops the buffered response, which the client must not see, and
// puts the response headers back as they were before the handler ran, so
// that another response can be written in its place. Only a response that
// has not been sent (no overflow, no hijack) can be discarded.
func (rec *recorder) discard() {
	h := rec.w.Header()
	clear(h)
	for k, vs := range rec.orig {
		h[k] = vs
	}
	rec.code, rec.saved, rec.buf = 0, nil, nil
}

// bodyAllowed reports whether a response with the status may have a body.
func bodyAllowed(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}
