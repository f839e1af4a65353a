package durable_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// telemetry is an in-memory OpenTelemetry SDK for tests.
type telemetry struct {
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	tel := &telemetry{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tel.spans))
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() {
		_ = tel.tp.Shutdown(context.Background())
		_ = tel.mp.Shutdown(context.Background())
	})
	return tel
}

func (tel *telemetry) opts() []durable.Option {
	return []durable.Option{durable.WithTracerProvider(tel.tp), durable.WithMeterProvider(tel.mp)}
}

// collect returns the metrics by name.
func (tel *telemetry) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// counterValue returns the sum of a counter's data point with the given
// attribute value, or -1 when there is none.
func counterValue(t *testing.T, m metricdata.Metrics, key attribute.Key, value string) int64 {
	t.Helper()
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: data is %T, want Sum[int64]", m.Name, m.Data)
	}
	for _, dp := range sum.DataPoints {
		if v, ok := dp.Attributes.Value(key); (ok && v.AsString() == value) || (key == "" && value == "") {
			return dp.Value
		}
	}
	return -1
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestObservabilitySpansAndMetrics(t *testing.T) {
	tel := newTelemetry(t)
	ctx := context.Background()
	s, err := memory.Open(memory.Options{}, tel.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// Workflows: a create, a NotFound read, a CAS conflict.
	w, err := s.CreateWorkflow(ctx, durable.Workflow{Scope: "tenant-a", ID: "wf-secret-id"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetWorkflow(ctx, "", "missing"); !errors.Is(err, durable.ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := s.UpdateWorkflow(ctx, durable.Update{Scope: w.Scope, ID: w.ID, ExpectStatus: w.Status, ExpectRevision: w.Revision + 5, Status: durable.StatusRunning}); !errors.Is(err, durable.ErrConflict) {
		t.Fatal(err)
	}
	// Keys: new, in flight, key conflict, completed (replay).
	req := durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k1"}, Fingerprint: "fp"}
	c, err := s.ClaimKey(ctx, req)
	if err != nil || c.Kind != contract.ClaimNew {
		t.Fatal(c, err)
	}
	if c2, err := s.ClaimKey(ctx, req); err != nil || c2.Kind != contract.ClaimInFlight {
		t.Fatal(c2, err)
	}
	bad := req
	bad.Fingerprint = "other"
	if _, err := s.ClaimKey(ctx, bad); !errors.Is(err, durable.ErrKeyConflict) {
		t.Fatal(err)
	}
	if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: req.KeyRef, Token: c.Token, Outcome: durable.Outcome{Code: 200}}); err != nil {
		t.Fatal(err)
	}
	if c3, err := s.ClaimKey(ctx, req); err != nil || c3.Kind != contract.ClaimCompleted {
		t.Fatal(c3, err)
	}
	// Leases: granted, busy, renewed.
	l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "r", Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "r", Owner: "b"}); !errors.Is(err, durable.ErrLeaseBusy) {
		t.Fatal(err)
	}
	if _, err := s.RenewLease(ctx, l, 0); err != nil {
		t.Fatal(err)
	}

	// Spans.
	spans := tel.spans.GetSpans()
	byName := map[string][]tracetest.SpanStub{}
	for _, sp := range spans {
		byName[sp.Name] = append(byName[sp.Name], sp)
		for _, kv := range sp.Attributes {
			if v := kv.Value.Emit(); strings.Contains(v, "tenant-a") || strings.Contains(v, "wf-secret-id") || v == "k1" {
				t.Errorf("span %s attribute %s = %q leaks a scope, key or id", sp.Name, kv.Key, v)
			}
		}
	}
	for name, n := range map[string]int{"durable.CreateWorkflow": 1, "durable.GetWorkflow": 1, "durable.UpdateWorkflow": 1, "durable.ClaimKey": 4, "durable.CompleteKey": 1, "durable.AcquireLease": 2, "durable.RenewLease": 1} {
		if len(byName[name]) != n {
			t.Errorf("%d spans named %s, want %d (all: %d)", len(byName[name]), name, n, len(spans))
		}
	}
	create := attrs(byName["durable.CreateWorkflow"][0].Attributes)
	if create["db.system.name"].AsString() != "memory" || create["db.operation.name"].AsString() != "CreateWorkflow" ||
		create["durable.outcome"].AsString() != "ok" || !create["durable.scoped"].AsBool() {
		t.Errorf("CreateWorkflow span attributes: %v", create)
	}
	if _, ok := create["error.type"]; ok {
		t.Error("successful span has error.type")
	}
	nf := byName["durable.GetWorkflow"][0]
	if a := attrs(nf.Attributes); a["error.type"].AsString() != "not_found" || a["durable.outcome"].AsString() != "not_found" {
		t.Errorf("NotFound span attributes: %v", a)
	}
	if nf.Status.Code != codes.Unset {
		t.Errorf("NotFound span status %v, want Unset (an expected outcome)", nf.Status)
	}
	if a := attrs(byName["durable.UpdateWorkflow"][0].Attributes); a["error.type"].AsString() != "conflict" {
		t.Errorf("conflict span attributes: %v", a)
	}

	// Metrics.
	ms := tel.collect(t)
	dur, ok := ms["durable.operation.duration"]
	if !ok {
		t.Fatalf("no durable.operation.duration; have %v", ms)
	}
	if dur.Unit != "s" {
		t.Errorf("duration unit %q", dur.Unit)
	}
	hist := dur.Data.(metricdata.Histogram[float64])
	var claimOps uint64
	seen := map[string]bool{}
	for _, dp := range hist.DataPoints {
		op, _ := dp.Attributes.Value("db.operation.name")
		out, _ := dp.Attributes.Value("durable.outcome")
		seen[op.AsString()+"/"+out.AsString()] = true
		if op.AsString() == "ClaimKey" {
			claimOps += dp.Count
		}
		if dp.Attributes.Len() > 4 {
			t.Errorf("duration data point with %d attributes: %v", dp.Attributes.Len(), dp.Attributes.ToSlice())
		}
	}
	if claimOps != 4 {
		t.Errorf("ClaimKey durations recorded %d, want 4", claimOps)
	}
	for _, k := range []string{"GetWorkflow/not_found", "UpdateWorkflow/conflict", "ClaimKey/key_conflict", "ClaimKey/ok", "AcquireLease/lease_busy"} {
		if !seen[k] {
			t.Errorf("no duration series %s; have %v", k, seen)
		}
	}
	for result, want := range map[string]int64{"new": 1, "in_flight": 1, "key_conflict": 1, "completed": 1} {
		if got := counterValue(t, ms["durable.claims"], "durable.claim.result", result); got != want {
			t.Errorf("durable.claims{result=%s} = %d, want %d", result, got, want)
		}
	}
	for result, want := range map[string]int64{"granted": 1, "busy": 1, "renewed": 1} {
		if got := counterValue(t, ms["durable.leases"], "durable.lease.result", result); got != want {
			t.Errorf("durable.leases{result=%s} = %d, want %d", result, got, want)
		}
	}
	if got := counterValue(t, ms["durable.cas.conflicts"], "db.system.name", "memory"); got != 1 {
		t.Errorf("durable.cas.conflicts = %d, want 1", got)
	}
}

