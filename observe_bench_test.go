package durable_test

import (
	"context"
	"testing"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// discardExporter is a span exporter that drops every span.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkObservability measures the Store's instrumentation on the memory
// backend's fast path (GetWorkflow with a 64 B snapshot, UpdateWorkflow
// with 1 KiB), as in ./backends/memory's BenchmarkGetWorkflow/Single and
// BenchmarkUpdateWorkflow/Single:
//
//   - off: no provider configured and no SDK installed (the default);
//   - noop: the API's no-op providers passed explicitly;
//   - sdk: the OpenTelemetry SDK, every span sampled and handed to an
//     exporter that drops it, metrics aggregated by a reader never read.
func BenchmarkObservability(b *testing.B) {
	setups := []struct {
		name string
		opts func(b *testing.B) []durable.Option
	}{
		{"off", func(*testing.B) []durable.Option { return nil }},
		{"noop", func(*testing.B) []durable.Option {
			return []durable.Option{durable.WithTracerProvider(tracenoop.NewTracerProvider()), durable.WithMeterProvider(metricnoop.NewMeterProvider())}
		}},
		{"sdk", func(b *testing.B) []durable.Option {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSyncer(discardExporter{}))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
			return []durable.Option{durable.WithTracerProvider(tp), durable.WithMeterProvider(mp)}
		}},
	}
	ctx := context.Background()
	for _, st := range setups {
		b.Run("GetWorkflow/"+st.name, func(b *testing.B) {
			s, err := memory.Open(memory.Options{}, st.opts(b)...)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w", Snapshot: make([]byte, 64)}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.GetWorkflow(ctx, "", "w"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("UpdateWorkflow/"+st.name, func(b *testing.B) {
			s, err := memory.Open(memory.Options{}, st.opts(b)...)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			snap := make([]byte, 1024)
			w, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w", Status: durable.StatusRunning})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				w, err = s.UpdateWorkflow(ctx, durable.Update{ID: "w", ExpectStatus: durable.StatusRunning,
					ExpectRevision: w.Revision, Status: durable.StatusRunning, Snapshot: snap})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
