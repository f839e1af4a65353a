package idempotency_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
	"github.com/durable-go/durable/middleware/idempotency"
)

// txEnv is a middleware in transactional mode over the memory backend with
// exactmem's fake transactions, and a handler that books one ledger entry
// through the request's transaction.
type txEnv struct {
	t       *testing.T
	st      *exactmem.Storage
	clock   *contract.ManualClock
	store   *durable.Store
	h       http.Handler
	runs    atomic.Int64
	entries atomic.Int64 // committed effects
	// respond writes the handler's response (default 201 "booked").
	respond func(w http.ResponseWriter)
}

func newTxEnv(t *testing.T, opts idempotency.Options, storeOpts ...durable.Option) *txEnv {
	t.Helper()
	e := &txEnv{t: t, clock: contract.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))}
	e.st = exactmem.NewStorage(memory.Options{Clock: e.clock})
	s, err := durable.New(e.st.Backend(), storeOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	e.store = s
	mw, err := idempotency.New(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	e.h = mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.runs.Add(1)
		if opts.Transactional {
			tx, ok := idempotency.Tx[*exactmem.Tx](r.Context())
			if !ok {
				t.Error("the handler found no transaction in its request context")
				http.Error(w, "no tx", 500)
				return
			}
			if _, ok := idempotency.Tx[*strings.Reader](r.Context()); ok {
				t.Error("Tx of the wrong type reported true")
			}
			tx.Exec(func() { e.entries.Add(1) })
		}
		if e.respond != nil {
			e.respond(w)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("booked"))
	}))
	return e
}

