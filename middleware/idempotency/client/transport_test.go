package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/durable-go/durable/middleware/idempotency/client"
)

// seen is one request the scripted server received.
type seen struct {
	method, key, body string
}

// reply is one scripted answer; a nil reply (past the script's end) is 201.
type reply func(w http.ResponseWriter, r *http.Request)

// scripted is an httptest server that answers its requests with the
// script's replies in order, then 201 "done".
type scripted struct {
	*httptest.Server
	mu     sync.Mutex
	script []reply
	got    []seen
}

func newScripted(t *testing.T, script ...reply) *scripted {
	t.Helper()
	s := &scripted{script: script}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.got)
		s.got = append(s.got, seen{r.Method, r.Header.Get("Idempotency-Key"), string(b)})
		var f reply
		if n < len(s.script) {
			f = s.script[n]
		}
		s.mu.Unlock()
		if f == nil {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "done")
			return
		}
		f(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *scripted) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.got...)
}

func status(code int, headers ...string) reply {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(code)
		io.WriteString(w, http.StatusText(code))
	}
}

func inFlightProblem(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Retry-After", "0")
	w.WriteHeader(http.StatusConflict)
	io.WriteString(w, `{"type":"`+client.InFlightType+`","title":"Idempotency key in flight","status":409}`)
}

// hangUp closes the connection without answering (the request arrived).
func hangUp(w http.ResponseWriter, r *http.Request) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		c.Close()
	}
}

// resetConn aborts the connection with a TCP RST.
func resetConn(w http.ResponseWriter, r *http.Request) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
}

// cutBody sends the headers and part of the body, then closes.
func cutBody(w http.ResponseWriter, r *http.Request) {
	c, buf, err := http.NewResponseController(w).Hijack()
	if err == nil {
		buf.WriteString("HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\npartial")
		buf.Flush()
		c.Close()
	}
}

// fast is a Transport with short waits.
func fast() *client.Transport {
	return &client.Transport{MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, MaxRetryAfter: time.Millisecond}
}

func post(t *testing.T, tr http.RoundTripper, url, body string) (*http.Response, string, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp, string(b), nil
}

func result(t *testing.T, resp *http.Response) client.Result {
	t.Helper()
	r, ok := client.ResultOf(resp)
	if !ok {
		t.Fatal("ResultOf: no result")
	}
	return r
}

// wantOneKey checks that n requests arrived, all with the same key.
func wantOneKey(t *testing.T, got []seen, n int, body string) string {
	t.Helper()
	if len(got) != n {
		t.Fatalf("server got %d requests, want %d: %+v", len(got), n, got)
	}
	for _, g := range got {
		if g.key != got[0].key || g.key == "" || g.body != body {
			t.Fatalf("requests %+v: want one key and body %q", got, body)
		}
	}
	return got[0].key
}

func TestAddsAKeyAndRetriesWithIt(t *testing.T) {
	cases := map[string][]reply{
		"503 Retry-After seconds": {status(503, "Retry-After", "1")},
		"503 Retry-After date":    {status(503, "Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))},
		"429":                     {status(429, "Retry-After", "2")},
		"409 in flight":           {inFlightProblem, inFlightProblem},
		"500, 502, 504":           {status(500), status(502), status(504)},
		"connection closed":       {hangUp},
		"connection reset":        {resetConn},
		"cut mid-body":            {cutBody, cutBody},
		"mixed":                   {hangUp, status(503), inFlightProblem, cutBody},
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			s := newScripted(t, script...)
			resp, body, err := post(t, fast(), s.URL, "pay 5")
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 201 || body != "done" {
				t.Fatalf("got %d %q", resp.StatusCode, body)
			}
			key := wantOneKey(t, s.requests(), len(script)+1, "pay 5")
			r := result(t, resp)
			if r.Attempts != len(script)+1 || r.Replayed || `"`+r.Key+`"` != key || len(r.Key) != 32 {
				t.Fatalf("result %+v, key header %s", r, key)
			}
		})
	}
}

