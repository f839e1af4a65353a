package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/internal/pgtest"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

type reply struct {
	status int
	header http.Header
	body   string
}

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestWalkthrough runs the README's curl walkthrough against the API.
//
// Its telemetry goes to an in-memory span exporter and to the Prometheus
// exporter; the test then checks the spans of a first request, a replay and
// a 409, and the metric series GET /metrics shows for them.
func TestWalkthrough(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tel, err := newTelemetry(spans)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.shutdown(context.Background())
	store, err := memory.Open(memory.Options{}, tel.storeOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := walkthrough(t, store, tel)
	checkTelemetry(t, spans.GetSpans(), srv)
}

// TestWalkthroughThroughPgBouncer runs it on Postgres behind PgBouncer in
// transaction mode, with the DSN a new user writes (the store migrates its
// schema through the pooler and detects it).
func TestWalkthroughThroughPgBouncer(t *testing.T) {
	bouncer := pgtest.RequireBouncer(t)
	tel, err := newTelemetry(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.shutdown(context.Background())
	store, err := durable.Open(t.Context(), bouncer.DSN()+"&schema="+bouncer.Server().Schema(t), tel.storeOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	walkthrough(t, store, tel)
}

// walkthrough runs the README's walkthrough against the API on store and
// returns the test server (still running until t ends).
func walkthrough(t *testing.T, store *durable.Store, tel *telemetry) *httptest.Server {
	slowEntered, slowRelease := make(chan struct{}, 1), make(chan struct{})
	defer func() {
		select {
		case <-slowRelease:
		default:
			close(slowRelease)
		}
	}()
	h, err := newHandler(store, slog.New(slog.DiscardHandler), tel, func(ctx context.Context) error {
		slowEntered <- struct{}{}
		select {
		case <-slowRelease:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	call := func(method, path, key, body string, account ...string) reply {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		req.Header.Set("Content-Type", "application/json")
		if len(account) > 0 {
			req.Header.Set("X-Account", account[0])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return reply{resp.StatusCode, resp.Header, string(b)}
	}
	want := func(r reply, status int, replayed string, body string) {
		t.Helper()
		if r.status != status || r.header.Get("Idempotent-Replayed") != replayed || !strings.Contains(r.body, body) {
			t.Fatalf("got %d (replayed %q) %s; want %d (replayed %q) containing %s",
				r.status, r.header.Get("Idempotent-Replayed"), r.body, status, replayed, body)
		}
	}
	created := func() int {
		t.Helper()
		var s struct {
			N int `json:"payments_created"`
		}
		if err := json.Unmarshal([]byte(call("GET", "/stats", "", "").body), &s); err != nil {
			t.Fatal(err)
		}
		return s.N
	}

	// 1. The first request creates a payment.
	first := call("POST", "/payments", `"order-1001"`, `{"amount": 500, "currency": "eur"}`)
	want(first, 201, "", `"id":"pay_1"`)
	if first.header.Get("Location") != "/payments/pay_1" {
		t.Fatalf("Location %q", first.header.Get("Location"))
	}
	// 2. A retry replays it byte for byte; no second payment.
	retry := call("POST", "/payments", `"order-1001"`, `{"amount": 500, "currency": "eur"}`)
	want(retry, 201, "true", `"id":"pay_1"`)
	if retry.body != first.body || retry.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("replay %q differs from %q", retry.body, first.body)
	}
	if n := created(); n != 1 {
		t.Fatalf("%d payments created, want 1", n)
	}
	// 3. A retry while the first is still running: 409 with Retry-After.
	slow := make(chan reply, 1)
	go func() {
		slow <- call("POST", "/payments?slow=1", `"order-1002"`, `{"amount": 700, "currency": "eur"}`)
	}()
	select {
	case <-slowEntered:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow request did not start")
	}
	busy := call("POST", "/payments", `"order-1002"`, `{"amount": 700, "currency": "eur"}`)
	want(busy, 409, "", `"status":409`)
	if busy.header.Get("Retry-After") != "1" || busy.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("409 headers %v", busy.header)
	}
	close(slowRelease)
	want(<-slow, 201, "", `"id":"pay_2"`)
	want(call("POST", "/payments", `"order-1002"`, `{"amount": 700, "currency": "eur"}`), 201, "true", `"id":"pay_2"`)
	// 4. The same key with another body: 422.
	want(call("POST", "/payments", `"order-1001"`, `{"amount": 9900, "currency": "eur"}`), 422, "", `"status":422`)
	// A payment without a key: 400.
	want(call("POST", "/payments", "", `{"amount": 500, "currency": "eur"}`), 400, "", `"status":400`)
	if n := created(); n != 2 {
		t.Fatalf("%d payments created, want 2", n)
	}
	// Another account's key does not replay.
	want(call("POST", "/payments", `"order-1001"`, `{"amount": 500, "currency": "eur"}`, "acme"), 201, "", `"id":"pay_3"`)
	want(call("POST", "/payments", `"order-1001"`, `{"amount": 500, "currency": "eur"}`, "acme"), 201, "true", `"id":"pay_3"`)
	want(call("GET", "/payments/pay_2", "", ""), 200, "", `"amount":700`)
	return srv
}