func TestObservabilityCleanupAndFaults(t *testing.T) {
	tel := newTelemetry(t)
	ctx := context.Background()
	clock := memory.NewManualClock(time.Now())
	s, err := memory.Open(memory.Options{Clock: clock}, tel.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "r", Owner: "a", TTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k"}, Fingerprint: "f", TTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if _, err := s.Cleanup(ctx, durable.CleanupRequest{}); err != nil {
		t.Fatal(err)
	}
	ms := tel.collect(t)
	if got := counterValue(t, ms["durable.cleanup.deletions"], "durable.record.kind", "lease"); got != 1 {
		t.Errorf("cleanup deletions of leases = %d, want 1", got)
	}
	if got := counterValue(t, ms["durable.cleanup.deletions"], "durable.record.kind", "key"); got != 1 {
		t.Errorf("cleanup deletions of keys = %d, want 1", got)
	}

	// A fault (here: a closed backend under the Store) sets status Error.
	var b *memory.Backend
	if !s.As(&b) {
		t.Fatal("no memory backend")
	}
	_ = b.Close()
	_, err = s.GetWorkflow(ctx, "", "x")
	if err == nil {
		t.Fatal("no error from a closed backend")
	}
	spans := tel.spans.GetSpans()
	last := spans[len(spans)-1]
	if last.Name != "durable.GetWorkflow" || last.Status.Code != codes.Error {
		t.Errorf("last span %s status %v, want durable.GetWorkflow with Error (err %v)", last.Name, last.Status, err)
	}
}