func (e *txEnv) post(key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"amount":1}`))
	if key != "" {
		r.Header.Set("Idempotency-Key", `"`+key+`"`)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

func (e *txEnv) want(w *httptest.ResponseRecorder, status int, runs, entries int64) {
	e.t.Helper()
	if w.Code != status || e.runs.Load() != runs || e.entries.Load() != entries {
		e.t.Fatalf("status %d (body %q), %d runs, %d committed effects; want %d, %d, %d", w.Code, w.Body, e.runs.Load(), e.entries.Load(), status, runs, entries)
	}
}

func TestTransactionalNeedsATxCompleter(t *testing.T) {
	s, err := memory.Open(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = idempotency.New(s, idempotency.Options{Transactional: true})
	if durable.CodeOf(err) != contract.Unimplemented || !strings.Contains(err.Error(), "TxCompleter") {
		t.Fatalf("New(Transactional) on memory = %v; want Unimplemented naming contract.TxCompleter", err)
	}
	ex, err := durable.New(exactmem.NewStorage(memory.Options{}).Backend())
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	_, err = idempotency.New(ex, idempotency.Options{Transactional: true, FailOpen: true})
	if durable.CodeOf(err) != contract.InvalidArgument {
		t.Fatalf("New(Transactional, FailOpen) = %v; want InvalidArgument", err)
	}
}

func TestTransactional(t *testing.T) {
	t.Run("stores the response with the effect, then sends it", func(t *testing.T) {
		e := newTxEnv(t, idempotency.Options{Transactional: true})
		w := e.post("k1")
		e.want(w, 201, 1, 1)
		if w.Body.String() != "booked" || e.st.Commits.Load() != 1 {
			t.Fatalf("body %q, %d commits", w.Body, e.st.Commits.Load())
		}
		w = e.post("k1")
		e.want(w, 201, 1, 1)
		if w.Header().Get(idempotency.ReplayedHeader) != "true" || w.Body.String() != "booked" {
			t.Fatalf("retry: %v %q; want the replay", w.Header(), w.Body)
		}
	})
	t.Run("a response not stored rolls the effect back", func(t *testing.T) {
		e := newTxEnv(t, idempotency.Options{Transactional: true})
		e.respond = func(w http.ResponseWriter) { http.Error(w, "try later", http.StatusServiceUnavailable) }
		e.want(e.post("k1"), 503, 1, 0)
		if e.st.Rollbacks.Load() != 1 {
			t.Fatalf("%d rollbacks", e.st.Rollbacks.Load())
		}
		e.respond = nil
		e.want(e.post("k1"), 201, 2, 1)
	})
	t.Run("a lost commit reply that applied answers 503, then replays", func(t *testing.T) {
		e := newTxEnv(t, idempotency.Options{Transactional: true})
		e.st.CommitFault = func() (bool, error) {
			return true, &contract.Error{Code: contract.OutcomeUnknown, Msg: "injected"}
		}
		w := e.post("k1")
		e.want(w, 503, 1, 1)
		if w.Header().Get("Retry-After") == "" || strings.Contains(w.Body.String(), "booked") {
			t.Fatalf("503 without Retry-After, or with the handler's body: %v %q", w.Header(), w.Body)
		}
		e.st.CommitFault = nil
		w = e.post("k1")
		e.want(w, 201, 1, 1)
		if w.Header().Get(idempotency.ReplayedHeader) != "true" {
			t.Fatal("the retry was not a replay")
		}
	})
	t.Run("a lost commit reply that did not apply keeps the claim", func(t *testing.T) {
		e := newTxEnv(t, idempotency.Options{Transactional: true})
		e.st.CommitFault = func() (bool, error) {
			return false, &contract.Error{Code: contract.OutcomeUnknown, Msg: "injected"}
		}
		e.want(e.post("k1"), 503, 1, 0)
		e.st.CommitFault = nil
		e.want(e.post("k1"), 409, 1, 0) // never a second run while the claim may still commit
	})
	t.Run("a panic sends nothing and rolls back", func(t *testing.T) {
		e := newTxEnv(t, idempotency.Options{Transactional: true})
		e.respond = func(w http.ResponseWriter) {
			w.WriteHeader(201)
			w.Write([]byte("half"))
			panic("boom")
		}
		var w *httptest.ResponseRecorder
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the panic did not continue")
				}
			}()
			w = e.post("k1")
		}()
		if e.st.Rollbacks.Load() != 1 || e.entries.Load() != 0 {
			t.Fatalf("%d rollbacks, %d effects", e.st.Rollbacks.Load(), e.entries.Load())
		}
		e.respond = nil
		e.want(e.post("k1"), 201, 2, 1)
		_ = w
	})
	t.Run("a body larger than MaxBody is not sent", func(t *testing.T) {
		e := newTxEnv(t, idempotency.Options{Transactional: true, MaxBody: 8})
		e.respond = func(w http.ResponseWriter) {
			w.WriteHeader(201)
			if _, err := w.Write([]byte(strings.Repeat("x", 100))); err == nil {
				t.Error("Write of an oversize body in transactional mode did not fail")
			}
		}
		w := e.post("k1")
		e.want(w, 500, 1, 0)
		if strings.Contains(w.Body.String(), "xxx") || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("sent %v %q", w.Header(), w.Body)
		}
	})
	t.Run("unprotected requests get no transaction", func(t *testing.T) {
		st := exactmem.NewStorage(memory.Options{})
		s, err := durable.New(st.Backend())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		mw, err := idempotency.New(s, idempotency.Options{Transactional: true})
		if err != nil {
			t.Fatal(err)
		}
		var had atomic.Bool
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, ok := idempotency.TxFrom(r.Context())
			had.Store(ok)
		}))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
		if had.Load() {
			t.Fatal("a request without a key found a transaction")
		}
	})
}

func TestOutcomeExpiredIs410(t *testing.T) {
	e := newTxEnv(t, idempotency.Options{Retention: time.Hour}, durable.WithTombstoneRetention(48*time.Hour))
	e.want(e.post("k1"), 201, 1, 0)
	e.clock.Advance(2 * time.Hour)
	w := e.post("k1")
	e.want(w, http.StatusGone, 1, 0)
	if w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("Retry-After") != "" {
		t.Fatalf("410 headers %v", w.Header())
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != idempotency.OutcomeExpiredType || p.Status != 410 || !strings.Contains(p.Title, "expired") || !strings.Contains(p.Detail, "Do not retry") {
		t.Fatalf("problem %+v", p)
	}
	// Another request with the key is still a mismatch.
	r := httptest.NewRequest(http.MethodPost, "/other", strings.NewReader("x"))
	r.Header.Set("Idempotency-Key", `"k1"`)
	w2 := httptest.NewRecorder()
	e.h.ServeHTTP(w2, r)
	e.want(w2, 422, 1, 0)
	e.clock.Advance(48 * time.Hour)
	e.want(e.post("k1"), 201, 2, 0)
}

// lostFirstClaim loses the reply of the first ClaimKey, which applied.
type lostFirstClaim struct {
	*exactmem.Backend
	lost atomic.Bool
}

func (l *lostFirstClaim) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := l.Backend.ClaimKey(ctx, req)
	if err == nil && !l.lost.Swap(true) {
		return contract.Claim{}, &contract.Error{Code: contract.OutcomeUnknown, Msg: "injected: reply lost"}
	}
	return c, err
}

func TestLostClaimReplyIsRecovered(t *testing.T) {
	s, err := durable.New(&lostFirstClaim{Backend: exactmem.NewStorage(memory.Options{}).Backend()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mw, err := idempotency.New(s, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(201)
	}))
	r := httptest.NewRequest(http.MethodPost, "/pay", nil)
	r.Header.Set("Idempotency-Key", `"k1"`)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 201 || runs.Load() != 1 {
		t.Fatalf("status %d after %d runs; want the claim recovered (201, one run), not 409 or 503", w.Code, runs.Load())
	}
}
