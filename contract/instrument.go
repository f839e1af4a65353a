package contract

import (
	"log/slog"

	"go.opentelemetry.io/otel/metric"
)

// Instrumentable is a backend that logs and records metrics of its own
// (reconnections, retries). The Store calls Instrument once, when it is
// created (durable.New, and so durable.Open), with its logger (durable.WithLogger) and meter
// provider (durable.WithMeterProvider, default the global one). Instrument
// must be safe to call while the backend is in use. Only the OpenTelemetry
// metric API is involved: a backend never needs the SDK.
type Instrumentable interface {
	Instrument(logger *slog.Logger, mp metric.MeterProvider)
}

// SystemNamer is a backend that names its storage system for telemetry:
// the db.system.name attribute of the Store's spans and metrics, such as
// "postgresql" or "memory". Without it the Store uses the registry scheme
// the backend was opened with, or "unknown".
type SystemNamer interface {
	SystemName() string
}
