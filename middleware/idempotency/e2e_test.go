package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/middleware/idempotency"
)

// storeFactory opens a fresh store for one scenario. advance moves the
// store clock forward; it is nil when the store runs on real time, and the
// scenarios that need time to pass then really wait.
type storeFactory func(t *testing.T) (store *durable.Store, advance func(time.Duration))

func TestMemory(t *testing.T) {
	runE2E(t, func(t *testing.T) (*durable.Store, func(time.Duration)) {
		clock := memory.NewManualClock(time.Now())
		s, err := memory.Open(memory.Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, clock.Advance
	})
}

// TestMemoryWithoutWaiter runs the scenarios on a backend without the
// KeyWaiter capability, so that waiting polls.
func TestMemoryWithoutWaiter(t *testing.T) {
	runE2E(t, func(t *testing.T) (*durable.Store, func(time.Duration)) {
		clock := memory.NewManualClock(time.Now())
		s, err := durable.New(struct{ contract.Backend }{memory.NewStorage(memory.Options{Clock: clock}).Backend()},
			durable.WithWaitPolling(time.Millisecond, 10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, clock.Advance
	})
}

// env is one scenario's server: the middleware over a payments handler.
type env struct {
	t       *testing.T
	store   *durable.Store
	advance func(time.Duration)
	srv     *httptest.Server
	client  *http.Client
	runs    atomic.Int64 // handler runs
	arrived atomic.Int64 // requests that reached the server
	// hook, if set, runs at the start of the handler with the run number;
	// it returns true if it wrote the response itself.
	hook func(n int64, w http.ResponseWriter, r *http.Request) bool
}

type envOption func(*env, *idempotency.Options)

// withStore replaces the scenario's store, e.g. by one over a wrapped
// backend.
func withStore(f func(*durable.Store) *durable.Store) envOption {
	return func(e *env, _ *idempotency.Options) { e.store = f(e.store) }
}

func newEnv(t *testing.T, factory storeFactory, opts idempotency.Options, more ...envOption) *env {
	t.Helper()
	e := &env{t: t}
	e.store, e.advance = factory(t)
	for _, o := range more {
		o(e, &opts)
	}
	mw, err := idempotency.New(e.store, opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/payments", e.payments)
	h := mw(mux)
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.arrived.Add(1)
		h.ServeHTTP(w, r)
	}))
	e.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic scenario logs
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	e.client = e.srv.Client()
	return e
}

// payments creates a payment and describes it in a body that is not valid
// UTF-8, so that byte-for-byte replay is visible.
func (e *env) payments(w http.ResponseWriter, r *http.Request) {
	n := e.runs.Add(1)
	if e.hook != nil && e.hook(n, w, r) {
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	if r.Method != http.MethodPost && r.Method != http.MethodPatch {
		fmt.Fprintf(w, "%s %d", r.Method, n)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/payments/pay_%d", n))
	w.Header().Set("X-Run", strconv.FormatInt(n, 10)) // not a stored header
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":"pay_%d","request_bytes":%d}`, n, len(body))
	w.Write([]byte{0, 0xff, 0xfe, '\n'})
}

type response struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// send sends a request with the given key header values (none if empty).
func (e *env) send(ctx context.Context, client *http.Client, method, path, body string, header http.Header) response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// post sends POST /payments with an Idempotency-Key (none if key is "").
func (e *env) post(key, body string, header ...string) response {
	e.t.Helper()
	h := http.Header{}
	if key != "" {
		h.Set("Idempotency-Key", `"`+key+`"`)
	}
	for i := 0; i+1 < len(header); i += 2 {
		h.Add(header[i], header[i+1])
	}
	r := e.send(context.Background(), e.client, http.MethodPost, "/payments", body, h)
	if r.err != nil {
		e.t.Fatalf("POST: %v", r.err)
	}
	return r
}

// waitReleased waits until the key has no record (its claim was released).
func (e *env) waitReleased(scope durable.Scope, key string) {
	e.t.Helper()
	ref := durable.KeyRef{Scope: scope, Key: idempotency.StoreKey(key)}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := e.store.GetKey(context.Background(), ref)
		if errors.Is(err, durable.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the claim was not released: GetKey = %v", err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (e *env) wantRuns(n int64) {
	e.t.Helper()
	if got := e.runs.Load(); got != n {
		e.t.Fatalf("handler ran %d times, want %d", got, n)
	}
}

func wantStatus(t *testing.T, r response, status int) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("request failed: %v", r.err)
	}
	if r.status != status {
		t.Fatalf("status %d, want %d; body %q", r.status, status, r.body)
	}
}

func wantFresh(t *testing.T, r response, status int) {
	t.Helper()
	wantStatus(t, r, status)
	if v := r.header.Get("Idempotent-Replayed"); v != "" {
		t.Fatalf("fresh response has Idempotent-Replayed: %q", v)
	}
}

// wantReplay checks that replay repeats first byte for byte: status, body
// and every stored header, with Idempotent-Replayed: true.
func wantReplay(t *testing.T, replay, first response) {
	t.Helper()
	wantStatus(t, replay, first.status)
	if v := replay.header.Get("Idempotent-Replayed"); v != "true" {
		t.Fatalf("replay has Idempotent-Replayed %q, want true", v)
	}
	if !bytes.Equal(replay.body, first.body) {
		t.Fatalf("replayed body %q, want %q", replay.body, first.body)
	}
	for _, k := range idempotency.DefaultStoreHeaders {
		if a, b := first.header.Values(k), replay.header.Values(k); strings.Join(a, "\n") != strings.Join(b, "\n") {
			t.Fatalf("replayed %s = %q, want %q", k, b, a)
		}
	}
	// A streamed first response has no Content-Length; a replay always has.
	if cl := replay.header.Get("Content-Length"); cl != strconv.Itoa(len(first.body)) {
		t.Fatalf("replayed Content-Length %q for %d bytes", cl, len(first.body))
	}
}

// wantProblem checks an RFC 9457 problem response that does not leak the
// key.
func wantProblem(t *testing.T, r response, status int, key string) {
	t.Helper()
	wantStatus(t, r, status)
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("problem Content-Type %q", ct)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	wantType, wantTitle := "about:blank", http.StatusText(status)
	if status == http.StatusConflict {
		wantType, wantTitle = idempotency.InFlightType, "Idempotency key in flight"
	}
	if p.Type != wantType || p.Title != wantTitle || p.Status != status || p.Detail == "" {
		t.Fatalf("problem %+v", p)
	}
	if key != "" && bytes.Contains(r.body, []byte(key)) {
		t.Fatalf("problem body %q contains the key", r.body)
	}
	if status == http.StatusConflict || status == http.StatusServiceUnavailable {
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
		}
	}
}

// blocker makes the first handler run block until released.
type blocker struct {
	entered chan int64    // receives the run number of every run
	release chan struct{} // closed to let the first run finish
	once    sync.Once
}

// newBlocker returns a blocker that is released at the latest when the
// test ends, so that a failing test does not hang closing its server.
func newBlocker(t *testing.T) *blocker {
	b := &blocker{entered: make(chan int64, 100), release: make(chan struct{})}
	t.Cleanup(b.unblock)
	return b
}

func (b *blocker) unblock() { b.once.Do(func() { close(b.release) }) }

func (b *blocker) hook(n int64, _ http.ResponseWriter, r *http.Request) bool {
	b.entered <- n
	if n == 1 {
		<-b.release
	}
	return false
}

func (b *blocker) waitEntered(t *testing.T) int64 {
	t.Helper()
	select {
	case n := <-b.entered:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not run")
		return 0
	}
}

// async sends a POST in the background.
func (e *env) async(key, body string) <-chan response {
	ch := make(chan response, 1)
	go func() {
		h := http.Header{"Idempotency-Key": {`"` + key + `"`}}
		ch <- e.send(context.Background(), e.client, http.MethodPost, "/payments", body, h)
	}()
	return ch
}

func receive(t *testing.T, ch <-chan response) response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no response")
		return response{}
	}
}

