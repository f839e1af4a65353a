package grpcidem_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/internal/faultproxy"
	"github.com/durable-go/durable/middleware/grpcidem"
)

// The end-to-end proof: the client interceptor against the server
// interceptor through internal/faultproxy. Knobs:
//
//	DURABLE_GRPC_CLIENTS   logical requests (default 2000, at least 1000)
//	DURABLE_FAULT_SUMMARY  a file to append the CLIENTS line to (CI sets it)
const (
	e2eService = "durable.test.Payments"
	e2ePay     = "/" + e2eService + "/Pay"
	e2ePing    = "/" + e2eService + "/Ping"
	e2eBig     = 256 << 10 // bytes of a mid-reply fault's response
	e2eWorkers = 16
)

// Fault kinds, one per logical request (by its number), besides the
// collateral damage a fault does to the calls in flight beside it.
const (
	faultNone   = iota
	faultBefore // the connection is reset while the request is held in the proxy
	faultAfter  // the handler ran and its outcome is stored; the reply is held, then reset
	faultMid    // the client has read part of a large reply when the connection is reset
	faultTwins  // two callers with the same key at once
	// The server restarts while the request's handler runs: Stop cancels
	// the call (the client sees its connection go), waits for the handler,
	// whose outcome is stored; a new server on the same address and storage
	// answers the retry.
	faultRestart
	faultKinds
)

var faultNames = [faultKinds]string{"none", "before", "after", "mid", "twins", "restart"}

// restartEvery spaces the restarts: a few per run.
const restartEvery = 500

func faultOf(i int) int {
	if i%restartEvery == restartEvery/2 {
		return faultRestart
	}
	switch i % 20 {
	case 1, 11:
		return faultBefore
	case 3, 13:
		return faultAfter
	case 5:
		return faultMid
	case 7:
		return faultTwins
	}
	return faultNone
}

func marker(i int) string { return fmt.Sprintf("e2e-req-%07d|", i) }

// e2e is the harness: one storage, a server restarted on the same address,
// the proxy, one client connection.
type e2e struct {
	t       *testing.T
	storage *memory.Storage
	addr    string
	proxy   *faultproxy.Proxy
	cc      *grpc.ClientConn

	srvMu sync.Mutex
	srv   *grpc.Server
	store *durable.Store

	// faultMu serialises fault injections: the proxy's freeze is global.
	faultMu sync.Mutex

	// The handler's records, by logical request.
	effMu     sync.Mutex
	effects   []int   // handler effects (runs that got past the effect)
	effectRun []int64 // the run number of the first effect
	arrived   []atomic.Int64
	runs      atomic.Int64
	inflight  atomic.Int64 // Pay calls inside the server interceptors
	// Pay calls in flight when a restart began, summed over the restarts.
	restartInflight atomic.Int64
	restarts        atomic.Int64

	// Rendezvous for the "after" fault: the handler's first run for the
	// request signals started and waits for release; the outer server
	// interceptor signals stored once the idempotency interceptor returned.
	rvMu sync.Mutex
	rv   map[int]*rendezvous

	// Client-side connection taps for the "before" and "mid" faults.
	tapMu       sync.Mutex
	writeMarker []byte
	wrote       chan struct{}
	readLeft    int
	readHit     chan struct{}
}

type rendezvous struct {
	started, release, stored, abandoned chan struct{}
	released                            atomic.Bool
}

func newE2E(t *testing.T, n int) *e2e {
	t.Helper()
	e := &e2e{
		t:         t,
		storage:   memory.NewStorage(memory.Options{}),
		effects:   make([]int, n),
		effectRun: make([]int64, n),
		arrived:   make([]atomic.Int64, n),
		rv:        map[int]*rendezvous{},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = l.Addr().String()
	e.start(l)
	e.proxy, err = faultproxy.New(e.addr, faultproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.proxy.Close)
	t.Cleanup(func() {
		e.srvMu.Lock()
		defer e.srvMu.Unlock()
		e.srv.Stop()
		e.store.Close()
	})
	e.cc, err = grpc.NewClient(e.proxy.Addr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(e.dial),
		// Reconnect fast after a reset or while the server restarts.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 50 * time.Millisecond},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(grpcidem.ClientOptions{
			Methods:     []string{e2ePay},
			MaxAttempts: 200,
			Budget:      time.Minute,
			MinBackoff:  time.Millisecond,
			MaxBackoff:  20 * time.Millisecond,
		})),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.cc.Close() })
	return e
}