func TestNeverRetriesOtherAnswers(t *testing.T) {
	otherConflict := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"type":"about:blank","title":"Conflict","status":409}`)
	}
	for _, code := range []int{200, 201, 204, 303, 400, 401, 403, 404, 408, 410, 413, 422, 501, 505} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			s := newScripted(t, status(code))
			resp, _, err := post(t, fast(), s.URL, "x")
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != code || result(t, resp).Attempts != 1 || len(s.requests()) != 1 {
				t.Fatalf("status %d, result %+v, %d requests", resp.StatusCode, result(t, resp), len(s.requests()))
			}
		})
	}
	t.Run("a handler's own 409", func(t *testing.T) {
		s := newScripted(t, otherConflict)
		resp, body, err := post(t, fast(), s.URL, "x")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 409 || !strings.Contains(body, "about:blank") || len(s.requests()) != 1 {
			t.Fatalf("status %d %q after %d requests", resp.StatusCode, body, len(s.requests()))
		}
	})
	t.Run("409 json, not a problem", func(t *testing.T) {
		s := newScripted(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"type":"`+client.InFlightType+`"}`)
		})
		resp, _, err := post(t, fast(), s.URL, "x")
		if err != nil || resp.StatusCode != 409 || len(s.requests()) != 1 {
			t.Fatalf("%v %v after %d requests", resp, err, len(s.requests()))
		}
	})
}

func TestSafeMethodsPassThrough(t *testing.T) {
	s := newScripted(t, status(503), status(503))
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete} {
		req, _ := http.NewRequest(m, s.URL, nil)
		resp, err := fast().RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if _, ok := client.ResultOf(resp); ok {
			t.Fatalf("%s: managed", m)
		}
	}
	for _, g := range s.requests() {
		if g.key != "" {
			t.Fatalf("%s got a key", g.method)
		}
	}
	if n := len(s.requests()); n != 5 {
		t.Fatalf("%d requests for 5 unmanaged ones", n)
	}

	// Configured, GET is managed; with its own key, PUT is too.
	s = newScripted(t, status(503))
	tr := fast()
	tr.Methods = []string{http.MethodGet}
	req, _ := http.NewRequest(http.MethodGet, s.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if result(t, resp).Attempts != 2 {
		t.Fatalf("GET configured: %+v", result(t, resp))
	}
	s = newScripted(t, status(503))
	req, _ = http.NewRequest(http.MethodPut, s.URL, strings.NewReader("v"))
	req.Header.Set("Idempotency-Key", `"mine"`)
	resp, err = fast().RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if r := result(t, resp); r.Attempts != 2 || r.Key != "mine" {
		t.Fatalf("PUT with a key: %+v", r)
	}
	wantOneKey(t, s.requests(), 2, "v")
}

