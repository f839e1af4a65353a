package idempotency_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/middleware/idempotency"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestResponseMetrics(t *testing.T) {
	store, err := memory.Open(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	mw, err := idempotency.New(store, idempotency.Options{Required: true, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	}))
	do := func(path, key, body string) int {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Idempotency-Key", `"`+key+`"`)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if c := do("/", "a", "x"); c != 201 {
		t.Fatal(c)
	}
	if c := do("/", "a", "x"); c != 201 { // replayed
		t.Fatal(c)
	}
	if c := do("/", "a", "other body"); c != 422 {
		t.Fatal(c)
	}
	if c := do("/", "", "x"); c != 400 {
		t.Fatal(c)
	}
	done := make(chan int)
	go func() { done <- do("/slow", "b", "x") }()
	<-entered
	if c := do("/slow", "b", "x"); c != 409 {
		t.Fatal(c)
	}
	close(release)
	<-done

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "durable.idempotency.responses" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value("durable.response.class")
				got[v.AsString()] = dp.Value
			}
		}
	}
	want := map[string]int64{"executed": 2, "replayed": 1, "422": 1, "400": 1, "409": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("responses{class=%s} = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}
