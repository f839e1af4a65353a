package redis

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// holdFirstWrite makes m's next write wait until release is called and
// queued more calls wait behind it; the writes after it go at once.
func holdFirstWrite(t *testing.T, m *mux, queued int) (release func()) {
	t.Helper()
	if m == nil {
		t.Fatal("the backend has no shared connection")
	}
	gate := make(chan struct{})
	entered := make(chan struct{})
	var once sync.Once
	m.mu.Lock()
	m.beforeWrite = func([]byte) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-gate
		}
	}
	m.mu.Unlock()
	return func() {
		t.Helper()
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("no write reached the hook")
		}
		waitQueued(t, m, queued)
		close(gate)
	}
}

// waitQueued waits until n calls wait in m's queue.
func waitQueued(t *testing.T, m *mux, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		got := len(m.queue)
		m.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// sharedBackend returns a private node, a raw backend on it with the
// default coalescing whose every script, alone ones too, goes on the
// shared connection (muxAlone), and that connection.
func sharedBackend(t *testing.T, so redistest.Options, co goredis.Options) (*redistest.Server, *goredis.Client, *Backend, *mux) {
	t.Helper()
	srv := redistest.Start(t, so)
	rdb, b := muxAloneBackend(t, srv.Addr(), so.Password, co)
	m := b.mux(rdb)
	if m == nil {
		t.Fatal("the backend has no shared connection")
	}
	return srv, rdb, b, m
}

// proxiedBackend is sharedBackend behind a proxy (the client dials the
// proxy, which forwards to a private node), after one create has dialed
// the shared connection.
func proxiedBackend(t *testing.T, so redistest.Options, co goredis.Options) (*redistest.Proxy, *goredis.Client, *Backend) {
	t.Helper()
	proxy := redistest.StartProxy(t, redistest.Start(t, so).Addr())
	rdb, b := muxAloneBackend(t, proxy.Addr(), so.Password, co)
	if _, err := b.CreateWorkflow(testCtx(t), contract.Workflow{ID: "warm", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	return proxy, rdb, b
}

// muxAloneBackend returns a client of addr with co (and password, unless
// co has one) and a raw backend on it that sends alone scripts on the
// shared connection too, both closed when t ends.
func muxAloneBackend(t *testing.T, addr, password string, co goredis.Options) (*goredis.Client, *Backend) {
	t.Helper()
	co.Addr, co.MaxRetries, co.ContextTimeoutEnabled = addr, -1, true
	if co.Password == "" {
		co.Password = password
	}
	rdb := goredis.NewClient(&co)
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := NewBackend(rdb, Options{Prefix: freshPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	b.muxAlone = true
	t.Cleanup(func() { _ = b.Close() })
	return rdb, b
}

// TestSharedCallThatLeavesBeforeItsWriteIsNeverSent: a create whose
// context ends while it waits behind a held write is Canceled, and the
// workflow never appears; the held call and a call queued beside it
// still get their answers.
func TestSharedCallThatLeavesBeforeItsWriteIsNeverSent(t *testing.T) {
	ctx := testCtx(t)
	_, _, b, m := sharedBackend(t, redistest.Options{}, goredis.Options{})
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "warm", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	release := holdFirstWrite(t, m, 2)
	first, kept, left := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "first", Status: "running"})
		first <- err
	}()
	waitQueued(t, m, 0)
	time.Sleep(20 * time.Millisecond) // first is in the hook
	lctx, lcancel := context.WithCancel(ctx)
	go func() {
		_, err := b.CreateWorkflow(lctx, contract.Workflow{ID: "left", Status: "running"})
		left <- err
	}()
	go func() {
		_, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "kept", Status: "running"})
		kept <- err
	}()
	waitQueued(t, m, 2)
	lcancel()
	if err := <-left; contract.CodeOf(err) != contract.Canceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("a create that left before its write: %v, want Canceled", err)
	}
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-kept; err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetWorkflow(ctx, "", "left"); contract.CodeOf(err) != contract.NotFound {
		t.Fatalf("the create that left before its write: GetWorkflow = %v, want NotFound (it was sent)", err)
	}
	for _, id := range []string{"first", "kept"} {
		if _, err := b.GetWorkflow(ctx, "", id); err != nil {
			t.Fatalf("GetWorkflow(%s): %v", id, err)
		}
	}
}