// start serves on l: a new Store on the shared storage (a new process's,
// in effect) and a new grpc.Server with the server interceptor.
func (e *e2e) start(l net.Listener) {
	e.t.Helper()
	store, err := durable.New(e.storage.Backend())
	if err != nil {
		e.t.Fatal(err)
	}
	idem, err := grpcidem.UnaryServerInterceptor(store, grpcidem.ServerOptions{RetryAfter: 5 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(e.outer, idem), grpc.WaitForHandlers(true))
	srv.RegisterService(clServiceDesc(e2eService, map[string]clHandler{"Pay": e.pay, "Ping": ping}), nil)
	go srv.Serve(l)
	e.srvMu.Lock()
	e.srv, e.store = srv, store
	e.srvMu.Unlock()
}

// restart stops the server (connections dropped at once, in-flight calls
// failed on the client; Stop returns when the handlers have returned) and
// serves again on the same address with a new Store on the same storage.
func (e *e2e) restart() {
	e.t.Helper()
	e.srvMu.Lock()
	srv, store := e.srv, e.store
	e.srvMu.Unlock()
	e.restarts.Add(1)
	e.restartInflight.Add(e.inflight.Load())
	srv.Stop()
	store.Close()
	var l net.Listener
	var err error
	for range 100 {
		if l, err = net.Listen("tcp", e.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		e.t.Fatalf("listening again on %s: %v", e.addr, err)
	}
	e.start(l)
}

func reqID(req *structpb.Struct) int { return int(req.GetFields()["id"].GetNumberValue()) }

// outer runs outside the idempotency interceptor: it counts arrivals and
// tells the "after" fault that the outcome was stored (the idempotency
// interceptor returns only after storing it).
func (e *e2e) outer(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if info.FullMethod != e2ePay {
		return h(ctx, req)
	}
	id := reqID(req.(*structpb.Struct))
	e.arrived[id].Add(1)
	e.inflight.Add(1)
	resp, err := h(ctx, req)
	e.inflight.Add(-1)
	if r := e.rendezvous(id, false); r != nil && r.released.Load() {
		select {
		case <-r.stored:
		default:
			close(r.stored)
		}
	}
	return resp, err
}

func (e *e2e) rendezvous(id int, create bool) *rendezvous {
	e.rvMu.Lock()
	defer e.rvMu.Unlock()
	r := e.rv[id]
	if r == nil && create {
		r = &rendezvous{started: make(chan struct{}), release: make(chan struct{}), stored: make(chan struct{}), abandoned: make(chan struct{})}
		e.rv[id] = r
	}
	return r
}

// pay is the handler: its effect is counted per logical request, and its
// response names the run that produced it.
func (e *e2e) pay(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	id := reqID(req)
	run := e.runs.Add(1)
	e.effMu.Lock()
	e.effects[id]++
	first := e.effects[id] == 1
	if first {
		e.effectRun[id] = run
	}
	e.effMu.Unlock()
	if k := faultOf(id); first && (k == faultAfter || k == faultRestart) {
		r := e.rendezvous(id, false)
		close(r.started)
		select {
		case <-r.release:
		case <-ctx.Done(): // a restart or a collateral reset came first
			close(r.abandoned)
		}
	}
	resp := map[string]any{"id": float64(id), "run": float64(run), "marker": req.GetFields()["marker"].GetStringValue()}
	if faultOf(id) == faultMid {
		resp["pad"] = strings.Repeat("x", e2eBig)
	}
	return structpb.NewStruct(resp)
}

func ping(context.Context, *structpb.Struct) (*structpb.Struct, error) {
	return &structpb.Struct{}, nil
}

// dial is the client's dialer: it taps the connection's bytes.
func (e *e2e) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &tapConn{Conn: c, e: e}, nil
}

type tapConn struct {
	net.Conn
	e *e2e
}

func (c *tapConn) Write(b []byte) (int, error) {
	e := c.e
	e.tapMu.Lock()
	if e.writeMarker != nil && bytes.Contains(b, e.writeMarker) {
		// The request is on its way, and the proxy is frozen: it will
		// hold these bytes until the reset drops them.
		e.writeMarker = nil
		close(e.wrote)
	}
	e.tapMu.Unlock()
	return c.Conn.Write(b)
}

func (c *tapConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	e := c.e
	e.tapMu.Lock()
	if e.readHit != nil && n > 0 {
		e.readLeft -= n
		if e.readLeft <= 0 {
			// Part of the large reply is in: freeze the rest in the proxy.
			e.proxy.Freeze()
			close(e.readHit)
			e.readHit = nil
		}
	}
	e.tapMu.Unlock()
	return n, err
}

// ready returns once a call without a key went through, so that the
// client's connection is known to work and a call made next writes its
// request on it at once. Under faultMu nothing else breaks it.
func (e *e2e) ready(ctx context.Context) {
	for {
		err := e.cc.Invoke(ctx, e2ePing, &structpb.Struct{}, new(structpb.Struct), grpc.WaitForReady(true))
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			e.t.Errorf("ping: %v", err)
			return
		}
	}
}

