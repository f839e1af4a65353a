package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/internal/faultproxy"
	"github.com/durable-go/durable/middleware/idempotency"
	"github.com/durable-go/durable/middleware/idempotency/client"
)

// The end-to-end proof: the Transport against the real middleware (a
// durable.Store on the memory backend) behind internal/faultproxy, with
// faults on the way there and back and server restarts. Every logical
// request must have its effect exactly once, and its caller the body that
// one execution produced.
//
//	DURABLE_CLIENTS_LOGICAL  logical requests (default 2000)
//	DURABLE_FAULT_SUMMARY    a file to append the CLIENTS line to (CI)

func TestInFlightTypeMatchesTheMiddleware(t *testing.T) {
	if client.InFlightType != idempotency.InFlightType || client.ReplayedHeader != idempotency.ReplayedHeader {
		t.Fatal("the client's constants differ from the middleware's")
	}
}

// The faults a logical request is planned for (header X-Plan). Each is
// injected once, on the request's first attempt that meets it.
const (
	planNone = "none"
	// before: the proxy cuts the connection when the request's first bytes
	// reach it; they are never forwarded to the server.
	planBefore = "before"
	// after-run: the handler cuts the connection right after its effect,
	// before the middleware stored and sent its response.
	planAfterRun = "after-run"
	// in-flight: like after-run, and the handler then waits until a retry
	// got the middleware's 409 (the key in flight) before returning.
	planInFlight = "in-flight"
	// lost-reply: the proxy is frozen while the request runs; once the
	// middleware stored and wrote the response, the connection is cut and
	// what the proxy held back is dropped.
	planLostReply = "lost-reply"
	// mid-reply: the reply (96 KiB) is cut after its headers and the first
	// part of the body reached the client.
	planMidReply = "mid-reply"
	// 5xx: the first execution answers 503 without an effect; the
	// middleware releases the claim, so a retry runs the handler again.
	plan5xx = "5xx"
)

func planFor(i int) string {
	switch {
	case i%40 == 5:
		return planInFlight
	case i%8 == 0:
		return planBefore
	case i%8 == 1:
		return planAfterRun
	case i%8 == 2:
		return planLostReply
	case i%8 == 3:
		return planMidReply
	case i%8 == 4:
		return plan5xx
	}
	return planNone
}

// keyState is what the server side saw of one key.
type keyState struct {
	mu      sync.Mutex
	execs   int
	effects int
	body    []byte // the body of the execution that had the effect

	injected  atomic.Bool // the planned fault was injected
	saw409    chan struct{}
	saw409Set sync.Once
}

type e2e struct {
	t       *testing.T
	store   *durable.Store
	proxies []*faultproxy.Proxy
	states  sync.Map // key → *keyState
	faults  sync.Map // plan → *atomic.Int64 (injected)
	got409  atomic.Int64

	srvMu    sync.Mutex
	srv      *http.Server
	addr     string
	handler  http.Handler
	restarts int
}

func (e *e2e) state(key string) *keyState {
	if s, ok := e.states.Load(key); ok {
		return s.(*keyState)
	}
	s, _ := e.states.LoadOrStore(key, &keyState{saw409: make(chan struct{})})
	return s.(*keyState)
}

