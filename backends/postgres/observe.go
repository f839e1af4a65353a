package postgres

import (
	"context"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// instrumentationName is the instrumentation scope of the backend's meter.
const instrumentationName = "github.com/durable-go/durable/backends/postgres"

// telemetry is what the backend logs and counts with: the logger of
// Options.Logger or the Store's (durable.Instrumentable), and the
// backend's own instruments.
type telemetry struct {
	log         *slog.Logger
	disconnects metric.Int64Counter // durable.postgres.listen.disconnects
	retries     metric.Int64Counter // durable.postgres.retries
	retryOpts   map[string][]metric.AddOption
}

var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

func newTelemetry(log *slog.Logger, mp metric.MeterProvider) *telemetry {
	if log == nil {
		log = discardLogger
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	t := &telemetry{log: log, retryOpts: map[string][]metric.AddOption{}}
	// Creation fails only on invalid names; the API then returns a
	// working no-op instrument.
	t.disconnects, _ = m.Int64Counter("durable.postgres.listen.disconnects", metric.WithUnit("{disconnect}"),
		metric.WithDescription("LISTEN connections (WaitKey's notifications) lost after they were established."))
	t.retries, _ = m.Int64Counter("durable.postgres.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Statements run again after a serialization failure, a deadlock or a failure before sending, by durable.retry.reason."))
	for _, r := range []string{"serialization_failure", "deadlock", "not_sent"} {
		t.retryOpts[r] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("durable.retry.reason", r)))}
	}
	return t
}

// Instrument implements durable.Instrumentable: the Store hands over its
// logger and meter provider. Options.Logger, when set, keeps precedence.
func (b *Backend) Instrument(logger *slog.Logger, mp metric.MeterProvider) {
	if b.ownLogger || logger == nil {
		logger = b.tele.Load().log
	}
	b.tele.Store(newTelemetry(logger, mp))
}

// SystemName implements contract.SystemNamer (db.system.name).
func (*Backend) SystemName() string { return "postgresql" }

// retried records one statement run again.
func (b *Backend) retried(ctx context.Context, err error, attempt int) {
	t := b.tele.Load()
	reason := "not_sent"
	if c, ok := sqlState(err); ok {
		switch c {
		case "40001":
			reason = "serialization_failure"
		case "40P01":
			reason = "deadlock"
		}
	}
	t.log.Debug("durable/postgres: retrying a statement", "reason", reason, "attempt", attempt+1)
	if t.retries.Enabled(ctx) {
		t.retries.Add(ctx, 1, t.retryOpts[reason]...)
	}
}
