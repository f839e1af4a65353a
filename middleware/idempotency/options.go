package idempotency

import (
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/renewal"
	"go.opentelemetry.io/otel/metric"
)

// Defaults of [Options]. The claim TTL and the retention default to the
// Store's (durable.WithDefaultTTLs, durable.WithKeyRetention).
const (
	DefaultHeader         = "Idempotency-Key"
	DefaultRetryAfter     = time.Second
	DefaultMaxBody        = 1 << 20 // bytes; the Store's default limit
	DefaultMaxRequestBody = 1 << 20 // bytes
	DefaultStoreTimeout   = 10 * time.Second
)

// DefaultMethods are the methods the middleware applies to by default.
var DefaultMethods = []string{http.MethodPost, http.MethodPatch}

// DefaultStoreHeaders are the response headers stored and replayed by
// default: those that describe the representation or the created resource.
// Headers about the connection or this particular response (Date,
// Set-Cookie, request ids, rate limits) are not replayed.
var DefaultStoreHeaders = []string{
	"Cache-Control",
	"Content-Disposition",
	"Content-Encoding",
	"Content-Language",
	"Content-Location",
	"Content-Type",
	"ETag",
	"Expires",
	"Last-Modified",
	"Link",
	"Location",
	"Vary",
}

// DefaultStoreStatus reports whether a response with the given status is
// stored for replay: every status except 408 Request Timeout, 429 Too Many
// Requests and the 5xx server errors. Those say the request was not (or
// not fully) processed, so the claim is released and a retry runs the
// handler again.
func DefaultStoreStatus(code int) bool {
	return code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests
}

