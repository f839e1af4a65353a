package durable

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/contract"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Instrumentable is an optional capability of a backend that logs and
// records metrics of its own (reconnections, retries). The Store calls
// Instrument once, when it is created ([New], and so [Open]), with its
// logger ([WithLogger]) and meter provider ([WithMeterProvider], default
// the global one). Instrument must be safe to call while the backend is in
// use. Only the OpenTelemetry metric API is involved: a backend never needs
// the SDK. It lives here, not in package contract, because package contract
// imports only the standard library.
type Instrumentable interface {
	Instrument(logger *slog.Logger, mp metric.MeterProvider)
}

// InstrumentationName is the instrumentation scope of the Store's tracer
// and meter.
const InstrumentationName = "github.com/durable-go/durable"

// Attribute keys of the Store's spans and metrics. Values are bounded: an
// operation name, a backend name, a code or a result kind; never a scope,
// key, id or payload.
const (
	attrSystem   = attribute.Key("db.system.name")    // "postgresql", "memory", or the registry scheme
	attrOp       = attribute.Key("db.operation.name") // "ClaimKey", …
	attrErrType  = attribute.Key("error.type")        // the durable error code on failure, e.g. "not_found"
	attrOutcome  = attribute.Key("durable.outcome")   // "ok" or the error code
	attrScoped   = attribute.Key("durable.scoped")    // the record has a non-empty scope (spans only)
	attrClaim    = attribute.Key("durable.claim.result")
	attrLease    = attribute.Key("durable.lease.result")
	attrKind     = attribute.Key("durable.record.kind")
	outcomeOK    = "ok"
	maxCodeSlots = 32
)

// WithTracerProvider sets the OpenTelemetry tracer provider of the Store's
// spans (default: the global provider, otel.GetTracerProvider, looked up
// when the Store is first used).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp == nil {
			c.fail("tracer provider must not be nil")
			return
		}
		c.tp = tp
	}
}

// WithMeterProvider sets the OpenTelemetry meter provider of the Store's
// metrics, also handed to a backend that implements [Instrumentable]
// (default: the global provider, otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.fail("meter provider must not be nil")
			return
		}
		c.mp = mp
	}
}

// The global tracer provider as it was before any SDK was installed: while
// otel.GetTracerProvider still returns it, spans would be dropped, so the
// Store starts none.
// The same holds for metrics.
var (
	defaultGlobalTP        = otel.GetTracerProvider()
	defaultGlobalTPIsNoSDK = strings.HasSuffix(reflect.TypeOf(defaultGlobalTP).String(), "global.tracerProvider")
	defaultGlobalMP        = otel.GetMeterProvider()
	defaultGlobalMPIsNoSDK = strings.HasSuffix(reflect.TypeOf(defaultGlobalMP).String(), "global.meterProvider")
)

// observer is a Store's instrumentation: its tracer, its instruments and
// the attribute sets it records with, computed once so that the hot path
// allocates nothing for them.
type observer struct {
	once   sync.Once
	scheme string // the registry scheme, set by Open before first use

	system     string
	tp         trace.TracerProvider // the configured provider; nil for the global
	tracer     trace.Tracer
	tracerOff  bool                 // the configured provider is a no-op
	mp         metric.MeterProvider // the configured provider; nil for the global
	meterOff   bool                 // the configured provider is a no-op
	duration   metric.Float64Histogram
	claims     metric.Int64Counter
	leases     metric.Int64Counter
	cas        metric.Int64Counter
	deletions  metric.Int64Counter
	ops        sync.Map // op name → *opObs
	claimOpts  map[string][]metric.AddOption
	leaseOpts  map[string][]metric.AddOption
	kindOpts   [4][]metric.AddOption // workflow, key, lease, outcome
	casOpts    []metric.AddOption
	systemAttr attribute.KeyValue
	log        *slog.Logger
}

// opObs holds what one operation records with.
type opObs struct {
	span      string
	startOpts []trace.SpanStartOption
	outcomes  [maxCodeSlots + 1]atomic.Pointer[[]metric.RecordOption] // 0: ok; 1+code
}

// obs returns the Store's observer, set up on first use: it looks up the
// providers, creates the instruments and hands the logger and meter
// provider to a backend that implements Instrumentable.
func (s *Store) obs() *observer {
	o := s.cfg.obs
	o.once.Do(func() { o.init(s) })
	return o
}