// result is one caller's view of one logical request.
type result struct {
	id, run  int64
	marker   string
	err      error
	outcome  grpcidem.Outcome
	injected bool // the request's own fault took effect as designed
}

func (e *e2e) call(ctx context.Context, i int, opts ...grpc.CallOption) result {
	req, err := structpb.NewStruct(map[string]any{"id": float64(i), "marker": marker(i)})
	if err != nil {
		panic(err)
	}
	var r result
	resp := new(structpb.Struct)
	r.err = e.cc.Invoke(ctx, e2ePay, req, resp, append(opts, grpcidem.Report(&r.outcome))...)
	if r.err == nil {
		r.id = int64(resp.GetFields()["id"].GetNumberValue())
		r.run = int64(resp.GetFields()["run"].GetNumberValue())
		r.marker = resp.GetFields()["marker"].GetStringValue()
	}
	return r
}

// logical runs logical request i with its fault and returns its callers'
// results (two for twins).
func (e *e2e) logical(ctx context.Context, i int) []result {
	switch faultOf(i) {
	case faultBefore:
		e.faultMu.Lock()
		defer e.faultMu.Unlock()
		wrote := make(chan struct{})
		e.tapMu.Lock()
		e.writeMarker, e.wrote = []byte(marker(i)), wrote
		e.tapMu.Unlock()
		e.ready(ctx)
		e.proxy.Freeze()
		done := make(chan result, 1)
		go func() { done <- e.call(ctx, i) }()
		var r result
		select {
		case <-wrote:
			// Held in the proxy: the server cannot have seen it.
			injected := e.arrived[i].Load() == 0
			e.proxy.Reset(1)
			e.proxy.Thaw()
			r = <-done
			r.injected = injected && r.outcome.Attempts > 1
		case r = <-done: // failed before writing (no connection while frozen)
			e.proxy.Thaw()
		}
		e.tapMu.Lock()
		e.writeMarker = nil
		e.tapMu.Unlock()
		return []result{r}
	case faultAfter:
		// faultMu is held from the call on, so that no other fault ends the
		// call while its handler waits.
		e.faultMu.Lock()
		rv := e.rendezvous(i, true)
		done := make(chan result, 1)
		go func() { done <- e.call(ctx, i) }()
		select {
		case <-rv.started:
		case r := <-done: // cannot happen: the first run waits for release
			e.faultMu.Unlock()
			return []result{r}
		}
		e.proxy.Freeze()
		rv.released.Store(true)
		close(rv.release)
		injected := false
		select {
		case <-rv.stored:
			injected = true
		case <-rv.abandoned: // cannot happen: no other fault runs meanwhile
			e.proxy.Thaw()
			e.faultMu.Unlock()
			return []result{<-done}
		case r := <-done:
			e.proxy.Thaw()
			e.faultMu.Unlock()
			return []result{r}
		}
		e.proxy.Reset(1)
		e.proxy.Thaw()
		e.faultMu.Unlock()
		r := <-done
		r.injected = injected && r.outcome.Attempts > 1
		return []result{r}
	case faultMid:
		e.faultMu.Lock()
		hit := make(chan struct{})
		e.tapMu.Lock()
		e.readLeft, e.readHit = 64<<10, hit
		e.tapMu.Unlock()
		done := make(chan result, 1)
		go func() { done <- e.call(ctx, i) }()
		var r result
		select {
		case <-hit:
			e.proxy.Reset(1)
			e.proxy.Thaw()
			r = <-done
			r.injected = r.outcome.Attempts > 1
		case r = <-done:
			e.tapMu.Lock()
			if e.readHit == nil { // hit just as the call ended
				e.proxy.Thaw()
			}
			e.readHit = nil
			e.tapMu.Unlock()
		}
		e.faultMu.Unlock()
		return []result{r}
	case faultRestart:
		e.faultMu.Lock()
		defer e.faultMu.Unlock()
		rv := e.rendezvous(i, true)
		done := make(chan result, 1)
		go func() { done <- e.call(ctx, i) }()
		select {
		case <-rv.started:
		case r := <-done: // cannot happen: the first run waits
			return []result{r}
		}
		e.restart()
		r := <-done
		select {
		case <-rv.abandoned: // the handler saw its call cancelled by Stop
			r.injected = r.outcome.Attempts > 1
		default:
		}
		return []result{r}
	case faultTwins:
		key := grpcidem.WithKey("twin-" + strconv.Itoa(i))
		var rs [2]result
		var wg sync.WaitGroup
		for k := range rs {
			wg.Go(func() { rs[k] = e.call(ctx, i, key) })
		}
		wg.Wait()
		return rs[:]
	}
	return []result{e.call(ctx, i)}
}