// TestSharedCallThatLeavesInFlight: while the server holds scripts
// (CLIENT PAUSE), a write whose context ends is OutcomeUnknown and a
// read Canceled; the connection goes on, the write applies when the
// pause ends, and the next calls on it succeed.
func TestSharedCallThatLeavesInFlight(t *testing.T) {
	ctx := testCtx(t)
	_, rdb, b, m := sharedBackend(t, redistest.Options{}, goredis.Options{})
	if _, err := b.GetLease(ctx, "", "warm"); contract.CodeOf(err) != contract.NotFound {
		t.Fatal(err)
	}
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "warm", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	pauseWrites(t, ctx, rdb, 500*time.Millisecond)
	wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer wcancel()
	rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer rcancel()
	var wg sync.WaitGroup
	var werr, rerr error
	wg.Go(func() { _, werr = b.CreateWorkflow(wctx, contract.Workflow{ID: "w", Status: "running"}) })
	wg.Go(func() { _, rerr = b.GetLease(rctx, "", "none") })
	wg.Wait()
	if contract.CodeOf(werr) != contract.OutcomeUnknown || !errors.Is(werr, context.DeadlineExceeded) {
		t.Fatalf("a write that left in flight: %v, want OutcomeUnknown", werr)
	}
	if contract.CodeOf(rerr) != contract.Canceled || !errors.Is(rerr, context.DeadlineExceeded) {
		t.Fatalf("a read that left in flight: %v, want Canceled", rerr)
	}
	before := m.batches.Load()
	w, err := b.GetWorkflow(ctx, "", "w") // waits for the pause like the others
	if err != nil || w.Revision != 1 {
		t.Fatalf("the write that left in flight applied? GetWorkflow = %+v, %v; want revision 1", w, err)
	}
	if m.batches.Load() != before+1 {
		t.Fatalf("the read after the pause did not go on the shared connection")
	}
}

// TestSharedConnectionClosedByTheServerWhileIdle: the server closes an
// idle connection (timeout 1); the backend notices at once, so the next
// write dials a new one and succeeds instead of being written into a dead
// socket and reported OutcomeUnknown.
func TestSharedConnectionClosedByTheServerWhileIdle(t *testing.T) {
	ctx := testCtx(t)
	_, rdb, b, m := sharedBackend(t, redistest.Options{}, goredis.Options{})
	if err := rdb.ConfigSet(ctx, "timeout", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "w0", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	first := m.conn
	m.mu.Unlock()
	time.Sleep(2500 * time.Millisecond) // the server's idle check runs every ~100 ms
	m.mu.Lock()
	gone := m.conn == nil && first.dead
	m.mu.Unlock()
	if !gone {
		t.Fatal("the connection the server closed is still the backend's")
	}
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "w1", Status: "running"}); err != nil {
		t.Fatalf("the first write after the server closed the idle connection: %v", err)
	}
}

// TestSharedConnectionReadTimeout: a server that stops answering (CLIENT
// PAUSE for longer than read_timeout) breaks the connection after
// read_timeout; the write in flight is OutcomeUnknown even though its
// context has time left, and the next call, once the server answers
// again, dials a new connection and succeeds.
func TestSharedConnectionReadTimeout(t *testing.T) {
	ctx := testCtx(t)
	_, rdb, b, m := sharedBackend(t, redistest.Options{}, goredis.Options{ReadTimeout: 200 * time.Millisecond})
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "warm", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	pauseWrites(t, ctx, rdb, 1500*time.Millisecond)
	start := time.Now()
	_, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "w", Status: "running"})
	took := time.Since(start)
	if contract.CodeOf(err) != contract.OutcomeUnknown {
		t.Fatalf("a write whose connection timed out: %v, want OutcomeUnknown", err)
	}
	if took > 1200*time.Millisecond {
		t.Fatalf("the write waited %v: the read timeout (200ms) did not cut it", took)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "after", Status: "running"}); err != nil {
		t.Fatalf("the first write after the timeout: %v", err)
	}
	if m.batches.Load() < 3 {
		t.Fatalf("the calls did not go on the shared connection (%d writes)", m.batches.Load())
	}
}

