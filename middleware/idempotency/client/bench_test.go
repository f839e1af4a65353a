package client_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/middleware/idempotency"
	"github.com/durable-go/durable/middleware/idempotency/client"
)

const benchBody = `{"amount":500,"currency":"eur","customer":"cus_0123456789","note":"bench"}`

// benchServer is a loopback server: the payment handler, bare or behind
// the middleware on a memory store.
func benchServer(b *testing.B, middleware bool) *httptest.Server {
	b.Helper()
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/pay_1")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"pay_1","amount":500,"currency":"eur","status":"succeeded"}`)
	})
	if middleware {
		store, err := durable.New(memory.NewStorage(memory.Options{}).Backend())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { store.Close() })
		mw, err := idempotency.New(store, idempotency.Options{Required: true})
		if err != nil {
			b.Fatal(err)
		}
		h = mw(h)
	}
	s := httptest.NewServer(h)
	b.Cleanup(s.Close)
	return s
}

func benchPost(b *testing.B, rt http.RoundTripper, url, key string) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(benchBody))
	if key != "" {
		req.Header["Idempotency-Key"] = []string{key}
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

// BenchmarkTransportOverhead sends the same POST over loopback with a bare
// http.Transport (the key set by hand) and through client.Transport over
// that http.Transport (the key generated), alternately in one loop, timing
// each, so that machine noise hits both alike. overhead-ns/op is the
// difference per request: the kit's cost with no faults (cloning the
// request, generating and quoting the key, the attempt's timer and
// context, reading the body ahead).
func BenchmarkTransportOverhead(b *testing.B) {
	for _, c := range []struct {
		name       string
		middleware bool
	}{{"PlainHandler", false}, {"Middleware", true}} {
		b.Run(c.name, func(b *testing.B) {
			s := benchServer(b, c.middleware)
			bare := &http.Transport{MaxIdleConnsPerHost: 4}
			b.Cleanup(bare.CloseIdleConnections)
			kit := &client.Transport{Base: bare}
			url := s.URL + "/payments"
			var tBare, tKit time.Duration
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				// The bare request carries a key too (a new one each time,
				// as the kit's), so the server does the same work.
				key := `"bench-` + strconv.Itoa(i) + `"`
				t0 := time.Now()
				benchPost(b, bare, url, key)
				t1 := time.Now()
				benchPost(b, kit, url, "")
				tBare += t1.Sub(t0)
				tKit += time.Since(t1)
				i++
			}
			n := float64(b.N)
			b.ReportMetric(float64(tBare.Nanoseconds())/n, "bare-ns/op")
			b.ReportMetric(float64(tKit.Nanoseconds())/n, "kit-ns/op")
			b.ReportMetric(float64((tKit-tBare).Nanoseconds())/n, "overhead-ns/op")
		})
	}
}

// BenchmarkTransport measures each side alone, for their allocations.
func BenchmarkTransport(b *testing.B) {
	s := benchServer(b, false)
	bare := &http.Transport{MaxIdleConnsPerHost: 4}
	b.Cleanup(bare.CloseIdleConnections)
	url := s.URL + "/payments"
	b.Run("Bare", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			benchPost(b, bare, url, `"bench-`+strconv.Itoa(i)+`"`)
			i++
		}
	})
	b.Run("Kit", func(b *testing.B) {
		kit := &client.Transport{Base: bare}
		b.ReportAllocs()
		for b.Loop() {
			benchPost(b, kit, url, "")
		}
	})
}
