package idempotency

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/durable-go/durable"
)

// recorder captures a handler's response for storage.
//
// It buffers the status, the stored headers (as they were when the status
// was written, like net/http) and up to maxBody bytes of body, and sends
// nothing until the handler returns: the response is stored before the
// client sees it, so a client that has seen it always gets it replayed.
// A Flush, or a body larger than maxBody, switches it to streaming: what is
// buffered is sent and later writes go straight to the client, still
// captured while the whole body fits in maxBody.
type recorder struct {
	w     http.ResponseWriter
	cfg   *config
	code  int                 // the final status; 0 until written
	saved map[string][]string // the stored headers when the status was written
	buf   []byte              // the captured body
	// overflow: the body exceeded maxBody; it cannot be stored.
	overflow bool
	// streaming: the status and buffered body have been sent.
	streaming bool
	hijacked  bool
}

func newRecorder(w http.ResponseWriter, cfg *config) *recorder {
	return &recorder{w: w, cfg: cfg}
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
	rec.saved = make(map[string][]string, len(rec.cfg.storeHeaders))
	h := rec.w.Header()
	for _, k := range rec.cfg.storeHeaders {
		if vs, ok := h[k]; ok {
			rec.saved[k] = append([]string(nil), vs...)
		}
	}
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.hijacked {
		return 0, http.ErrHijacked
	}
	if rec.code == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if !rec.overflow {
		if len(rec.buf)+len(p) <= rec.cfg.maxBody {
			rec.buf = append(rec.buf, p...)
			if !rec.streaming {
				return len(p), nil
			}
		} else {
			rec.overflow = true
			if !rec.streaming {
				if err := rec.stream(); err != nil {
					return 0, err
				}
			}
			rec.buf = nil
		}
	}
	return rec.w.Write(p)
}

// stream sends the status, the headers and the buffered body, and switches
// to streaming.
func (rec *recorder) stream() error {
	rec.streaming = true
	rec.restoreHeaders()
	rec.w.WriteHeader(rec.code)
	if len(rec.buf) > 0 {
		_, err := rec.w.Write(rec.buf)
		return err
	}
	return nil
}

// restoreHeaders makes the stored headers of the response what they were
// when the status was written, so the client sees what a replay sends.
func (rec *recorder) restoreHeaders() {
	h := rec.w.Header()
	for _, k := range rec.cfg.storeHeaders {
		if vs, ok := rec.saved[k]; ok {
			h[k] = vs
		} else {
			delete(h, k)
		}
	}
}

// FlushError implements the interface http.ResponseController looks for.
func (rec *recorder) FlushError() error {
	if rec.hijacked {
		return http.ErrHijacked
	}
	if rec.code == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if !rec.streaming {
		if err := rec.stream(); err != nil {
			return err
		}
	}
	return http.NewResponseController(rec.w).Flush()
}

// Flush implements http.Flusher.
func (rec *recorder) Flush() { _ = rec.FlushError() }

// Hijack implements http.Hijacker. A hijacked response is not stored.
func (rec *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
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
	case rec.overflow:
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

// finish sends what is still buffered once the handler has returned.
func (rec *recorder) finish() {
	if rec.hijacked || rec.streaming || rec.code == 0 {
		return // nothing written: net/http sends an empty 200, as without us
	}
	rec.restoreHeaders()
	h := rec.w.Header()
	if bodyAllowed(rec.code) && h.Get("Content-Length") == "" && h.Get("Transfer-Encoding") == "" {
		h.Set("Content-Length", strconv.Itoa(len(rec.buf)))
	}
	rec.w.WriteHeader(rec.code)
	if len(rec.buf) > 0 {
		rec.w.Write(rec.buf)
	}
}

// bodyAllowed reports whether a response with the status may have a body.
func bodyAllowed(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}
