package main

import (
	"context"
	"io"
	"net/http"

	"github.com/durable-go/durable"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/multierr"
)

// telemetry is the API's OpenTelemetry setup: an SDK tracer provider (spans
// go to the exporter given, if any) and an SDK meter provider read by the
// Prometheus exporter, served as GET /metrics. The same providers reach
// otelhttp (HTTP server spans and metrics), the Store (durable.* spans and
// metrics) and the idempotency middleware (its response counter), so one
// request's spans form one trace.
type telemetry struct {
	tp      *sdktrace.TracerProvider
	mp      *sdkmetric.MeterProvider
	metrics http.Handler // Prometheus text format
}

// newTelemetry sets the providers up. exporter receives finished spans
// synchronously; nil records none.
func newTelemetry(exporter sdktrace.SpanExporter) (*telemetry, error) {
	reg := prometheus.NewRegistry()
	prom, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	var tpOpts []sdktrace.TracerProviderOption
	if exporter != nil {
		tpOpts = append(tpOpts, sdktrace.WithSyncer(exporter))
	}
	return &telemetry{
		tp:      sdktrace.NewTracerProvider(tpOpts...),
		mp:      sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom)),
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

// stdoutSpans returns an exporter that prints spans as JSON to w.
func stdoutSpans(w io.Writer) (sdktrace.SpanExporter, error) {
	return stdouttrace.New(stdouttrace.WithWriter(w))
}

// storeOptions are the Store's options for these providers.
func (t *telemetry) storeOptions() []durable.Option {
	return []durable.Option{durable.WithTracerProvider(t.tp), durable.WithMeterProvider(t.mp)}
}

// wrap instruments mux with otelhttp, naming each server span after the
// route pattern it matches ("POST /payments", "GET /payments/{id}"): the
// path itself would put payment ids into span names.
func (t *telemetry) wrap(mux *http.ServeMux) http.Handler {
	return otelhttp.NewHandler(mux, "httpapi",
		otelhttp.WithTracerProvider(t.tp),
		otelhttp.WithMeterProvider(t.mp),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if _, pattern := mux.Handler(r); pattern != "" {
				return pattern
			}
			return r.Method
		}))
}

// shutdown flushes and stops both providers.
func (t *telemetry) shutdown(ctx context.Context) error {
	return multierr.Combine(t.tp.Shutdown(ctx), t.mp.Shutdown(ctx))
}
