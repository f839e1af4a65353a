package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/internal/pgtest"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	_ "modernc.org/sqlite"
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
	if store.CanCompleteInTx() {
		t.Fatal("the memory store can complete in a transaction; this test is about the plain path")
	}
	srv := walkthrough(t, store, "memory://", tel, false)
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
	dsn := bouncer.DSN() + "&schema=" + bouncer.Server().Schema(t)
	store, err := durable.Open(t.Context(), dsn, tel.storeOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// Transactional once the Postgres backend can complete keys in the
	// caller's transaction, plain until then: the walkthrough is the same.
	t.Logf("transactional path: %v", store.CanCompleteInTx())
	walkthrough(t, store, dsn, tel, false)
}

// TestWalkthroughClientLibraries runs it on Postgres over lib/pq and over
// pgx's stdlib, whose transactions are *sql.Tx (the pgx.Tx of the default
// client library is TestWalkthroughThroughPgBouncer's).
func TestWalkthroughClientLibraries(t *testing.T) {
	srv := pgtest.Require(t)
	for _, lib := range []string{"pq", "pgx-stdlib"} {
		t.Run(lib, func(t *testing.T) {
			tel, err := newTelemetry(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tel.shutdown(context.Background())
			dsn := srv.DSN() + "&driver=" + lib + "&schema=" + srv.Schema(t)
			store, err := durable.Open(t.Context(), dsn, tel.storeOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			t.Logf("transactional path: %v", store.CanCompleteInTx())
			walkthrough(t, store, dsn, tel, false)
		})
	}
}

// TestWalkthroughSQLite runs it on SQLite, on a file: the transactional
// path. Afterwards the payments table holds exactly the payments created,
// one row each, and GET /stats counts them.
func TestWalkthroughSQLite(t *testing.T) {
	tel, err := newTelemetry(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.shutdown(context.Background())
	path := filepath.Join(t.TempDir(), "httpapi.db")
	store, err := durable.Open(t.Context(), "sqlite://"+path, tel.storeOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if !store.CanCompleteInTx() {
		t.Fatal("the SQLite store cannot complete keys in the caller's transaction")
	}
	srv := walkthrough(t, store, "sqlite://"+path, tel, true)

	type row struct {
		id             int64
		amount         int64
		currency, stat string
	}
	want := []row{{1, 500, "eur", "succeeded"}, {2, 700, "eur", "succeeded"}, {3, 500, "eur", "succeeded"}}
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(t.Context(), `SELECT id, amount, currency, status FROM httpapi_payments ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.amount, &r.currency, &r.stat); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if !slices.Equal(got, want) {
		t.Errorf("httpapi_payments holds %v, want %v", got, want)
	}

	resp, err := srv.Client().Get(srv.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct {
		N int `json:"payments_created"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || s.N != len(want) {
		t.Errorf("GET /stats: %d payments (%v), want %d", s.N, err, len(want))
	}
}

// walkthrough runs the README's walkthrough against the API on store,
// opened with dsn, and returns the test server (still running until t
// ends). writerLock says that the handler's transaction holds the
// database's write lock (SQLite in transactional mode): a retry of a
// request in flight then waits for it and replays its response, where
// other stores answer 409 at once.
func walkthrough(t *testing.T, store *durable.Store, dsn string, tel *telemetry, writerLock bool) *httptest.Server {
	slowEntered, slowRelease := make(chan struct{}, 1), make(chan struct{})
	defer func() {
		select {
		case <-slowRelease:
		default:
			close(slowRelease)
		}
	}()
	h, err := newHandler(t.Context(), store, dsn, slog.New(slog.DiscardHandler), tel, func(ctx context.Context) error {
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
	// busyArrived receives once the retry of the slow request (a POST
	// without ?slow=1 with its key) reaches the server.
	busyArrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && r.URL.RawQuery == "" && r.Header.Get("Idempotency-Key") == `"order-1002"` {
			select {
			case busyArrived <- struct{}{}:
			default:
			}
		}
		h.ServeHTTP(w, r)
	}))
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
	if writerLock {
		// The retry's claim waits for the write lock that the slow
		// request's transaction holds: no answer until that commits,
		// then the replay of its response.
		busyc := make(chan reply, 1)
		go func() {
			busyc <- call("POST", "/payments", `"order-1002"`, `{"amount": 700, "currency": "eur"}`)
		}()
		select {
		case <-busyArrived:
		case <-time.After(10 * time.Second):
			t.Fatal("the retry did not reach the server")
		}
		select {
		case r := <-busyc:
			t.Fatalf("the retry was answered %d while the first request held the write lock", r.status)
		case <-time.After(300 * time.Millisecond):
		}
		close(slowRelease)
		want(<-slow, 201, "", `"id":"pay_2"`)
		want(<-busyc, 201, "true", `"id":"pay_2"`)
	} else {
		busy := call("POST", "/payments", `"order-1002"`, `{"amount": 700, "currency": "eur"}`)
		want(busy, 409, "", `"status":409`)
		if busy.header.Get("Retry-After") != "1" || busy.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("409 headers %v", busy.header)
		}
		close(slowRelease)
		want(<-slow, 201, "", `"id":"pay_2"`)
	}
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