// Options configures the middleware. The zero value is usable: every zero
// field means its default.
type Options struct {
	// Header is the request header that carries the key
	// (default "Idempotency-Key").
	Header string
	// Required makes a request without a key fail with 400. By default such
	// a request passes through to the handler unprotected.
	Required bool
	// Methods the middleware applies to (nil means POST and PATCH). Requests
	// with other methods pass through untouched, key or not.
	Methods []string
	// Scope returns the tenant a request belongs to (default: "" for every
	// request). Keys of one scope never replay in another. Derive scopes
	// with durable.TenantScope; an invalid scope fails the request with 500.
	Scope func(r *http.Request) durable.Scope
	// Fingerprint identifies the request a key was first used with; a key
	// reused with another fingerprint gets 422. body is the complete
	// request body. The default is [DefaultFingerprint] (method, path and
	// body). Any string will do: one that is not 1-256 bytes of visible
	// ASCII is stored as its SHA-256.
	Fingerprint func(r *http.Request, body []byte) string
	// ClaimTTL is how long a claim stays live without renewal (default:
	// the Store's default claim TTL, durable.WithDefaultTTLs, 1 min unless
	// set there). It must be at least the Store's minimum
	// (durable.Store.MinTTL: its clock tolerance plus 1 s). A request that
	// finds a claim expired longer than the store's clock tolerance ago
	// takes it over and runs the handler.
	ClaimTTL time.Duration
	// RenewEvery is how often the claim is renewed while the handler runs
	// (default ClaimTTL/3). It must be shorter than ClaimTTL minus the
	// store's clock tolerance.
	RenewEvery time.Duration
	// Retention is how long a response is kept for replay (default: the
	// Store's key retention, durable.WithKeyRetention, 24 h unless set
	// there).
	Retention time.Duration
	// WaitInFlight is how long a request waits for the original request with
	// the same key to finish, then replays its response. The default, 0,
	// answers 409 Conflict at once; a request still in flight after the wait
	// also gets 409.
	WaitInFlight time.Duration
	// RetryAfter is sent in the Retry-After header of 409 and 503 responses,
	// rounded up to whole seconds (default 1 s).
	RetryAfter time.Duration
	// StoreHeaders lists the response headers stored and replayed (default
	// [DefaultStoreHeaders]). A non-nil empty slice stores none.
	StoreHeaders []string
	// StoreStatus reports whether a response with a status is stored for
	// replay, or the claim released so that a retry runs the handler again
	// (default [DefaultStoreStatus]: everything but 408, 429 and 5xx).
	StoreStatus func(code int) bool
	// MaxBody is the largest response body stored (default: 1 MiB or the
	// Store's limit, whichever is smaller). New rejects a value above the
	// Store's limit (durable.WithMaxBodyBytes). A larger
	// response is streamed to the client, not stored, and its claim is
	// released, so a retry runs the handler again; this is logged.
	MaxBody int
	// MaxRequestBody is the largest request body accepted for
	// fingerprinting (default 1 MiB); a larger one gets 413. Requests
	// without a key are not limited.
	MaxRequestBody int64
	// StoreTimeout bounds each phase in which a request waits for the store
	// (default 10 s): claiming the key (with WaitInFlight, the claims and
	// the wait together take at most WaitInFlight plus StoreTimeout), and,
	// after the handler returned, storing its response (retries included)
	// or releasing the claim. A request context usually has no deadline,
	// so this is what keeps a hung store from hanging requests: when it
	// passes, the request gets 503 with Retry-After. The handler itself is
	// not bounded.
	StoreTimeout time.Duration
	// FailOpen makes requests run the handler unprotected when the store is
	// unavailable. By default they fail with 503 (fail closed). It cannot
	// be combined with Transactional.
	FailOpen bool
	// Transactional makes the middleware store each response in the same
	// transaction as the handler's effects: it begins a transaction on the
	// store's database (durable.Store.BeginTx) and puts it in the request
	// context, where the handler finds it with [Tx] (or [TxFrom]) and
	// writes its effects through it; then the middleware stores the
	// recorded response in that transaction (CompleteKeyTx), commits, and
	// only then sends the response. Effects and stored response commit
	// together or not at all, so a handler never runs twice for one key
	// even when the process dies between its effect and the storing of
	// the response. See "Transactional mode" in the package documentation.
	//
	// It needs a backend with transactions the caller can share
	// (PostgreSQL, SQLite, Redis: contract.TxCompleter); New fails with an error
	// of Code Unimplemented on others (memory, etcd).
	Transactional bool
	// Logger receives warnings about responses that could not be stored and
	// store failures (default: discard). Entries never contain keys or
	// request data.
	Logger *slog.Logger
	// MeterProvider receives the durable.idempotency.responses counter
	// (default: the global provider, otel.GetMeterProvider). The Store's
	// own metrics are configured on the Store (durable.WithMeterProvider).
	MeterProvider metric.MeterProvider
}

// config is Options with defaults applied and checked.
type config struct {
	store         *durable.Store
	header        string
	required      bool
	methods       []string
	scope         func(*http.Request) durable.Scope
	fingerprint   func(*http.Request, []byte) string
	ttl           time.Duration
	do            durable.DoOptions
	retryAfter    string
	storeHeaders  []string
	storeSet      map[string]bool // storeHeaders as a set
	storeStatus   func(int) bool
	maxBody       int
	maxReqBody    int64
	failOpen      bool
	transactional bool
	log           *slog.Logger
	metrics       *responseMetrics
}

func invalidOption(msg string) error {
	return &contract.Error{Code: contract.InvalidArgument, Op: "idempotency.New", Msg: msg}
}

