package idempotency_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/middleware/idempotency"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The benchmarks call the handler in process, without a network, so that
// the middleware's own cost is visible: compare FirstExecution and Replay
// with Bare, the same handler without the middleware. See BENCHMARKS.md.

var (
	benchRequest  = []byte(`{"amount":500,"currency":"eur","customer":"cus_42","description":"order 7"}`)
	benchResponse = []byte(`{"id":"pay_1","amount":500,"currency":"eur","status":"succeeded"}`)
)

func benchHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/pay_1")
		w.WriteHeader(http.StatusCreated)
		w.Write(benchResponse)
	})
}

func benchStore(b *testing.B) *durable.Store {
	s, err := memory.Open(memory.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// serve runs h once per iteration with a fresh body, the key that key
// returns for the iteration and a fresh recorder.
func serve(b *testing.B, h http.Handler, key func(i int) string) {
	req := httptest.NewRequest(http.MethodPost, "/payments", nil)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		serveOne(b, h, req, key(i))
		i++
	}
}

func serveOne(b *testing.B, h http.Handler, req *http.Request, key string) {
	req.Body = io.NopCloser(bytes.NewReader(benchRequest))
	req.ContentLength = int64(len(benchRequest))
	req.Header["Idempotency-Key"] = []string{key}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		b.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
}

func uniqueKey(i int) string { return `"bench-` + strconv.Itoa(i) + `"` }
func sameKey(int) string     { return `"bench-replay"` }

func BenchmarkMiddleware(b *testing.B) {
	b.Run("Bare", func(b *testing.B) {
		serve(b, benchHandler(), uniqueKey)
	})
	benchmarkStore(b, benchStore, nil)
}

// benchmarkStore runs a first execution and a replay per iteration, on
// stores that newStore opens. If queries is not nil, it counts the
// statements sent to the database, reported per request.
func benchmarkStore(b *testing.B, newStore func(b *testing.B) *durable.Store, queries *atomic.Int64) {
	run := func(b *testing.B, key func(int) string) {
		mw, err := idempotency.New(newStore(b), idempotency.Options{})
		if err != nil {
			b.Fatal(err)
		}
		h := mw(benchHandler())
		if key(0) == key(1) {
			// Store the response before counting.
			serveOne(b, h, httptest.NewRequest(http.MethodPost, "/payments", nil), key(0))
		}
		if queries != nil {
			queries.Store(0)
		}
		serve(b, h, key)
		if queries != nil {
			b.ReportMetric(float64(queries.Load())/float64(b.N), "queries/op")
		}
	}
	b.Run("FirstExecution", func(b *testing.B) { run(b, uniqueKey) })
	b.Run("Replay", func(b *testing.B) { run(b, sameKey) })
}

// BenchmarkOverhead interleaves calls of the bare handler and of the
// handler behind the middleware (on memory), timing each, so that machine
// noise hits both alike. overhead-ns/op is the difference per request.
//
// FirstExecution's store keeps every key, so it grows by one record per
// request (the heap with it) for the whole run; FirstExecutionSteady's
// holds steadyKeys keys throughout, as a service's store does once its
// oldest keys expire and are cleaned up: before the timed loop it is
// filled, and after each request (untimed) the oldest key is deleted.
func BenchmarkOverhead(b *testing.B) {
	const steadyKeys = 100_000
	for _, c := range []struct {
		name   string
		key    func(int) string
		steady bool
	}{{"FirstExecution", uniqueKey, false}, {"FirstExecutionSteady", uniqueKey, true}, {"Replay", sameKey, false}} {
		b.Run(c.name, func(b *testing.B) {
			store := benchStore(b)
			mw, err := idempotency.New(store, idempotency.Options{})
			if err != nil {
				b.Fatal(err)
			}
			bare, wrapped := benchHandler(), mw(benchHandler())
			reqBare := httptest.NewRequest(http.MethodPost, "/payments", nil)
			reqMW := httptest.NewRequest(http.MethodPost, "/payments", nil)
			serveOne(b, wrapped, reqMW, sameKey(0)) // stores the replayed response
			i := 0
			if c.steady {
				for ; i < steadyKeys; i++ {
					serveOne(b, wrapped, reqMW, c.key(i))
				}
			}
			var tBare, tMW time.Duration
			b.ReportAllocs()
			for b.Loop() {
				key := c.key(i)
				t0 := time.Now()
				serveOne(b, bare, reqBare, key)
				t1 := time.Now()
				serveOne(b, wrapped, reqMW, key)
				tBare += t1.Sub(t0)
				tMW += time.Since(t1)
				if c.steady {
					deleteBenchKey(b, store, c.key(i-steadyKeys))
				}
				i++
			}
			n := float64(b.N)
			b.ReportMetric(float64(tBare.Nanoseconds())/n, "bare-ns/op")
			b.ReportMetric(float64(tMW.Nanoseconds())/n, "mw-ns/op")
			b.ReportMetric(float64((tMW-tBare).Nanoseconds())/n, "overhead-ns/op")
		})
	}
}

// deleteBenchKey deletes the stored record of the Idempotency-Key header
// value key (a quoted string, as uniqueKey makes).
func deleteBenchKey(b *testing.B, s *durable.Store, key string) {
	ok, err := s.DeleteRecord(context.Background(), contract.KindKey, "", idempotency.StoreKey(strings.Trim(key, `"`)))
	if err != nil || !ok {
		b.Fatalf("deleting the key %s: %v, %v", key, ok, err)
	}
}

// BenchmarkStoreCalls measures, for comparison with the FirstExecution
// overhead, the two store calls a first execution makes (ClaimKey and
// CompleteKey of a response like the handler's) on a memory store that
// grows by one key per iteration as the middleware's does: the part of
// the overhead that is the memory backend's, not the middleware's or Do's.
func BenchmarkStoreCalls(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	out := durable.Outcome{Code: http.StatusCreated, Body: benchResponse,
		Header: map[string][]string{"Content-Type": {"application/json"}, "Location": {"/payments/pay_1"}}}
	fp := "sha256:" + strings.Repeat("0", 64) // as long as a default fingerprint
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := durable.KeyRef{Key: idempotency.StoreKey(uniqueKey(i))}
		c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: k, Fingerprint: fp, TTL: durable.DefaultClaimTTL})
		if err != nil || c.Kind != durable.ClaimNew {
			b.Fatal(c.Kind, err)
		}
		if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: k, Token: c.Token, Outcome: out, Retain: durable.DefaultKeyRetention}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkMiddlewarePostgres measures the middleware on the Postgres
// backend (a throwaway local cluster unless DURABLE_TEST_DSN is set) and
// counts its statements: one for a replay, two for a first execution.
func BenchmarkMiddlewarePostgres(b *testing.B) {
	srv := pgtest.Require(b)
	var queries atomic.Int64
	benchmarkStore(b, func(b *testing.B) *durable.Store {
		ctx := context.Background()
		cfg, err := pgxpool.ParseConfig(srv.DSN())
		if err != nil {
			b.Fatal(err)
		}
		cfg.ConnConfig.Tracer = queryCounter{&queries}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		backend, err := postgres.NewBackend(ctx, pool, postgres.Options{Schema: srv.Schema(b)})
		if err != nil {
			b.Fatal(err)
		}
		s, err := durable.New(backend)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}, &queries)
}

// queryCounter counts the statements a pool sends.
type queryCounter struct{ n *atomic.Int64 }

func (c queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