func TestObservabilityKeeperLossLogsAndCounts(t *testing.T) {
	tel := newTelemetry(t)
	var logs bytes.Buffer
	ctx := context.Background()
	s, err := memory.Open(memory.Options{}, append(tel.opts(), durable.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.RunWithLease(ctx, durable.LeaseRequest{Resource: "r", Owner: "a", TTL: 2 * time.Second}, durable.LeaseOptions{RenewEvery: 100 * time.Millisecond}, func(ctx context.Context, l durable.Lease) error {
		// Take the lease away: the next renewal is rejected.
		var b *memory.Backend
		s.As(&b)
		if _, err := b.DeleteRecord(ctx, contract.KindLease, "", "r"); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, durable.ErrFenced) {
		t.Fatalf("RunWithLease: %v, want ErrFenced", err)
	}
	if !strings.Contains(logs.String(), "lease lost") {
		t.Errorf("no lease-lost log line: %q", logs.String())
	}
	ms := tel.collect(t)
	if got := counterValue(t, ms["durable.leases"], "durable.lease.result", "lost"); got != 1 {
		t.Errorf("durable.leases{result=lost} = %d, want 1", got)
	}
	if got := counterValue(t, ms["durable.leases"], "durable.lease.result", "fenced"); got != 1 {
		t.Errorf("durable.leases{result=fenced} = %d, want 1", got)
	}
}

// With no provider configured and no SDK installed globally, the Store
// records nothing and starts no span.
func TestObservabilityOffByDefault(t *testing.T) {
	s, err := memory.Open(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = s.GetWorkflow(ctx, "", "missing")
	})
	tel := newTelemetry(t)
	s2, err := memory.Open(memory.Options{}, tel.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	_, _ = s2.GetWorkflow(ctx, "", "missing")
	if len(tel.spans.GetSpans()) != 1 {
		t.Fatal("the instrumented store recorded no span")
	}
	withSDK := testing.AllocsPerRun(100, func() {
		_, _ = s2.GetWorkflow(ctx, "", "missing")
	})
	s3, err := memory.Open(memory.Options{}, durable.WithTracerProvider(tracenoop.NewTracerProvider()),
		durable.WithMeterProvider(metricnoop.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	withNoop := testing.AllocsPerRun(100, func() {
		_, _ = s3.GetWorkflow(ctx, "", "missing")
	})
	// Off costs no allocation: the same as explicit no-op providers, and
	// less than recording does.
	if allocs != withNoop || allocs >= withSDK {
		t.Errorf("allocations per GetWorkflow(NotFound): %v without providers, %v with no-op providers, %v with the SDK", allocs, withNoop, withSDK)
	}
}

// A Store without providers follows the global ones, also when an SDK is
// installed after the Store was created.
func TestObservabilityGlobalProvidersInstalledLater(t *testing.T) {
	s, err := memory.Open(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	_, _ = s.GetWorkflow(ctx, "", "before")
	tel := newTelemetry(t)
	otel.SetTracerProvider(tel.tp)
	otel.SetMeterProvider(tel.mp)
	_, _ = s.GetWorkflow(ctx, "", "after")
	if spans := tel.spans.GetSpans(); len(spans) != 1 || spans[0].Name != "durable.GetWorkflow" {
		t.Errorf("spans after installing a global SDK: %v", spans)
	}
	if _, ok := tel.collect(t)["durable.operation.duration"]; !ok {
		t.Error("no duration recorded after installing a global SDK")
	}
}

// TestObservabilityWaitKeySpan: a wait on a KeyWaiter backend (memory) is
// one durable.WaitKey span, however long it waits.
func TestObservabilityWaitKeySpan(t *testing.T) {
	tel := newTelemetry(t)
	ctx := context.Background()
	s, err := memory.Open(memory.Options{}, tel.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k"}, Fingerprint: "fp"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.WaitKey(ctx, durable.KeyRef{Key: "k"})
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: durable.Outcome{Code: 200}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var waits int
	for _, sp := range tel.spans.GetSpans() {
		if sp.Name == "durable.WaitKey" {
			waits++
			if a := attrs(sp.Attributes); a["durable.outcome"].AsString() != "ok" || a["db.system.name"].AsString() != "memory" {
				t.Errorf("WaitKey span attributes %v", sp.Attributes)
			}
		}
	}
	if waits != 1 {
		t.Errorf("%d durable.WaitKey spans, want 1", waits)
	}
}
