package durable

import (
	"io"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Defaults applied by the Store.
const (
	DefaultKeyRetention = 24 * time.Hour
	// DefaultTombstoneRetention is how long a completed key stays bound to
	// its request when a Completion does not say (see
	// WithTombstoneRetention): 7 days. Past the key retention only a
	// tombstone is kept, and a late retry gets ErrOutcomeExpired instead of
	// a second run.
	DefaultTombstoneRetention = 7 * 24 * time.Hour
	DefaultClaimTTL           = time.Minute
	DefaultLeaseTTL           = 30 * time.Second
	DefaultMaxSnapshot        = 1 << 20 // bytes
	DefaultMaxBody            = 1 << 20 // bytes
	DefaultListLimit          = 100
	MaxListLimit              = 1000
	DefaultCleanupLimit       = 1000
	MaxCleanupLimit           = 100000
	// TTLMargin is how far a claim or lease TTL must exceed the backend's
	// clock tolerance: [Store.MinTTL] is the tolerance plus TTLMargin. It
	// is also the smallest TTL any Store accepts (on a backend without
	// clock tolerance).
	TTLMargin = time.Second
	// DefaultOperationTimeout bounds every backend call whose context has
	// no earlier deadline (see WithOperationTimeout).
	DefaultOperationTimeout = 10 * time.Second
	// DefaultMaxWait bounds WaitKey when its context has no deadline (see
	// WithMaxWait).
	DefaultMaxWait        = time.Minute
	MaxTTL                = 24 * time.Hour
	defaultWaitPollMin    = 5 * time.Millisecond
	defaultWaitPollMax    = 500 * time.Millisecond
	maxIdentifierLength   = 128
	maxFingerprintLength  = 256
	maxRefLength          = 1024
	maxHeaderBytesDefault = 64 << 10
)

// An Option configures a Store.
type Option func(*config)

type config struct {
	keyRetention time.Duration
	tombstone    time.Duration
	claimTTL     time.Duration
	leaseTTL     time.Duration
	maxSnapshot  int
	maxBody      int
	maxHeader    int
	logger       *slog.Logger
	pollMin      time.Duration
	pollMax      time.Duration
	opTimeout    time.Duration
	maxWait      time.Duration
	tp           trace.TracerProvider // nil: the global provider
	mp           metric.MeterProvider // nil: the global provider
	obs          *observer            // the Store's instrumentation, set up on first use
	open         openOptions          // what Open hands the driver (WithMigrateMode)
	err          error
}

func defaultConfig() config {
	return config{
		keyRetention: DefaultKeyRetention,
		tombstone:    DefaultTombstoneRetention,
		claimTTL:     DefaultClaimTTL,
		leaseTTL:     DefaultLeaseTTL,
		maxSnapshot:  DefaultMaxSnapshot,
		maxBody:      DefaultMaxBody,
		maxHeader:    maxHeaderBytesDefault,
		logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		pollMin:      defaultWaitPollMin,
		pollMax:      defaultWaitPollMax,
		opTimeout:    DefaultOperationTimeout,
		maxWait:      DefaultMaxWait,
		obs:          &observer{},
	}
}

func (c *config) fail(msg string) {
	if c.err == nil {
		c.err = invalid("New", msg)
	}
}

// WithKeyRetention sets how long a completed key's outcome is kept when a
// Completion does not say (default 24 h). It must be positive.
func WithKeyRetention(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("key retention must be positive")
			return
		}
		c.keyRetention = d
	}
}

// WithTombstoneRetention sets how long a completed key stays bound to its
// request when a Completion does not say (Completion.Tombstone 0; default
// [DefaultTombstoneRetention], 7 days). It must be positive.
//
// The key's outcome is kept for the key retention ([WithKeyRetention],
// Completion.Retain); from then until CompletedAt plus the tombstone
// retention only a tombstone is kept (key, fingerprint, workflow id,
// completion time and status code): a retry of the same request gets
// [ErrOutcomeExpired] (the middleware answers 410 Gone) instead of running
// a second time, and another request with the key still gets
// ErrKeyConflict. Afterwards the key is free. The tombstone never ends
// before the outcome's retention: a tombstone retention shorter than the
// key retention is in effect raised to it, per completion (ForgetAt =
// CompletedAt + max(Retain, Tombstone)), whatever the order of the
// options. So passing a duration no longer than the key retention turns
// tombstones off: keys are forgotten when their outcome is, as before
// tombstones existed.
func WithTombstoneRetention(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("tombstone retention must be positive")
			return
		}
		c.tombstone = d
	}
}

// WithDefaultTTLs sets the TTL used when a ClaimRequest or LeaseRequest has
// a zero TTL (defaults 1 min and 30 s). Each must be within 1 s – 24 h,
// and, to be usable, at least [Store.MinTTL] (1 s plus the backend's clock
// tolerance): a request that falls back on a shorter default fails with
// ErrInvalidArgument.
func WithDefaultTTLs(claim, lease time.Duration) Option {
	return func(c *config) {
		if !ttlInRange(claim) || !ttlInRange(lease) {
			c.fail("default TTLs must be within 1s and 24h")
			return
		}
		c.claimTTL, c.leaseTTL = claim, lease
	}
}

// WithMaxSnapshotBytes sets the largest workflow snapshot accepted
// (default 1 MiB).
func WithMaxSnapshotBytes(n int) Option {
	return func(c *config) {
		if n <= 0 {
			c.fail("max snapshot bytes must be positive")
			return
		}
		c.maxSnapshot = n
	}
}

// WithMaxBodyBytes sets the largest outcome body accepted (default 1 MiB).
func WithMaxBodyBytes(n int) Option {
	return func(c *config) {
		if n <= 0 {
			c.fail("max body bytes must be positive")
			return
		}
		c.maxBody = n
	}
}

// WithLogger sets the logger for background events such as failed renewals
// (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.fail("logger must not be nil")
			return
		}
		c.logger = l
	}
}

// WithWaitPolling sets the backoff bounds of WaitKey when the backend has no
// KeyWaiter capability (defaults 5 ms and 500 ms).
func WithWaitPolling(min, max time.Duration) Option {
	return func(c *config) {
		if min <= 0 || max < min {
			c.fail("wait polling bounds must satisfy 0 < min <= max")
			return
		}
		c.pollMin, c.pollMax = min, max
	}
}

// WithOperationTimeout bounds how long one backend call may take when the
// caller's context has no earlier deadline (default 10 s), so that a hung
// connection or server never hangs a caller. It must be positive. A call
// cut short by this bound fails with ErrUnavailable when the request
// certainly never reached the backend and ErrOutcomeUnknown when it may
// have; both wrap context.DeadlineExceeded. Raise it for large Cleanup
// batches; WaitKey has its own bound (WithMaxWait).
func WithOperationTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("operation timeout must be positive")
			return
		}
		c.opTimeout = d
	}
}

// WithMaxWait bounds how long WaitKey waits when its context has no
// deadline (default 1 min). It must be positive. When the bound passes
// while the key is still claimed, WaitKey returns ErrInFlight: the
// key is still in flight.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("max wait must be positive")
			return
		}
		c.maxWait = d
	}
}

// withScheme records the registry scheme a Store was opened with, for
// db.system.name (Open adds it).
func withScheme(scheme string) Option {
	return func(c *config) { c.obs.scheme = scheme }
}