func newConfig(store *durable.Store, o Options) (*config, error) {
	if store == nil {
		return nil, invalidOption("store must not be nil")
	}
	c := &config{
		store: store, header: o.Header, required: o.Required, methods: o.Methods,
		scope: o.Scope, fingerprint: o.Fingerprint, ttl: o.ClaimTTL,
		storeStatus: o.StoreStatus, maxBody: o.MaxBody, maxReqBody: o.MaxRequestBody,
		failOpen: o.FailOpen, transactional: o.Transactional, log: o.Logger,
	}
	if c.transactional {
		if c.failOpen {
			return nil, invalidOption("FailOpen cannot be combined with Transactional: the handler's transaction comes from the store")
		}
		if !store.CanCompleteInTx() {
			return nil, &contract.Error{Code: contract.Unimplemented, Op: "idempotency.New",
				Msg: "Transactional needs a store whose backend can complete keys in the caller's transaction (contract.TxCompleter: PostgreSQL, SQLite, Redis); this one cannot (memory, etcd): leave Transactional off there"}
		}
	}
	if c.header == "" {
		c.header = DefaultHeader
	}
	if !validToken(c.header) {
		return nil, invalidOption("header must be a valid header name")
	}
	c.header = http.CanonicalHeaderKey(c.header)
	if c.methods == nil {
		c.methods = DefaultMethods
	}
	for _, m := range c.methods {
		if !validToken(m) {
			return nil, invalidOption("methods must be valid method names")
		}
	}
	c.methods = append([]string(nil), c.methods...)
	if c.scope == nil {
		c.scope = func(*http.Request) durable.Scope { return "" }
	}
	if c.fingerprint == nil {
		c.fingerprint = DefaultFingerprint
	}
	if c.ttl == 0 {
		c.ttl, _ = store.DefaultTTLs()
	}
	if c.ttl < store.MinTTL() || c.ttl > durable.MaxTTL {
		return nil, invalidOption("claim TTL (ClaimTTL, or the store's default claim TTL) must be within the store's minimum (" + store.MinTTL().String() + ": its clock tolerance plus 1s) and 24h")
	}
	every, ok := renewal.Period(c.ttl, o.RenewEvery, store.ClockTolerance())
	if !ok {
		return nil, invalidOption("renew period must be positive and shorter than the claim TTL minus the clock tolerance")
	}
	c.do.RenewEvery = every
	// A zero Retain is the Store's key retention (see durable.DoOptions).
	c.do.Retain = o.Retention
	if c.do.Retain < 0 {
		return nil, invalidOption("retention must be positive")
	}
	st := o.StoreTimeout
	if st == 0 {
		st = DefaultStoreTimeout
	}
	if st < 0 {
		return nil, invalidOption("store timeout must not be negative")
	}
	c.do.CallTimeout, c.do.CompleteWithin = st, st
	switch {
	case o.WaitInFlight < 0:
		return nil, invalidOption("wait for in-flight requests must not be negative")
	case o.WaitInFlight > 0:
		c.do.Wait, c.do.MaxWait = true, o.WaitInFlight
	}
	ra := o.RetryAfter
	if ra == 0 {
		ra = DefaultRetryAfter
	}
	if ra < 0 {
		return nil, invalidOption("retry after must not be negative")
	}
	c.retryAfter = strconv.FormatInt(int64((ra+time.Second-1)/time.Second), 10)
	if o.StoreHeaders == nil {
		o.StoreHeaders = DefaultStoreHeaders
	}
	for _, h := range o.StoreHeaders {
		if !validToken(h) {
			return nil, invalidOption("stored headers must be valid header names")
		}
		c.storeHeaders = append(c.storeHeaders, http.CanonicalHeaderKey(h))
	}
	c.storeSet = make(map[string]bool, len(c.storeHeaders))
	for _, h := range c.storeHeaders {
		c.storeSet[h] = true
	}
	if c.storeStatus == nil {
		c.storeStatus = DefaultStoreStatus
	}
	if c.maxBody == 0 {
		c.maxBody = min(DefaultMaxBody, store.MaxBodyBytes())
	}
	if c.maxReqBody == 0 {
		c.maxReqBody = DefaultMaxRequestBody
	}
	if c.maxBody < 0 || c.maxReqBody < 0 {
		return nil, invalidOption("body limits must be positive")
	}
	if c.maxBody > store.MaxBodyBytes() {
		return nil, invalidOption("MaxBody exceeds the Store's body limit (durable.WithMaxBodyBytes)")
	}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c.metrics = newResponseMetrics(o.MeterProvider)
	return c, nil
}

func (c *config) applies(method string) bool {
	for _, m := range c.methods {
		if m == method {
			return true
		}
	}
	return false
}
