package idempotency_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/middleware/idempotency"
)

// The fault scenarios run the middleware in synctest bubbles, called
// directly with httptest recorders: time is simulated, so store timeouts,
// claim TTLs and retry pauses pass without real sleeping.

// flaky wraps the memory backend and injects store faults into key
// operations.
type flaky struct {
	contract.Backend
	claimHang     atomic.Bool  // ClaimKey blocks until its context ends
	completeFails atomic.Int64 // fail this many CompleteKey calls; < 0: every call
	completeHang  atomic.Bool  // CompleteKey blocks until its context ends
	completeCalls atomic.Int64
	claimCorrupt  atomic.Bool // ClaimKey fails as on an undecodable stored record
}

func (f *flaky) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	if f.claimHang.Load() {
		<-ctx.Done()
		return contract.Claim{}, ctx.Err()
	}
	if f.claimCorrupt.Load() {
		return contract.Claim{}, &contract.Error{Code: contract.Corrupt, Msg: "stored record cannot be decoded"}
	}
	return f.Backend.ClaimKey(ctx, req)
}

func (f *flaky) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	f.completeCalls.Add(1)
	if f.completeHang.Load() {
		<-ctx.Done()
		return contract.KeyRecord{}, ctx.Err()
	}
	if n := f.completeFails.Load(); n < 0 || n > 0 && f.completeFails.Add(-1) >= 0 {
		return contract.KeyRecord{}, &contract.Error{Code: contract.Unavailable, Msg: "injected outage"}
	}
	return f.Backend.CompleteKey(ctx, c)
}

func (f *flaky) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	return f.Backend.(contract.KeyWaiter).WaitKey(ctx, k)
}

// faultEnv is the middleware over a flaky memory store and a handler that
// creates payments.
type faultEnv struct {
	t     *testing.T
	store *durable.Store
	fault *flaky
	h     http.Handler
	runs  atomic.Int64
	// hook, if set, runs at the start of the handler with the run number.
	hook func(n int64, w http.ResponseWriter)
}

func newFaultEnv(t *testing.T, opts idempotency.Options) *faultEnv {
	t.Helper()
	e := &faultEnv{t: t, fault: &flaky{Backend: memory.NewStorage(memory.Options{}).Backend()}}
	var err error
	e.store, err = durable.New(e.fault)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	mw, err := idempotency.New(e.store, opts)
	if err != nil {
		t.Fatal(err)
	}
	inner := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := e.runs.Add(1)
		if e.hook != nil {
			e.hook(n, w)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/pay_1")
		w.Header().Set("X-Run", "1")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"pay_secret_handler_body"}`)
	}))
	// An outer middleware's header, set before the idempotency middleware
	// runs: it belongs on every response, errors included.
	e.h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "req-1")
		inner.ServeHTTP(w, r)
	})
	return e
}

// post serves POST /payments with the key and returns the recorded
// response.
func (e *faultEnv) post(key string) response {
	rr := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":500}`))
	req.Header.Set("Idempotency-Key", `"`+key+`"`)
	e.h.ServeHTTP(rr, req)
	res := rr.Result()
	body, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: body}
}

func (e *faultEnv) claim(key string) durable.KeyRecord {
	e.t.Helper()
	rec, err := e.store.GetKey(context.Background(), durable.KeyRef{Key: idempotency.StoreKey(key)})
	if err != nil {
		e.t.Fatalf("GetKey: %v", err)
	}
	return rec
}

// wantNotLeaked checks that a response does not carry anything of the
// handler's response.
func wantNotLeaked(t *testing.T, r response) {
	t.Helper()
	if bytes.Contains(r.body, []byte("pay_secret_handler_body")) {
		t.Fatalf("the client saw the handler's body: %q", r.body)
	}
	for _, k := range []string{"Location", "X-Run"} {
		if v := r.header.Get(k); v != "" {
			t.Fatalf("the client saw the handler's %s header %q", k, v)
		}
	}
	if v := r.header.Get("X-Request-Id"); v != "req-1" {
		t.Fatalf("the outer middleware's header was lost: %q", v)
	}
}

func TestStoreFailureAfterHandlerAnswers503AndKeepsClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t, idempotency.Options{StoreTimeout: 3 * time.Second})
		e.fault.completeFails.Store(-1)
		// The handler flushes: that must not send anything before the
		// response is stored either.
		e.hook = func(_ int64, w http.ResponseWriter) {
			w.Header().Set("Location", "/payments/pay_1")
			w.Write([]byte("pay_secret_handler_body, early part\n"))
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
		}
		start := time.Now()
		r := e.post("k1")
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("answered after %v, want within StoreTimeout (3s)", took)
		}
		wantProblem(t, r, http.StatusServiceUnavailable, "k1")
		wantNotLeaked(t, r)
		if n := e.fault.completeCalls.Load(); n < 3 {
			t.Fatalf("%d completion attempts, want retries within StoreTimeout", n)
		}
		if n := e.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		// The claim of the handler that ran is kept: a retry within its
		// TTL gets 409, not a second run.
		if rec := e.claim("k1"); rec.State != durable.KeyClaimed || rec.Outcome != nil {
			t.Fatalf("key record %+v, want the claim kept", rec)
		}
		e.hook = nil
		wantProblem(t, e.post("k1"), http.StatusConflict, "k1")
		if n := e.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})
}