func TestE2EClientsThroughFaults(t *testing.T) {
	n := 2000
	if s := os.Getenv("DURABLE_GRPC_CLIENTS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1000 {
			t.Fatalf("DURABLE_GRPC_CLIENTS=%q: want a number of at least 1000", s)
		}
		n = v
	}
	e := newE2E(t, n)
	ctx := context.Background()

	results := make([][]result, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range e2eWorkers {
		wg.Go(func() {
			for i := range next {
				results[i] = e.logical(ctx, i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()

	// The proof.
	var (
		logical, callers, effects, doubles, missing, wrong, replays int
		hist                                                        = map[int]int{}
		injected, kinds                                             [faultKinds]int
	)
	for i, rs := range results {
		logical++
		kinds[faultOf(i)]++
		effects += e.effects[i]
		if e.effects[i] > 1 {
			doubles++
			t.Errorf("request %d: the handler's effect ran %d times", i, e.effects[i])
		}
		for _, r := range rs {
			callers++
			hist[r.outcome.Attempts]++
			if r.outcome.Replayed {
				replays++
			}
			if r.injected {
				injected[faultOf(i)]++
			}
			switch {
			case r.err != nil:
				missing++
				t.Errorf("request %d: the caller got no outcome after %d attempts: %v", i, r.outcome.Attempts, r.err)
			case e.effects[i] == 0:
				missing++
				t.Errorf("request %d: a response without an effect", i)
			case r.id != int64(i) || r.run != e.effectRun[i] || r.marker != marker(i):
				wrong++
				t.Errorf("request %d: got run %d of request %d, want the stored outcome, run %d", i, r.run, r.id, e.effectRun[i])
			}
		}
	}
	accepted, resets := e.proxy.Stats()
	var hs []string
	for _, a := range slices.Sorted(func(yield func(int) bool) {
		for a := range hist {
			if !yield(a) {
				return
			}
		}
	}) {
		hs = append(hs, fmt.Sprintf("%d:%d", a, hist[a]))
	}
	var fs []string
	for k := faultBefore; k < faultKinds; k++ {
		if k == faultTwins {
			fs = append(fs, fmt.Sprintf("%s=%d", faultNames[k], kinds[k]))
			continue
		}
		fs = append(fs, fmt.Sprintf("%s=%d/%d", faultNames[k], injected[k], kinds[k]))
	}
	line := fmt.Sprintf("CLIENTS kind=grpc logical=%d callers=%d effects=%d doubles=%d missing=%d wrong=%d replays=%d restarts=%d restart_inflight=%d %s attempts=%s handler_runs=%d conns=%d resets=%d",
		logical, callers, effects, doubles, missing, wrong, replays, e.restarts.Load(), e.restartInflight.Load(), strings.Join(fs, " "), strings.Join(hs, ","), e.runs.Load(), accepted, resets)
	t.Log(line)
	t.Log("faults: name=injected/requests (injected: the request's own fault took effect and its caller retried); attempts=attempts:callers")
	if effects != n {
		t.Errorf("%d effects for %d logical requests", effects, n)
	}
	for k := faultBefore; k < faultKinds; k++ {
		if k != faultTwins && injected[k] == 0 {
			t.Errorf("no %q fault took effect: the test did not test it", faultNames[k])
		}
	}
	if path := os.Getenv("DURABLE_FAULT_SUMMARY"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatalf("DURABLE_FAULT_SUMMARY: %v", err)
		}
		defer f.Close()
		if _, err := fmt.Fprintln(f, line); err != nil {
			t.Errorf("DURABLE_FAULT_SUMMARY: %v", err)
		}
	}
}