func (e *e2e) injected(plan string) {
	c, _ := e.faults.LoadOrStore(plan, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
}

func (e *e2e) count(plan string) int64 {
	if c, ok := e.faults.Load(plan); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

func keyOf(r *http.Request) string { return strings.Trim(r.Header.Get("Idempotency-Key"), `"`) }

func (e *e2e) proxyOf(r *http.Request) *faultproxy.Proxy {
	w, _ := strconv.Atoi(r.Header.Get("X-Worker"))
	return e.proxies[w]
}

// app is the payment handler behind the middleware.
func (e *e2e) app(w http.ResponseWriter, r *http.Request) {
	key, plan := keyOf(r), r.Header.Get("X-Plan")
	s := e.state(key)
	s.mu.Lock()
	s.execs++
	if plan == plan5xx && s.execs == 1 {
		s.mu.Unlock()
		e.injected(plan5xx)
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	s.effects++
	body := fmt.Appendf(nil, "payment for %s, execution %d of %d\n", key, s.execs, s.effects)
	if plan == planMidReply {
		body = append(body, bytes.Repeat([]byte("p"), 96<<10)...)
	}
	if s.effects == 1 {
		s.body = body
	}
	s.mu.Unlock()
	if (plan == planAfterRun || plan == planInFlight) && s.injected.CompareAndSwap(false, true) {
		e.injected(plan)
		e.proxyOf(r).Cut()
		if plan == planInFlight {
			// Keep the key in flight until a retry got 409 for it (a
			// bound, in case the retry never comes).
			select {
			case <-s.saw409:
			case <-time.After(10 * time.Second):
			}
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusCreated)
	w.Write(body)
}

// statusWriter records the status the middleware answered with.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// outer wraps the middleware: the lost-reply fault, and noticing 409s.
func (e *e2e) outer(mw http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, plan := keyOf(r), r.Header.Get("X-Plan")
		s := e.state(key)
		lose := plan == planLostReply && s.injected.CompareAndSwap(false, true)
		p := e.proxyOf(r)
		if lose {
			p.Freeze()
		}
		sw := &statusWriter{ResponseWriter: w}
		mw.ServeHTTP(sw, r)
		if sw.code == http.StatusConflict {
			e.got409.Add(1)
			s.saw409Set.Do(func() { close(s.saw409) })
		}
		if lose {
			// The response is stored and written (at most into the frozen
			// proxy): cut, so that it never arrives.
			rc := http.NewResponseController(w)
			rc.Flush()
			p.Cut()
			p.Thaw()
			e.injected(planLostReply)
		}
	})
}

// observer watches a worker's client-to-server bytes: the before fault.
type observer struct {
	e *e2e
	p **faultproxy.Proxy
}

func (o observer) Write(b []byte) (int, error) {
	key := headerIn(b, "Idempotency-Key: ")
	if headerIn(b, "X-Plan: ") != planBefore || key == "" {
		return len(b), nil
	}
	if s := o.e.state(strings.Trim(key, `"`)); s.injected.CompareAndSwap(false, true) {
		o.e.injected(planBefore)
		(*o.p).Cut() // the chunk is not forwarded: the link is closed
	}
	return len(b), nil
}

// headerIn returns the value of a header in raw request bytes, or "".
func headerIn(b []byte, name string) string {
	i := bytes.Index(b, []byte(name))
	if i < 0 {
		return ""
	}
	rest := b[i+len(name):]
	j := bytes.Index(rest, []byte("\r\n"))
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// midReply is the Base under a worker's Transport: the mid-reply fault.
type midReply struct {
	e    *e2e
	p    *faultproxy.Proxy
	base http.RoundTripper
}

func (m *midReply) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("X-Plan") != planMidReply {
		return m.base.RoundTrip(r)
	}
	s := m.e.state(keyOf(r))
	if s.injected.Load() {
		return m.base.RoundTrip(r)
	}
	// Hold every chunk a little, so that the reply's body is still in the
	// proxy when its headers arrive; then cut.
	m.p.SetLatency(2*time.Millisecond, 0)
	defer m.p.SetLatency(0, 0)
	resp, err := m.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusCreated && s.injected.CompareAndSwap(false, true) {
		m.p.Cut()
		// Counted when the body's read fails: on a busy machine the whole
		// body may have passed before the cut.
		resp.Body = &cutBodyReader{ReadCloser: resp.Body, count: func() { m.e.injected(planMidReply) }}
	}
	return resp, err
}

// cutBodyReader counts a failed read of a body cut in the middle.
type cutBodyReader struct {
	io.ReadCloser
	count func()
	once  sync.Once
}

func (b *cutBodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.once.Do(b.count)
	}
	return n, err
}

func (e *e2e) start() {
	e.t.Helper()
	var l net.Listener
	var err error
	for range 100 { // the old listener's port may take a moment to free
		if l, err = net.Listen("tcp", e.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		e.t.Fatalf("listen again on %s: %v", e.addr, err)
	}
	e.addr = l.Addr().String()
	e.srv = &http.Server{Handler: e.handler}
	go e.srv.Serve(l)
}

// restart stops the server (its connections close at once; running
// handlers go on) and starts a new one on the same address and store.
func (e *e2e) restart() {
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	e.srv.Close()
	e.start()
	e.restarts++
}

func TestEndToEndThroughFaults(t *testing.T) {
	logical := 2000
	if v := os.Getenv("DURABLE_CLIENTS_LOGICAL"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("DURABLE_CLIENTS_LOGICAL=%q", v)
		}
		logical = n
	}
	const workers = 8
	const restarts = 8

	store, err := durable.New(memory.NewStorage(memory.Options{}).Backend())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	mw, err := idempotency.New(store, idempotency.Options{Required: true})
	if err != nil {
		t.Fatal(err)
	}
	e := &e2e{t: t, store: store, addr: "127.0.0.1:0"}
	e.handler = e.outer(mw(http.HandlerFunc(e.app)))
	e.start()
	defer func() { e.srvMu.Lock(); e.srv.Close(); e.srvMu.Unlock() }()

	// One proxy per worker, so that a fault cuts only that worker's
	// connection, and the fault counts are exact.
	for range workers {
		p := new(*faultproxy.Proxy)
		px, err := faultproxy.New(e.addr, faultproxy.Options{ClientBytes: func() io.Writer { return observer{e, p} }})
		if err != nil {
			t.Fatal(err)
		}
		*p = px
		e.proxies = append(e.proxies, px)
		defer px.Close()
	}

	type outcome struct {
		key      string
		status   int
		body     []byte
		res      client.Result
		err      error
		attempts int
	}
	outcomes := make([]outcome, logical)
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		// Half the workers keep connections alive: net/http then resends
		// a request whose reused connection broke before any answer
		// itself (an Idempotency-Key makes it replayable), below the
		// Transport's count of attempts. The other half dial for every
		// attempt, so each of their faults reaches the Transport.
		base := &http.Transport{MaxIdleConnsPerHost: 1, DisableKeepAlives: w%2 == 1}
		defer base.CloseIdleConnections()
		tr := &client.Transport{
			Base:        &midReply{e: e, p: e.proxies[w], base: base},
			MaxAttempts: 50, Budget: 30 * time.Second, AttemptTimeout: 5 * time.Second,
			MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
			MaxRetryAfter: 20 * time.Millisecond, // the middleware asks for 1 s
		}
		hc := &http.Client{Transport: tr}
		url := "http://" + e.proxies[w].Addr() + "/payments"
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= logical {
					return
				}
				o := &outcomes[i]
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":`+strconv.Itoa(i)+`}`))
				req.Header.Set("X-Plan", planFor(i))
				req.Header.Set("X-Worker", strconv.Itoa(w))
				resp, err := hc.Do(req)
				if err != nil {
					o.err = err
					var ce *client.Error
					if errors.As(err, &ce) {
						o.key, o.attempts = ce.Key, ce.Attempts
					}
				} else {
					o.status = resp.StatusCode
					o.body, o.err = io.ReadAll(resp.Body)
					resp.Body.Close()
					o.res, _ = client.ResultOf(resp)
					o.key, o.attempts = o.res.Key, o.res.Attempts
				}
				done.Add(1)
			}
		})
	}
	// Restart the server evenly through the run.
	var rwg sync.WaitGroup
	rwg.Go(func() {
		for k := 1; k <= restarts; k++ {
			for done.Load() < int64(k*logical/(restarts+1)) {
				time.Sleep(time.Millisecond)
			}
			e.restart()
		}
	})
	wg.Wait()
	rwg.Wait()

	// Every logical request: one effect, and its caller got that
	// execution's body.
	var effects, doubles, missing, retries, replays int
	hist := map[int]int{}
	keys := map[string]bool{}
	for i, o := range outcomes {
		hist[o.attempts]++
		retries += max(o.attempts-1, 0)
		if o.res.Replayed {
			replays++
		}
		keys[o.key] = true
		s := e.state(o.key)
		s.mu.Lock()
		eff, body := s.effects, s.body
		s.mu.Unlock()
		effects += eff
		if eff > 1 {
			doubles++
			t.Errorf("logical request %d (%s): %d effects", i, planFor(i), eff)
		}
		if o.err != nil || o.status != http.StatusCreated || eff == 0 || !bytes.Equal(o.body, body) {
			missing++
			if missing <= 10 {
				t.Errorf("logical request %d (%s): status %d, error %v, body %.60q; the stored outcome %.60q",
					i, planFor(i), o.status, o.err, o.body, body)
			}
		}
	}
	// No effect of a key that no caller knows.
	e.states.Range(func(k, v any) bool {
		if !keys[k.(string)] {
			s := v.(*keyState)
			s.mu.Lock()
			effects += s.effects
			if s.effects > 0 {
				t.Errorf("%d effects under a key no caller has", s.effects)
			}
			s.mu.Unlock()
		}
		return true
	})
	if len(keys) != logical {
		t.Errorf("%d distinct keys for %d logical requests", len(keys), logical)
	}

	// Report.
	var hs []string
	for _, n := range slices.Sorted(func(yield func(int) bool) {
		for n := range hist {
			if !yield(n) {
				return
			}
		}
	}) {
		hs = append(hs, fmt.Sprintf("%d:%d", n, hist[n]))
	}
	var accepted int64
	for _, p := range e.proxies {
		a, _ := p.Stats()
		accepted += a
	}
	plans := []string{planBefore, planAfterRun, planInFlight, planLostReply, planMidReply, plan5xx}
	var fs []string
	for _, p := range plans {
		fs = append(fs, fmt.Sprintf("%s=%d", p, e.count(p)))
	}
	t.Logf("attempts histogram (attempts:callers): %s", strings.Join(hs, " "))
	t.Logf("faults injected: %s; server restarts %d; 409 in flight answered %d; connections through the proxies %d",
		strings.Join(fs, " "), e.restarts, e.got409.Load(), accepted)
	line := fmt.Sprintf("CLIENTS kind=http logical=%d effects=%d doubles=%d missing=%d retries=%d replays=%d restarts=%d in-flight-409=%d faults{%s}",
		logical, effects, doubles, missing, retries, replays, e.restarts, e.got409.Load(), strings.Join(fs, " "))
	t.Log(line)
	appendSummary(t, line)

	if effects != logical || doubles != 0 || missing != 0 {
		t.Fatalf("effects %d for %d logical requests, %d doubles, %d callers without the outcome", effects, logical, doubles, missing)
	}
	if logical >= 200 {
		for _, p := range plans {
			if e.count(p) == 0 {
				t.Errorf("fault %s was never injected", p)
			}
		}
		if e.got409.Load() == 0 || e.restarts != restarts || replays == 0 {
			t.Errorf("409s %d, restarts %d, replays %d", e.got409.Load(), e.restarts, replays)
		}
	}
}

// appendSummary appends line to the file DURABLE_FAULT_SUMMARY names, if
// any (CI prints it after the run).
func appendSummary(t *testing.T, line string) {
	path := os.Getenv("DURABLE_FAULT_SUMMARY")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("DURABLE_FAULT_SUMMARY: %v", err)
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		t.Errorf("DURABLE_FAULT_SUMMARY: %v", err)
	}
}