// TestSharedConnectionAuthenticatesAsTheClient: with a password, a
// database and a client name in the client's options, the shared
// connection sends AUTH, SELECT and CLIENT SETNAME: the backend's records
// land in that database and the connection carries the name. A wrong
// password is PermissionDenied, with no secret in the message.
func TestSharedConnectionAuthenticatesAsTheClient(t *testing.T) {
	ctx := testCtx(t)
	srv, rdb, b, m := sharedBackend(t, redistest.Options{Password: "s3cret-pw"},
		goredis.Options{DB: 3, ClientName: "durable-mux-test"})
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "w", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	if m.calls.Load() != 1 {
		t.Fatalf("the create did not go on the shared connection")
	}
	// The pooled connections of rdb are on db 3: a backend that sends
	// every script there finds the workflow; one on db 0 does not.
	for db, want := range map[int]bool{3: true, 0: false} {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Password: "s3cret-pw", DB: db, MaxRetries: -1})
		defer c.Close()
		pb, err := NewBackend(c, Options{Prefix: strings.TrimSuffix(b.Prefix(), ":"), Coalesce: CoalesceOff})
		if err != nil {
			t.Fatal(err)
		}
		defer pb.Close()
		_, err = pb.GetWorkflow(ctx, "", "w")
		if found := err == nil; found != want {
			t.Fatalf("db %d: GetWorkflow = %v; the shared connection did not SELECT the client's db", db, err)
		}
	}
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The shared connection is the one that speaks RESP2 (go-redis's own
	// speak RESP3).
	named := false
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " resp=2") {
			named = strings.Contains(line, " name=durable-mux-test ") && strings.Contains(line, " db=3 ")
		}
	}
	if !named {
		t.Fatalf("the shared connection does not carry the client's name:\n%s", list)
	}

	bad := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Password: "wrong-pw", MaxRetries: -1})
	defer bad.Close()
	bb, err := NewBackend(bad, Options{Prefix: freshPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer bb.Close()
	_, err = bb.CreateWorkflow(ctx, contract.Workflow{ID: "w", Status: "running"})
	if contract.CodeOf(err) != contract.PermissionDenied || strings.Contains(err.Error(), "wrong-pw") {
		t.Fatalf("a wrong password: %v, want PermissionDenied without the password", err)
	}
}

// TestSharedConnectionDialDoesNotHoldACaller: the shared connection is
// redialed, behind a frozen link, to a node that needs AUTH, so the dial
// hangs until dial_timeout (3 s); a caller whose context ends meanwhile
// (200 ms) gets Canceled at once and its create is never sent; once the
// link thaws, calls go through again.
func TestSharedConnectionDialDoesNotHoldACaller(t *testing.T) {
	ctx := testCtx(t)
	proxy, rdb, b := proxiedBackend(t, redistest.Options{Password: "pw"}, goredis.Options{DialTimeout: 3 * time.Second})
	m := b.mux(rdb)
	proxy.Freeze()
	proxy.Reset()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		m.mu.Lock()
		gone := m.conn == nil
		m.mu.Unlock()
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the shared connection did not notice the reset")
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.CreateWorkflow(cctx, contract.Workflow{ID: "w", Status: "running"})
	took := time.Since(start)
	if contract.CodeOf(err) != contract.Canceled {
		t.Fatalf("a create whose context ended while the connection was dialed: %v, want Canceled", err)
	}
	if took > time.Second {
		t.Fatalf("the create returned after %v: the dial held its caller past its context (200ms)", took)
	}
	proxy.Thaw()
	if _, err := b.GetWorkflow(ctx, "", "w"); contract.CodeOf(err) != contract.NotFound {
		t.Fatalf("the Canceled create: GetWorkflow = %v, want NotFound (it was sent)", err)
	}
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "after", Status: "running"}); err != nil {
		t.Fatalf("a create after the link thawed: %v", err)
	}
}

