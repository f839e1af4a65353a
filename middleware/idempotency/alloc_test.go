package idempotency_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/middleware/idempotency"
)

// TestFirstExecutionAllocations guards the cost of a first execution on
// the memory backend: the allocations the middleware adds to a bare
// handler (about 22 today, a third of them the memory store's own copy of
// the record; 45 before Do skipped its per-call timers on in-process
// backends). The bound is generous: it catches a timer, context or
// buffer per request coming back, not a single allocation.
func TestFirstExecutionAllocations(t *testing.T) {
	s, err := memory.Open(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	mw, err := idempotency.New(s, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bare := benchHandler()
	wrapped := mw(benchHandler())
	req := httptest.NewRequest(http.MethodPost, "/payments", nil)
	run := func(h http.Handler, key string) {
		req.Body = io.NopCloser(bytes.NewReader(benchRequest))
		req.ContentLength = int64(len(benchRequest))
		req.Header["Idempotency-Key"] = []string{key}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated || rec.Header().Get(idempotency.ReplayedHeader) != "" {
			t.Fatalf("status %d, headers %v: %s", rec.Code, rec.Header(), rec.Body)
		}
	}
	const n = 200
	keys := make([]string, 2*(n+1)) // AllocsPerRun runs f n+1 times
	for i := range keys {
		keys[i] = `"alloc-` + strconv.Itoa(i) + `"`
	}
	i := 0
	next := func() string { i++; return keys[i-1] }
	base := testing.AllocsPerRun(n, func() { run(bare, next()) })
	with := testing.AllocsPerRun(n, func() { run(wrapped, next()) })
	if extra := with - base; extra > 32 {
		t.Fatalf("a first execution allocates %.0f times more than the bare handler (%.0f vs %.0f), want at most 32", extra, with, base)
	}
	t.Logf("bare %.0f, with the middleware %.0f allocations per request", base, with)
}