func (o *observer) init(s *Store) {
	o.log = s.cfg.logger
	o.system = backendSystem(s.b, o.scheme)
	o.systemAttr = attrSystem.String(o.system)
	o.tp = s.cfg.tp
	tp := o.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	_, o.tracerOff = tp.(tracenoop.TracerProvider)
	o.tracer = tp.Tracer(InstrumentationName)
	o.mp = s.cfg.mp
	mp := o.mp
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	_, o.meterOff = mp.(metricnoop.MeterProvider)
	m := mp.Meter(InstrumentationName)
	// Instrument creation fails only on invalid names; the API then returns
	// a working no-op instrument.
	o.duration, _ = m.Float64Histogram("durable.operation.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Duration of the Store's backend operations."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	o.claims, _ = m.Int64Counter("durable.claims", metric.WithUnit("{claim}"),
		metric.WithDescription("Results of claiming, renewing and completing idempotency keys, by durable.claim.result."))
	o.leases, _ = m.Int64Counter("durable.leases", metric.WithUnit("{lease}"),
		metric.WithDescription("Results of acquiring, renewing and keeping leases, by durable.lease.result."))
	o.cas, _ = m.Int64Counter("durable.cas.conflicts", metric.WithUnit("{conflict}"),
		metric.WithDescription("Workflow updates rejected because the expected status or revision did not match."))
	o.deletions, _ = m.Int64Counter("durable.cleanup.deletions", metric.WithUnit("{record}"),
		metric.WithDescription("Records deleted by Cleanup, by durable.record.kind (outcome: a completed key's outcome dropped, leaving its tombstone)."))
	o.claimOpts = map[string][]metric.AddOption{}
	for _, r := range []string{"new", "reclaimed", "in_flight", "completed", "key_conflict", "outcome_expired", "fenced", "lost"} {
		o.claimOpts[r] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(o.systemAttr, attrClaim.String(r)))}
	}
	o.leaseOpts = map[string][]metric.AddOption{}
	for _, r := range []string{"granted", "busy", "renewed", "fenced", "lost"} {
		o.leaseOpts[r] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(o.systemAttr, attrLease.String(r)))}
	}
	o.casOpts = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(o.systemAttr))}
	for i, k := range []string{"workflow", "key", "lease", "outcome"} {
		o.kindOpts[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(o.systemAttr, attrKind.String(k)))}
	}
	if in, ok := s.b.(Instrumentable); ok {
		in.Instrument(s.cfg.logger, mp)
	}
}

// backendSystem names the backend for db.system.name: its SystemName
// capability, else the registry scheme it was opened with, else "unknown".
func backendSystem(b contract.Backend, scheme string) string {
	if n, ok := b.(contract.SystemNamer); ok {
		if name := n.SystemName(); name != "" {
			return name
		}
	}
	if scheme != "" {
		return scheme
	}
	return "unknown"
}

// tracing reports whether spans would be recorded by anyone: not when the
// provider is a no-op, nor while the global provider has no SDK behind it.
func (o *observer) tracing() bool {
	if o.tracerOff {
		return false
	}
	if o.tp == nil && defaultGlobalTPIsNoSDK {
		return otel.GetTracerProvider() != defaultGlobalTP
	}
	return true
}

// metering reports whether measurements would be recorded by anyone, as
// tracing does for spans.
func (o *observer) metering() bool {
	if o.meterOff {
		return false
	}
	if o.mp == nil && defaultGlobalMPIsNoSDK {
		return otel.GetMeterProvider() != defaultGlobalMP
	}
	return true
}

// op returns the operation's cached attributes.
func (o *observer) op(name string) *opObs {
	if v, ok := o.ops.Load(name); ok {
		return v.(*opObs)
	}
	oo := &opObs{
		span: "durable." + name,
		startOpts: []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(o.systemAttr, attrOp.String(name)),
		},
	}
	v, _ := o.ops.LoadOrStore(name, oo)
	return v.(*opObs)
}

// codeName is a Code as an attribute value: "not found" → "not_found".
func codeName(c contract.Code) string { return strings.ReplaceAll(c.String(), " ", "_") }

// recordOpts returns the attribute options of op's duration for an
// outcome (code 0 with ok: success).
func (o *observer) recordOpts(op string, oo *opObs, ok bool, code contract.Code) []metric.RecordOption {
	i := 0
	if !ok {
		i = 1 + min(max(int(code), 0), maxCodeSlots-1)
	}
	if p := oo.outcomes[i].Load(); p != nil {
		return *p
	}
	attrs := []attribute.KeyValue{o.systemAttr, attrOp.String(op), attrOutcome.String(outcomeOK)}
	if !ok {
		name := codeName(code)
		attrs[2] = attrOutcome.String(name)
		attrs = append(attrs, attrErrType.String(name))
	}
	opts := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrs...))}
	oo.outcomes[i].Store(&opts)
	return opts
}

// isFault reports whether a failure is an error on the span (status Error)
// rather than an expected outcome that the caller handles: not found,
// already exists, conflict, terminal, key conflict, lease busy, fenced, in
// flight, outcome expired and canceled leave the status unset (error.type
// still says which).
func isFault(c contract.Code) bool {
	switch c {
	case contract.NotFound, contract.AlreadyExists, contract.Conflict, contract.Terminal,
		contract.KeyConflict, contract.LeaseBusy, contract.Fenced, contract.InFlight, contract.OutcomeExpired, contract.Canceled:
		return false
	}
	return true
}

// call is one instrumented backend call in progress.
type call struct {
	oo      *opObs
	span    trace.Span // nil: not recording
	t0      time.Time
	timed   bool // the duration is recorded
	metered bool // a meter provider with an SDK is configured
}