func TestKeys(t *testing.T) {
	s := newScripted(t, status(503))
	tr := fast()
	var calls atomic.Int32
	tr.Key = func(r *http.Request) string { calls.Add(1); return `order "7"` }
	tr.Header = "X-Idem"
	req, _ := http.NewRequest(http.MethodPost, s.URL, strings.NewReader("b"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if r := result(t, resp); r.Key != `order "7"` || r.Attempts != 2 || calls.Load() != 1 {
		t.Fatalf("result %+v, Key called %d times", r, calls.Load())
	}
	if len(req.Header) != 0 {
		t.Fatalf("the caller's request was modified: %v", req.Header)
	}

	// The caller's key is kept as it is.
	s2 := newScripted(t)
	req, _ = http.NewRequest(http.MethodPost, s2.URL, strings.NewReader("b"))
	req.Header.Set("Idempotency-Key", "plain-key")
	resp, err = fast().RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if r := result(t, resp); r.Key != "plain-key" || s2.requests()[0].key != "plain-key" {
		t.Fatalf("result %+v, sent %q", r, s2.requests()[0].key)
	}

	// Random keys differ.
	keys := map[string]bool{}
	for range 20 {
		resp, _, err := post(t, fast(), s2.URL, "b")
		if err != nil {
			t.Fatal(err)
		}
		keys[result(t, resp).Key] = true
	}
	if len(keys) != 20 {
		t.Fatalf("%d distinct keys of 20", len(keys))
	}

	// A bad key from Key is refused before sending.
	tr.Key = func(*http.Request) string { return "naïve" }
	n := len(s.requests())
	if _, _, err := post(t, tr, s.URL, "b"); err == nil || strings.Contains(err.Error(), "naïve") {
		t.Fatalf("a non-ASCII key: %v", err)
	}
	if len(s.requests()) != n {
		t.Fatal("a request with a bad key was sent")
	}
}

func TestBodies(t *testing.T) {
	t.Run("rewound for every attempt", func(t *testing.T) {
		s := newScripted(t, status(500), hangUp, status(503))
		req, _ := http.NewRequest(http.MethodPost, s.URL, bytes.NewReader([]byte("the body")))
		resp, err := fast().RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		wantOneKey(t, s.requests(), 4, "the body")
	})
	t.Run("not rewindable: refused before sending", func(t *testing.T) {
		s := newScripted(t)
		body := &closeTracker{Reader: strings.NewReader("once")}
		req, _ := http.NewRequest(http.MethodPost, s.URL, body)
		_, err := fast().RoundTrip(req)
		var e *client.Error
		if !errors.Is(err, client.ErrBodyNotRewindable) || !errors.As(err, &e) || e.Key == "" || e.Attempts != 0 {
			t.Fatalf("err %v", err)
		}
		if len(s.requests()) != 0 || !body.closed.Load() {
			t.Fatalf("%d requests sent, body closed %v", len(s.requests()), body.closed.Load())
		}
	})
	t.Run("not rewindable: buffered when allowed", func(t *testing.T) {
		s := newScripted(t, status(502))
		tr := fast()
		tr.BufferBody = 4
		req, _ := http.NewRequest(http.MethodPost, s.URL, io.NopCloser(strings.NewReader("once")))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		wantOneKey(t, s.requests(), 2, "once")
		if req.GetBody != nil {
			t.Fatal("the caller's request was modified")
		}
		req, _ = http.NewRequest(http.MethodPost, s.URL, io.NopCloser(strings.NewReader("twice")))
		if _, err := tr.RoundTrip(req); !errors.Is(err, client.ErrBodyNotRewindable) {
			t.Fatalf("a body over BufferBody: %v", err)
		}
	})
	t.Run("no body", func(t *testing.T) {
		s := newScripted(t, status(503))
		req, _ := http.NewRequest(http.MethodPost, s.URL, nil)
		resp, err := fast().RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		wantOneKey(t, s.requests(), 2, "")
	})
}

type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeTracker) Close() error { c.closed.Store(true); return nil }

// tracking wraps a RoundTripper and records the bodies it returned.
type tracking struct {
	base   http.RoundTripper
	mu     sync.Mutex
	bodies []*closeTracker
}

func (tr *tracking) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := tr.base.RoundTrip(r)
	if err == nil {
		orig := resp.Body
		b := &closeTracker{Reader: orig}
		tr.mu.Lock()
		tr.bodies = append(tr.bodies, b)
		tr.mu.Unlock()
		resp.Body = struct {
			io.Reader
			io.Closer
		}{b, closerFunc(func() error { b.Close(); return orig.Close() })}
	}
	return resp, err
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func TestDiscardedBodiesAreClosed(t *testing.T) {
	s := newScripted(t, status(503), inFlightProblem, status(500))
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tk := &tracking{base: base}
	tr := fast()
	tr.Base = tk
	req, _ := http.NewRequest(http.MethodPost, s.URL, strings.NewReader("x"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "done" || len(tk.bodies) != 4 {
		t.Fatalf("%q after %d responses", b, len(tk.bodies))
	}
	for i, tb := range tk.bodies {
		if !tb.closed.Load() {
			t.Fatalf("response body %d not closed", i)
		}
	}
}

func TestGivingUp(t *testing.T) {
	t.Run("attempts: the last answer", func(t *testing.T) {
		s := newScripted(t, status(503), status(503), status(503))
		tr := fast()
		tr.MaxAttempts = 3
		resp, body, err := post(t, tr, s.URL, "x")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 503 || body != "Service Unavailable" || result(t, resp).Attempts != 3 || len(s.requests()) != 3 {
			t.Fatalf("%d %q %+v", resp.StatusCode, body, result(t, resp))
		}
	})
	t.Run("Retry-After beyond the budget: the answer at once", func(t *testing.T) {
		s := newScripted(t, status(503, "Retry-After", "3600"))
		tr := &client.Transport{Budget: time.Minute, MaxRetryAfter: time.Hour}
		resp, _, err := post(t, tr, s.URL, "x")
		if err != nil || resp.StatusCode != 503 || result(t, resp).Attempts != 1 {
			t.Fatalf("%v %v", resp, err)
		}
	})
	t.Run("attempts: the last error, with the key", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens: connections are refused
		tr := fast()
		tr.MaxAttempts = 3
		tr.Key = func(*http.Request) string { return "secret-key" }
		_, _, err = post(t, tr, "http://"+addr, "x")
		var e *client.Error
		if !errors.As(err, &e) || e.Attempts != 3 || e.Key != "secret-key" || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("err %v", err)
		}
		if strings.Contains(err.Error(), "secret-key") {
			t.Fatalf("the error contains the key: %v", err)
		}
	})
	t.Run("budget", func(t *testing.T) {
		block := make(chan struct{})
		defer close(block)
		s := newScripted(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-block:
			case <-r.Context().Done():
			}
		})
		tr := &client.Transport{Budget: 100 * time.Millisecond, MinBackoff: time.Millisecond}
		_, _, err := post(t, tr, s.URL, "x")
		var e *client.Error
		if !errors.Is(err, client.ErrBudgetExhausted) || !errors.As(err, &e) || e.Attempts != 1 {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("the caller's context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		s := newScripted(t, func(w http.ResponseWriter, r *http.Request) {
			cancel()
			<-r.Context().Done()
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, strings.NewReader("x"))
		_, err := fast().RoundTrip(req)
		if !errors.Is(err, context.Canceled) || len(s.requests()) != 1 {
			t.Fatalf("err %v after %d requests", err, len(s.requests()))
		}
	})
}

