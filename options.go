package durable

import (
	"io"
	"log/slog"
	"time"
)

// Defaults applied by the Store.
const (
	DefaultKeyRetention   = 24 * time.Hour
	DefaultClaimTTL       = time.Minute
	DefaultLeaseTTL       = 30 * time.Second
	DefaultMaxSnapshot    = 1 << 20 // bytes
	DefaultMaxBody        = 1 << 20 // bytes
	DefaultListLimit      = 100
	MaxListLimit          = 1000
	DefaultCleanupLimit   = 1000
	MaxCleanupLimit       = 100000
	MinTTL                = time.Second
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
	claimTTL     time.Duration
	leaseTTL     time.Duration
	maxSnapshot  int
	maxBody      int
	maxHeader    int
	logger       *slog.Logger
	pollMin      time.Duration
	pollMax      time.Duration
	err          error
}

func defaultConfig() config {
	return config{
		keyRetention: DefaultKeyRetention,
		claimTTL:     DefaultClaimTTL,
		leaseTTL:     DefaultLeaseTTL,
		maxSnapshot:  DefaultMaxSnapshot,
		maxBody:      DefaultMaxBody,
		maxHeader:    maxHeaderBytesDefault,
		logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		pollMin:      defaultWaitPollMin,
		pollMax:      defaultWaitPollMax,
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

// WithDefaultTTLs sets the TTL used when a ClaimRequest or LeaseRequest has
// a zero TTL (defaults 1 min and 30 s). Each must be within 1 s – 24 h.
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