// unavailable is a backend whose key operations all fail as if the
// database were down.
type unavailable struct{ contract.Backend }

func errDown() error { return &contract.Error{Code: contract.Unavailable, Msg: "injected outage"} }

func (unavailable) ClaimKey(context.Context, contract.ClaimRequest) (contract.Claim, error) {
	return contract.Claim{}, errDown()
}

// watched signals every WaitKey call, so a test knows a request waits.
type watched struct {
	contract.Backend
	inner   *durable.Store
	waiting chan struct{}
}

func (w *watched) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	select {
	case w.waiting <- struct{}{}:
	default:
	}
	return w.inner.WaitKey(ctx, k)
}

func runE2E(t *testing.T, factory storeFactory) {
	t.Run("FirstRequestRunsOnceAndRetryReplaysByteForByte", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{})
		first := e.post("k1", `{"amount":500}`)
		wantFresh(t, first, http.StatusCreated)
		if first.header.Get("X-Run") != "1" || !bytes.HasPrefix(first.body, []byte(`{"id":"pay_1","request_bytes":14}`)) {
			t.Fatalf("first response %q %v", first.body, first.header)
		}
		for range 3 {
			replay := e.post("k1", `{"amount":500}`)
			wantReplay(t, replay, first)
			if replay.header.Get("X-Run") != "" {
				t.Fatal("an unstored header was replayed")
			}
		}
		e.wantRuns(1)
		// The bare (unquoted) form of the same key is the same key.
		h := http.Header{"Idempotency-Key": {"k1"}}
		wantReplay(t, e.send(context.Background(), e.client, "POST", "/payments", `{"amount":500}`, h), first)
		e.wantRuns(1)
	})

	t.Run("SameKeyOtherRequestGets422", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{})
		wantFresh(t, e.post("k1", `{"amount":500}`), http.StatusCreated)
		wantProblem(t, e.post("k1", `{"amount":501}`), http.StatusUnprocessableEntity, "k1")
		h := http.Header{"Idempotency-Key": {`"k1"`}}
		wantProblem(t, e.send(context.Background(), e.client, "PATCH", "/payments", `{"amount":500}`, h), http.StatusUnprocessableEntity, "k1")
		e.wantRuns(1)
	})

	t.Run("MissingKeyGets400WhenRequired", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{Required: true})
		wantProblem(t, e.post("", `{}`), http.StatusBadRequest, "")
		e.wantRuns(0)
	})

	t.Run("MissingKeyPassesThroughWhenOptional", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{})
		wantFresh(t, e.post("", `{}`), http.StatusCreated)
		wantFresh(t, e.post("", `{}`), http.StatusCreated)
		e.wantRuns(2)
	})

	t.Run("MalformedOrOverlongKeyGets400", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{})
		secret := "s3cr3t"
		for name, values := range map[string][]string{
			"Overlong":      {`"` + secret + strings.Repeat("k", 250) + `"`},
			"Unterminated":  {`"` + secret},
			"BadEscape":     {`"` + secret + `\n"`},
			"Empty":         {`""`},
			"TwoFieldLines": {`"` + secret + `"`, `"other"`},
			"BareWithSpace": {secret + " x"},
		} {
			r := e.send(context.Background(), e.client, "POST", "/payments", "{}", http.Header{"Idempotency-Key": values})
			t.Run(name, func(t *testing.T) { wantProblem(t, r, http.StatusBadRequest, secret) })
		}
		e.wantRuns(0)
		// The longest key is fine.
		wantFresh(t, e.post(strings.Repeat("k", 255), "{}"), http.StatusCreated)
	})

	t.Run("RequestWhileInFlightGets409WithRetryAfter", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{RetryAfter: 2 * time.Second})
		b := newBlocker(t)
		e.hook = b.hook
		first := e.async("k1", "{}")
		b.waitEntered(t)
		second := e.post("k1", "{}")
		wantProblem(t, second, http.StatusConflict, "k1")
		if ra := second.header.Get("Retry-After"); ra != "2" {
			t.Fatalf("Retry-After %q, want 2", ra)
		}
		b.unblock()
		r := receive(t, first)
		wantFresh(t, r, http.StatusCreated)
		wantReplay(t, e.post("k1", "{}"), r)
		e.wantRuns(1)
	})

	t.Run("WaitPolicyReplaysOnceFirstCompletes", func(t *testing.T) {
		t.Parallel()
		waiting := make(chan struct{}, 100)
		e := newEnv(t, factory, idempotency.Options{WaitInFlight: time.Minute}, withStore(func(s *durable.Store) *durable.Store {
			w, err := durable.New(&watched{Backend: rawBackend(t, s), inner: s, waiting: waiting})
			if err != nil {
				t.Fatal(err)
			}
			return w
		}))
		b := newBlocker(t)
		e.hook = b.hook
		first := e.async("k1", "{}")
		b.waitEntered(t)
		second := e.async("k1", "{}")
		select {
		case <-waiting:
		case r := <-second:
			t.Fatalf("the second request did not wait: %d %q", r.status, r.body)
		case <-time.After(10 * time.Second):
			t.Fatal("the second request did not wait")
		}
		b.unblock()
		r1 := receive(t, first)
		wantFresh(t, r1, http.StatusCreated)
		wantReplay(t, receive(t, second), r1)
		e.wantRuns(1)
	})

	t.Run("WaitPolicyGives409WhenStillInFlight", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{WaitInFlight: 50 * time.Millisecond})
		b := newBlocker(t)
		e.hook = b.hook
		first := e.async("k1", "{}")
		b.waitEntered(t)
		wantProblem(t, e.post("k1", "{}"), http.StatusConflict, "k1")
		b.unblock()
		wantFresh(t, receive(t, first), http.StatusCreated)
		e.wantRuns(1)
	})

	t.Run("FiftyConcurrentRequestsRunOnceAndAllGetTheResponse", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{WaitInFlight: time.Minute})
		release := make(chan struct{})
		var once sync.Once
		unblock := func() { once.Do(func() { close(release) }) }
		t.Cleanup(unblock)
		e.hook = func(n int64, w http.ResponseWriter, r *http.Request) bool {
			<-release
			return false
		}
		const n = 50
		var wg sync.WaitGroup
		responses := make([]response, n)
		for i := range responses {
			wg.Go(func() {
				h := http.Header{"Idempotency-Key": {`"k1"`}}
				responses[i] = e.send(context.Background(), e.client, "POST", "/payments", "{}", h)
			})
		}
		// Hold the handler until every request has reached the server.
		deadline := time.Now().Add(10 * time.Second)
		for e.arrived.Load() < n || e.runs.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d requests arrived, %d runs", e.arrived.Load(), e.runs.Load())
			}
			time.Sleep(time.Millisecond)
		}
		unblock()
		wg.Wait()
		e.wantRuns(1)
		var fresh []response
		for _, r := range responses {
			wantStatus(t, r, http.StatusCreated)
			if r.header.Get("Idempotent-Replayed") == "" {
				fresh = append(fresh, r)
			}
		}
		if len(fresh) != 1 {
			t.Fatalf("%d fresh responses, want 1", len(fresh))
		}
		for _, r := range responses {
			if r.header.Get("Idempotent-Replayed") != "" {
				wantReplay(t, r, fresh[0])
			}
		}
	})

	t.Run("PanicReleasesTheClaimAndRetryRuns", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{})
		e.hook = func(n int64, w http.ResponseWriter, r *http.Request) bool {
			if n == 1 {
				w.Header().Set("Content-Type", "text/plain")
				w.Write([]byte("partial")) // buffered: never reaches the client
				panic("handler bug")
			}
			return false
		}
		// No keep-alive, so the transport cannot silently retry the
		// request (it would: the Idempotency-Key header marks it safe).
		noRetry := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		h := http.Header{"Idempotency-Key": {`"k1"`}}
		if r := e.send(context.Background(), noRetry, "POST", "/payments", "{}", h); r.err == nil {
			t.Fatalf("the panicking request got a response: %d %q", r.status, r.body)
		}
		e.waitReleased("", "k1")
		wantFresh(t, e.post("k1", "{}"), http.StatusCreated)
		e.wantRuns(2)
	})

	t.Run("ClientGoingAwayReleasesTheClaimAndRetryRuns", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{})
		entered := make(chan struct{})
		e.hook = func(n int64, w http.ResponseWriter, r *http.Request) bool {
			if n == 1 {
				close(entered)
				<-r.Context().Done() // the work is abandoned
				return true
			}
			return false
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan response, 1)
		go func() {
			h := http.Header{"Idempotency-Key": {`"k1"`}}
			done <- e.send(ctx, e.client, "POST", "/payments", "{}", h)
		}()
		<-entered
		cancel()
		if r := receive(t, done); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled request: %v", r.err)
		}
		e.waitReleased("", "k1")
		wantFresh(t, e.post("k1", "{}"), http.StatusCreated)
		e.wantRuns(2)
	})

	t.Run("SlowHandlerIsRenewedAndNeverRunsTwice", func(t *testing.T) {
		t.Parallel()
		var ttl time.Duration
		e := newEnv(t, factory, idempotency.Options{RenewEvery: 20 * time.Millisecond}, func(e *env, o *idempotency.Options) {
			ttl = time.Second + 2*e.store.ClockTolerance() // the shortest TTL the store allows
			o.ClaimTTL = ttl
		})
		b := newBlocker(t)
		e.hook = b.hook
		first := e.async("k1", "{}")
		b.waitEntered(t)

		// Let three TTLs pass while the handler runs. Without renewal the
		// claim would expire and the next request would run the handler
		// again.
		ref := durable.KeyRef{Key: idempotency.StoreKey("k1")}
		leaseUntil := func() time.Time {
			rec, err := e.store.GetKey(context.Background(), ref)
			if err != nil || rec.State != durable.KeyClaimed {
				t.Fatalf("GetKey = %+v, %v; want a live claim", rec, err)
			}
			return rec.LeaseUntil
		}
		if e.advance == nil {
			time.Sleep(3 * ttl)
		} else {
			for range 6 {
				// Move the store clock by half a TTL, then wait for a
				// renewal at the new time.
				before := leaseUntil()
				e.advance(ttl / 2)
				deadline := time.Now().Add(10 * time.Second)
				for leaseUntil().Before(before.Add(ttl / 2)) {
					if time.Now().After(deadline) {
						t.Fatal("the claim was not renewed")
					}
					time.Sleep(time.Millisecond)
				}
			}
		}
		second := e.async("k1", "{}")
		select {
		case r := <-second:
			wantProblem(t, r, http.StatusConflict, "k1")
		case n := <-b.entered:
			t.Fatalf("the handler ran again (run %d) while the first was still running", n)
		}
		b.unblock()
		r := receive(t, first)
		wantFresh(t, r, http.StatusCreated)
		wantReplay(t, e.post("k1", "{}"), r)
		e.wantRuns(1)
	})

	t.Run("StoreUnavailableFailsClosedWith503", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{}, withStore(func(s *durable.Store) *durable.Store {
			d, err := durable.New(unavailable{rawBackend(t, s)})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}))
		wantProblem(t, e.post("k1", "{}"), http.StatusServiceUnavailable, "k1")
		e.wantRuns(0)
	})

	t.Run("StoreUnavailablePassesThroughWhenFailOpen", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{FailOpen: true}, withStore(func(s *durable.Store) *durable.Store {
			d, err := durable.New(unavailable{rawBackend(t, s)})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}))
		r := e.post("k1", `{"amount":1}`)
		wantFresh(t, r, http.StatusCreated)
		if !bytes.Contains(r.body, []byte(`"request_bytes":12`)) {
			t.Fatalf("the handler did not get the body: %q", r.body)
		}
		wantFresh(t, e.post("k1", `{"amount":1}`), http.StatusCreated)
		e.wantRuns(2)
	})

	t.Run("KeysOfOneTenantNeverReplayForAnother", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{Scope: func(r *http.Request) durable.Scope {
			return durable.TenantScope(r.Header.Get("X-Tenant"))
		}})
		a := e.post("k1", "{}", "X-Tenant", "acme")
		wantFresh(t, a, http.StatusCreated)
		b := e.post("k1", "{}", "X-Tenant", "globex")
		wantFresh(t, b, http.StatusCreated)
		if bytes.Equal(a.body, b.body) {
			t.Fatal("tenant B got tenant A's payment")
		}
		wantReplay(t, e.post("k1", "{}", "X-Tenant", "acme"), a)
		wantReplay(t, e.post("k1", "{}", "X-Tenant", "globex"), b)
		// Another body is a conflict within a tenant, never across.
		wantFresh(t, e.post("k2", `{"a":1}`, "X-Tenant", "acme"), http.StatusCreated)
		wantFresh(t, e.post("k2", `{"a":2}`, "X-Tenant", "globex"), http.StatusCreated)
		wantProblem(t, e.post("k2", `{"a":2}`, "X-Tenant", "acme"), http.StatusUnprocessableEntity, "k2")
		e.wantRuns(4)
	})

	t.Run("OtherMethodsPassThroughUntouched", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{Required: true})
		for _, method := range []string{"GET", "PUT", "DELETE"} {
			for range 2 {
				h := http.Header{"Idempotency-Key": {`"k1"`}}
				wantFresh(t, e.send(context.Background(), e.client, method, "/payments", "", h), http.StatusOK)
			}
		}
		// A malformed key is not even looked at.
		wantFresh(t, e.send(context.Background(), e.client, "GET", "/payments", "", http.Header{"Idempotency-Key": {`"bad`}}), http.StatusOK)
		e.wantRuns(7)
	})

	t.Run("ServerErrorsAreNotStored", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{})
		e.hook = func(n int64, w http.ResponseWriter, r *http.Request) bool {
			if n == 1 {
				http.Error(w, "database down", http.StatusServiceUnavailable)
				return true
			}
			return false
		}
		wantFresh(t, e.post("k1", "{}"), http.StatusServiceUnavailable)
		wantFresh(t, e.post("k1", "{}"), http.StatusCreated)
		e.wantRuns(2)
	})

	t.Run("ClientErrorsAreStored", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{})
		e.hook = func(n int64, w http.ResponseWriter, r *http.Request) bool {
			if n == 1 {
				http.Error(w, "card declined", http.StatusPaymentRequired)
				return true
			}
			return false
		}
		first := e.post("k1", "{}")
		wantFresh(t, first, http.StatusPaymentRequired)
		wantReplay(t, e.post("k1", "{}"), first)
		e.wantRuns(1)
	})

	t.Run("ResponseLargerThanMaxBodyIsSentButNotStored", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{MaxBody: 1024})
		big := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
		e.hook = func(n int64, w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Content-Type", "application/octet-stream")
			for i := 0; i < len(big); i += 100 {
				w.Write(big[i:min(i+100, len(big))])
			}
			return true
		}
		r := e.post("k1", "{}")
		wantFresh(t, r, http.StatusOK)
		if !bytes.Equal(r.body, big) {
			t.Fatalf("got %d bytes, want the %d the handler wrote", len(r.body), len(big))
		}
		e.waitReleased("", "k1")
		wantFresh(t, e.post("k1", "{}"), http.StatusOK)
		e.wantRuns(2)
	})

	// A flush is deferred until the response is stored (see
	// TestFlushIsDeferredUntilStored); the client gets the whole response.
	t.Run("FlushedResponseIsDeferredAndStored", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{})
		e.hook = func(n int64, w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: one\n\n")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
			io.WriteString(w, "data: two\n\n")
			return true
		}
		first := e.post("k1", "{}")
		wantFresh(t, first, http.StatusOK)
		if string(first.body) != "data: one\n\ndata: two\n\n" {
			t.Fatalf("flushed body %q", first.body)
		}
		wantReplay(t, e.post("k1", "{}"), first)
		e.wantRuns(1)
	})

	t.Run("HeadersChangedAfterWriteHeaderAreIgnoredAsByNetHTTP", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{})
		e.hook = func(n int64, w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Location", "/payments/before")
			w.WriteHeader(http.StatusCreated)
			w.Header().Set("Location", "/payments/after") // too late
			w.Header().Set("Content-Type", "text/plain")  // too late
			io.WriteString(w, "created")
			return true
		}
		first := e.post("k1", "{}")
		wantFresh(t, first, http.StatusCreated)
		if loc := first.header.Get("Location"); loc != "/payments/before" {
			t.Fatalf("Location %q, want the value at WriteHeader", loc)
		}
		wantReplay(t, e.post("k1", "{}"), first)
	})

	t.Run("RequestBodyLargerThanMaxRequestBodyGets413", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, factory, idempotency.Options{MaxRequestBody: 16})
		wantProblem(t, e.post("k1", strings.Repeat("x", 17)), http.StatusRequestEntityTooLarge, "k1")
		wantFresh(t, e.post("k1", strings.Repeat("x", 16)), http.StatusCreated)
		e.wantRuns(1)
	})
}

// rawBackend reaches the backend behind s, for decorators.
func rawBackend(t *testing.T, s *durable.Store) contract.Backend {
	t.Helper()
	var b contract.Backend
	if !s.As(&b) {
		t.Fatal("Store.As found no contract.Backend")
	}
	return b
}