// start begins the instrumentation of one backend call. With no SDK
// behind either provider it does nothing but two atomic loads.
func (o *observer) start(ctx context.Context, op string) (context.Context, call) {
	tracing, metered := o.tracing(), o.metering()
	if !tracing && !metered {
		return ctx, call{}
	}
	c := call{oo: o.op(op), metered: metered}
	if tracing {
		ctx, c.span = o.tracer.Start(ctx, c.oo.span, c.oo.startOpts...)
		if !c.span.IsRecording() {
			c.span.End()
			c.span = nil
		}
	}
	if metered && o.duration.Enabled(ctx) {
		c.timed, c.t0 = true, time.Now()
	}
	return ctx, c
}

// endObs records one backend call's outcome; out points to its result. It
// boxes the result only for the operations and spans that look into it.
func endObs[T any](o *observer, ctx context.Context, op string, c *call, out *T, err error) {
	if c.oo == nil {
		return
	}
	code := contract.CodeOf(err)
	ok := err == nil
	if c.timed {
		o.duration.Record(ctx, time.Since(c.t0).Seconds(), o.recordOpts(op, c.oo, ok, code)...)
	}
	if c.metered {
		switch op {
		case "ClaimKey", "Cleanup":
			o.count(ctx, op, any(*out), ok, code)
		case "CompleteKey", "CompleteKeyTx", "RenewKey", "AcquireLease", "RenewLease", "UpdateWorkflow":
			o.count(ctx, op, nil, ok, code)
		}
	}
	span := c.span
	if span == nil {
		return
	}
	if ok {
		span.SetAttributes(attrOutcome.String(outcomeOK))
	} else {
		name := codeName(code)
		span.SetAttributes(attrOutcome.String(name), attrErrType.String(name))
		if isFault(code) {
			span.SetStatus(codes.Error, name)
		}
	}
	if scoped, known := scopeOf(any(*out), ok); known {
		span.SetAttributes(attrScoped.Bool(scoped))
	}
	span.End()
}

// count adds to the result counters of the operations that have them.
func (o *observer) count(ctx context.Context, op string, out any, ok bool, code contract.Code) {
	switch op {
	case "ClaimKey":
		if !o.claims.Enabled(ctx) {
			return
		}
		switch {
		case ok:
			if c, isClaim := out.(Claim); isClaim {
				o.claim(ctx, claimResult(c.Kind))
			}
		case code == contract.KeyConflict:
			o.claim(ctx, "key_conflict")
		case code == contract.OutcomeExpired:
			o.claim(ctx, "outcome_expired")
		}
	case "CompleteKey", "CompleteKeyTx", "RenewKey":
		if !ok && code == contract.Fenced {
			o.claim(ctx, "fenced")
		}
	case "AcquireLease":
		switch {
		case ok:
			o.lease(ctx, "granted")
		case code == contract.LeaseBusy:
			o.lease(ctx, "busy")
		}
	case "RenewLease":
		switch {
		case ok:
			o.lease(ctx, "renewed")
		case code == contract.Fenced:
			o.lease(ctx, "fenced")
		}
	case "UpdateWorkflow":
		switch {
		case !ok && code == contract.Conflict:
			if o.cas.Enabled(ctx) {
				o.cas.Add(ctx, 1, o.casOpts...)
			}
		case !ok && code == contract.Fenced:
			o.lease(ctx, "fenced")
		}
	case "Cleanup":
		if r, isResult := out.(CleanupResult); ok && isResult && o.deletions.Enabled(ctx) {
			for i, n := range [4]int{r.Workflows, r.Keys, r.Leases, r.Outcomes} {
				if n > 0 {
					o.deletions.Add(ctx, int64(n), o.kindOpts[i]...)
				}
			}
		}
	}
}

func (o *observer) claim(ctx context.Context, result string) {
	if o.claims.Enabled(ctx) {
		o.claims.Add(ctx, 1, o.claimOpts[result]...)
	}
}

func (o *observer) lease(ctx context.Context, result string) {
	if o.leases.Enabled(ctx) {
		o.leases.Add(ctx, 1, o.leaseOpts[result]...)
	}
}

// lost records a claim or lease that a keeper could no longer prove held.
func (o *observer) lost(what string) {
	ctx := context.Background()
	if what == "lease" {
		o.lease(ctx, "lost")
	} else {
		o.claim(ctx, "lost")
	}
}

func claimResult(k contract.ClaimKind) string {
	switch k {
	case contract.ClaimNew:
		return "new"
	case contract.ClaimReclaimed:
		return "reclaimed"
	case contract.ClaimInFlight:
		return "in_flight"
	case contract.ClaimCompleted:
		return "completed"
	}
	return "unknown"
}

// scopeOf reports whether a result's record has a scope, when the result
// says.
func scopeOf(out any, ok bool) (scoped, known bool) {
	if !ok {
		return false, false
	}
	switch v := out.(type) {
	case Workflow:
		return v.Scope != "", true
	case []Workflow:
		if len(v) > 0 {
			return v[0].Scope != "", true
		}
	case Claim:
		return v.Record.Scope != "", true
	case KeyRecord:
		return v.Scope != "", true
	case Lease:
		return v.Scope != "", true
	}
	return false, false
}