func TestAttemptTimeout(t *testing.T) {
	first := make(chan struct{})
	var once sync.Once
	s := newScripted(t, func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(first) })
		<-r.Context().Done() // hangs until the client gives up on it
	})
	tr := fast()
	tr.AttemptTimeout = 50 * time.Millisecond
	resp, body, err := post(t, tr, s.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	if body != "done" || result(t, resp).Attempts != 2 {
		t.Fatalf("%q %+v", body, result(t, resp))
	}
}

func TestReplayReported(t *testing.T) {
	s := newScripted(t, hangUp, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(201)
		io.WriteString(w, "stored")
	})
	resp, body, err := post(t, fast(), s.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	if r := result(t, resp); !r.Replayed || r.Attempts != 2 || body != "stored" {
		t.Fatalf("%+v %q", r, body)
	}
}

func TestLongBodyStreams(t *testing.T) {
	long := strings.Repeat("z", 100<<10)
	s := newScripted(t, status(503), func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		io.WriteString(w, long)
	})
	tr := fast()
	tr.MaxResponseBuffer = 1 << 10
	resp, body, err := post(t, tr, s.URL, "x")
	if err != nil || body != long || result(t, resp).Attempts != 2 {
		t.Fatalf("%v, %d bytes", err, len(body))
	}
	tr.MaxResponseBuffer = -1
	resp, body, err = post(t, tr, s.URL, "x")
	if err != nil || body != "done" {
		t.Fatalf("%v %q", err, body)
	}
}

func TestRequestWithoutHeaderMap(t *testing.T) {
	s := newScripted(t, status(503))
	req, _ := http.NewRequest(http.MethodPost, s.URL, strings.NewReader("x"))
	req.Header = nil
	resp, err := fast().RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	wantOneKey(t, s.requests(), 2, "x")
	if req.Header != nil {
		t.Fatal("the caller's request was modified")
	}
}
