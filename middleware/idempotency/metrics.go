package idempotency

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// responseClasses are the values of durable.response.class: the handler
// ran ("executed"), a stored response was replayed ("replayed"), the store
// was unavailable and the handler ran unprotected ("fail_open"), or the
// middleware answered itself with the status shown ("400", "409", "410",
// "413", "422", "500", "503").
var responseClasses = []string{"executed", "replayed", "fail_open", "400", "409", "410", "413", "422", "500", "503"}

// responseMetrics counts the middleware's responses by class.
type responseMetrics struct {
	responses metric.Int64Counter
	opts      map[string][]metric.AddOption
}

func newResponseMetrics(mp metric.MeterProvider) *responseMetrics {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter("github.com/durable-go/durable/middleware/idempotency")
	rm := &responseMetrics{opts: map[string][]metric.AddOption{}}
	// Creation fails only on invalid names; the API then returns a working
	// no-op instrument.
	rm.responses, _ = m.Int64Counter("durable.idempotency.responses", metric.WithUnit("{response}"),
		metric.WithDescription("Requests with an idempotency key, by durable.response.class."))
	for _, c := range responseClasses {
		rm.opts[c] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("durable.response.class", c)))}
	}
	return rm
}

// count adds one response of class.
func (c *config) count(r *http.Request, class string) {
	ctx := r.Context()
	if c.metrics.responses.Enabled(ctx) {
		opts, ok := c.metrics.opts[class]
		if !ok {
			opts = []metric.AddOption{metric.WithAttributes(attribute.String("durable.response.class", class))}
		}
		c.metrics.responses.Add(ctx, 1, opts...)
	}
}

// reject counts and writes a problem response of the middleware's own.
func (c *config) reject(r *http.Request, w http.ResponseWriter, p *problem, retryAfter string) {
	c.count(r, strconv.Itoa(p.status))
	writeProblem(w, p, retryAfter)
}