// TestSharedConnectionWriteDoesNotHoldACaller: behind a frozen link, 48
// creates of 512 KB each, 24 MB, more than the sockets buffer, wait on
// the shared connection with 300 ms deadlines while write_timeout is 5 s:
// every caller returns within a second (Canceled if its create was never
// written, OutcomeUnknown if it may have been), none held in a blocked
// write for the others.
func TestSharedConnectionWriteDoesNotHoldACaller(t *testing.T) {
	ctx := testCtx(t)
	proxy, _, b := proxiedBackend(t, redistest.Options{}, goredis.Options{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	proxy.Freeze()
	defer proxy.Thaw()
	snap := bytes.Repeat([]byte("x"), 512<<10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	worst := time.Duration(0)
	codes := map[contract.Code]int{}
	for i := range 48 {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := b.CreateWorkflow(cctx, contract.Workflow{ID: fmt.Sprint("w", i), Status: "running", Snapshot: snap})
			took := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			worst = max(worst, took)
			codes[contract.CodeOf(err)]++
			if c := contract.CodeOf(err); c != contract.Canceled && c != contract.OutcomeUnknown {
				t.Errorf("create %d behind a frozen link: %v, want Canceled or OutcomeUnknown", i, err)
			}
		})
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	t.Logf("outcomes %v, the slowest caller %v", codes, worst)
	if worst > time.Second {
		t.Fatalf("a caller returned after %v: a write for the others held it past its context (300ms)", worst)
	}
	if codes[contract.OutcomeUnknown] == 0 {
		t.Fatalf("no create was written before the link froze solid: the test did not fill the sockets")
	}
}

// TestSharedConnectionNotForClientsItCannotReproduce: a client with a
// credentials provider gets no shared connection; its backend pipelines
// on pooled connections instead, and works.
func TestSharedConnectionNotForClientsItCannotReproduce(t *testing.T) {
	ctx := testCtx(t)
	srv := redistest.Start(t, redistest.Options{Password: "pw"})
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1,
		CredentialsProvider: func() (string, string) { return "", "pw" }})
	defer rdb.Close()
	b, err := NewBackend(rdb, Options{Prefix: freshPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.mux(rdb) != nil {
		t.Fatal("a client with a credentials provider got a shared connection")
	}
	createAtOnce(t, ctx, b, 16)
	if st := b.CoalesceStats(); st.Calls != 16 {
		t.Fatalf("CoalesceStats = %+v: the creates did not go through the pipelines", st)
	}
}

// TestSharedConnectionClose: Close fails the calls in flight on the
// shared connection as Closed and every later call as Closed; nothing
// hangs.
func TestSharedConnectionClose(t *testing.T) {
	ctx := testCtx(t)
	_, rdb, b, _ := sharedBackend(t, redistest.Options{}, goredis.Options{})
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "warm", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	pauseWrites(t, ctx, rdb, 2*time.Second)
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			_, err := b.CreateWorkflow(ctx, contract.Workflow{ID: fmt.Sprint("w", i), Status: "running"})
			errs <- err
		}()
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for range 8 {
		if err := <-errs; contract.CodeOf(err) != contract.Closed {
			t.Fatalf("a create in flight at Close: %v, want Closed", err)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the calls in flight at Close took %v to return", took)
	}
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "later", Status: "running"}); contract.CodeOf(err) != contract.Closed {
		t.Fatalf("a create after Close: %v, want Closed", err)
	}
}

// TestEvalShaCommandIsGoRedisEncoding: the shared connection's EVALSHA
// carries exactly the arguments go-redis sends for the same call, for
// each type of argument the backend passes. A fake server decodes what a
// go-redis client writes; an argument of another type is refused, so
// that its call takes the pooled path.
func TestEvalShaCommandIsGoRedisEncoding(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []any, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		rd := bufio.NewReader(nc)
		for {
			v, err := readValue(rd)
			if err != nil {
				return
			}
			a, _ := v.([]any)
			if len(a) > 0 {
				name, _ := a[0].(string)
				a[0] = strings.ToUpper(name) // command names are case-insensitive
			}
			if len(a) > 0 && a[0] == "EVALSHA" {
				got <- a
				_, _ = nc.Write([]byte(":1\r\n"))
				continue
			}
			_, _ = nc.Write([]byte("-ERR not here\r\n")) // HELLO, CLIENT SETINFO
		}
	}()
	rdb := goredis.NewClient(&goredis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	defer rdb.Close()
	sha := strings.Repeat("ab", 20)
	keys := []string{"p:{s}:l:r", "p:{s}:t:r"}
	args := []any{"p:{s}:", "", []byte("snap\x00shot"), 7, int64(-42), "caf\u00e9 \r\n"}
	if err := rdb.EvalSha(context.Background(), sha, keys, args...).Err(); err != nil {
		t.Fatal(err)
	}
	want := <-got
	buf, ok := evalShaCommand(sha, keys, args)
	if !ok {
		t.Fatal("evalShaCommand refused the backend's argument types")
	}
	mine, err := readValue(bufio.NewReader(bytes.NewReader(buf)))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%q", mine) != fmt.Sprintf("%q", want) {
		t.Fatalf("evalShaCommand sends\n%q\ngo-redis sends\n%q", mine, want)
	}
	if _, ok := evalShaCommand(sha, keys, []any{1.5}); ok {
		t.Fatal("evalShaCommand encoded a float, which it does not know how go-redis would")
	}
}