func TestStoreFailuresWithinStoreTimeoutAreRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t, idempotency.Options{})
		// More failures than the former fixed four attempts; they span
		// 2.55 s of pauses, within the default StoreTimeout.
		e.fault.completeFails.Store(6)
		first := e.post("k1")
		wantFresh(t, first, http.StatusCreated)
		if !bytes.Contains(first.body, []byte("pay_secret_handler_body")) || first.header.Get("X-Run") != "1" {
			t.Fatalf("first response %q %v, want the handler's", first.body, first.header)
		}
		if rec := e.claim("k1"); rec.State != durable.KeyCompleted {
			t.Fatalf("key record %+v, want completed", rec)
		}
		wantReplay(t, e.post("k1"), first)
		if n := e.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})
}

func TestHungStoreAnswers503WithinStoreTimeout(t *testing.T) {
	t.Run("Claim", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFaultEnv(t, idempotency.Options{StoreTimeout: 2 * time.Second})
			e.fault.claimHang.Store(true)
			start := time.Now()
			r := e.post("k1")
			if took := time.Since(start); took != 2*time.Second {
				t.Fatalf("answered after %v, want StoreTimeout (2s)", took)
			}
			wantProblem(t, r, http.StatusServiceUnavailable, "k1")
			if n := e.runs.Load(); n != 0 {
				t.Fatalf("handler ran %d times, want 0", n)
			}
		})
	})
	t.Run("Completion", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFaultEnv(t, idempotency.Options{StoreTimeout: 2 * time.Second})
			e.fault.completeHang.Store(true)
			start := time.Now()
			r := e.post("k1")
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("answered after %v, want within StoreTimeout (2s)", took)
			}
			wantProblem(t, r, http.StatusServiceUnavailable, "k1")
			wantNotLeaked(t, r)
			if rec := e.claim("k1"); rec.State != durable.KeyClaimed {
				t.Fatalf("key record %+v, want the claim kept", rec)
			}
		})
	})
}

func TestClaimRenewedWhileStoringTheResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Second
		e := newFaultEnv(t, idempotency.Options{ClaimTTL: ttl})
		// Seven failures span 3.55 s of pauses: more than three TTLs.
		e.fault.completeFails.Store(7)
		done := make(chan response, 1)
		go func() { done <- e.post("k1") }()
		time.Sleep(3 * ttl)
		// Unrenewed, the claim would have expired two TTLs ago and this
		// request would take it over and run the handler again.
		wantProblem(t, e.post("k1"), http.StatusConflict, "k1")
		first := <-done
		wantFresh(t, first, http.StatusCreated)
		wantReplay(t, e.post("k1"), first)
		if n := e.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})
}

func TestFlushIsDeferredUntilStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t, idempotency.Options{})
		rr := httptest.NewRecorder()
		e.hook = func(_ int64, w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: one\n\n")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
			if rr.Flushed || rr.Body.Len() > 0 {
				t.Errorf("the flush sent %q before the response was stored", rr.Body)
			}
		}
		req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", `"k1"`)
		e.h.ServeHTTP(rr, req)
		// The flush wrote the status, 200, as net/http does.
		if rr.Code != http.StatusOK || !strings.HasPrefix(rr.Body.String(), "data: one\n\n") {
			t.Fatalf("response %d %q", rr.Code, rr.Body)
		}
		if rec := e.claim("k1"); rec.State != durable.KeyCompleted {
			t.Fatalf("key record %+v, want completed", rec)
		}
	})
}

// TestCorruptRecordFailsClosedEvenWithFailOpen: a key whose stored record
// cannot be decoded gets 500 problem+json, never a replay and never a run
// of the handler, even when the middleware fails open on outages.
func TestCorruptRecordFailsClosedEvenWithFailOpen(t *testing.T) {
	e := newFaultEnv(t, idempotency.Options{FailOpen: true})
	e.fault.claimCorrupt.Store(true)
	r := e.post("key-corrupt")
	if r.status != http.StatusInternalServerError || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("response %d %q, want 500 problem+json", r.status, r.header.Get("Content-Type"))
	}
	if e.runs.Load() != 0 {
		t.Fatalf("the handler ran %d times on a corrupt record", e.runs.Load())
	}
	if r.header.Get("Retry-After") != "" {
		t.Errorf("Retry-After %q on a corrupt record: retrying will not help", r.header.Get("Retry-After"))
	}
}