// TestSharedConnectionLeavesNoGoroutine: a backend whose shared
// connection carried concurrent scripts, was broken by the server
// (CLIENT KILL) and redialed, leaves no goroutine of its own once closed:
// the reader and the flusher end with it.
func TestSharedConnectionLeavesNoGoroutine(t *testing.T) {
	ctx := testCtx(t)
	srv := redistest.Start(t, redistest.Options{})
	rdb := nodeClient(t, srv)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b, err := NewBackend(rdb, Options{Prefix: freshPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	createAtOnce(t, ctx, b, 32)
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() { _, _ = b.GetWorkflow(ctx, "", fmt.Sprint("w", i)) })
	}
	wg.Wait()
	if st := b.CoalesceStats(); st.Calls == 0 {
		t.Fatalf("CoalesceStats = %+v: nothing went on the shared connection", st)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReadReply pins the RESP2 reader against replies the server sends
// and rejects the malformed ones without hanging.
func TestReadReply(t *testing.T) {
	bad := errMuxBadReply.Error()
	for _, tc := range []struct {
		in      string
		want    any    // the value, compared with reflect.DeepEqual (types included)
		wantErr string // or the error's text
	}{
		{in: ":42\r\n", want: int64(42)},
		{in: "+OK\r\n", want: "OK"},
		{in: "$5\r\nhello\r\n", want: "hello"},
		{in: "$0\r\n\r\n", want: ""},
		{in: "$-1\r\n", wantErr: "redis: nil"},
		{in: "-NOSCRIPT No matching script\r\n", wantErr: "NOSCRIPT No matching script"},
		{in: "*3\r\n:1\r\n$1\r\na\r\n*-1\r\n", want: []any{int64(1), "a", nil}},
		{in: "*0\r\n", want: []any{}},
		{in: ":x\r\n", wantErr: bad},
		{in: "$3\r\nabcd\r\n", wantErr: bad},
		{in: "?1\r\n", wantErr: bad},
		{in: ":1\n", wantErr: bad},
		{in: "$10\r\nabc", wantErr: "unexpected EOF"},
	} {
		v, err := readReply(bufio.NewReader(strings.NewReader(tc.in)))
		switch {
		case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
			t.Errorf("readReply(%q) = %#v, %v; want the error %q", tc.in, v, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || !reflect.DeepEqual(v, tc.want)):
			t.Errorf("readReply(%q) = %#v, %v; want %#v", tc.in, v, err, tc.want)
		}
	}
	var re goredis.Error
	if _, err := readReply(bufio.NewReader(strings.NewReader("-ERR x\r\n"))); !errors.As(err, &re) {
		t.Errorf("an error reply is not a goredis.Error: %T", err)
	}
	if _, err := readReply(bufio.NewReader(strings.NewReader("$-1\r\n"))); !errors.Is(err, goredis.Nil) {
		t.Errorf("a nil reply is not goredis.Nil: %v", err)
	}
}

// TestSharedConnectionOverTLS: a rediss:// Store (a node with a TLS port
// and a self-signed certificate, ca_file and server_name in the DSN)
// sends concurrent scripts on its shared connection, dialed with the
// client's TLS dialer: the TLS port refuses plain TCP, so a create that
// succeeds there went over TLS.
func TestSharedConnectionOverTLS(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writeTestCert(t, dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsPort := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	redistest.Start(t, redistest.Options{Extra: []string{
		"--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no",
	}})
	ctx := testCtx(t)
	dsn := fmt.Sprintf("rediss://127.0.0.1:%d/?prefix=%s&ca_file=%s&server_name=durable-test", tlsPort, freshPrefix(), caFile)
	cfg, err := ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	b, err := dial(ctx, cfg)
	if err != nil {
		t.Fatalf("open over TLS: %v", err)
	}
	defer b.Close()
	createAtOnce(t, ctx, b, 32)
	if st := b.CoalesceStats(); st.Calls == 0 {
		t.Fatalf("CoalesceStats = %+v: no create went on the shared connection", st)
	}
}

// createAtOnce creates workflows w0…w(n-1) from n goroutines at once;
// each must succeed.
func createAtOnce(t *testing.T, ctx context.Context, b *Backend, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = b.CreateWorkflow(ctx, contract.Workflow{ID: fmt.Sprint("w", i), Status: "running"})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
}

// writeTestCert writes a self-signed CA certificate for durable-test and
// 127.0.0.1 and its key into dir; the certificate is its own CA.
func writeTestCert(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "durable-test"},
		DNSNames:              []string{"durable-test"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, certFile, keyFile
}
