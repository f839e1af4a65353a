package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

// Harness gives the suite access to one backend's storage. The suite calls
// the harness factory once per test, so every test starts from empty
// storage, and closes the harness when the test ends.
type Harness interface {
	// Open returns a new client on the harness's storage. Every client
	// opened by one harness sees the same records, so the suite can race
	// them against each other and restart them. The suite closes what it
	// opens.
	Open(ctx context.Context) (contract.Backend, error)

	// Advance moves the store clock forward by d for every client of this
	// harness. Only called when Capabilities().Clock is true.
	Advance(d time.Duration)

	// Tolerance is the clock tolerance the backend was configured with.
	Tolerance() time.Duration

	// Capabilities declares optional features; the suite skips, with a
	// message, the scenarios that need a capability the backend lacks.
	Capabilities() Capabilities

	// Close releases the storage (for example drops a test schema).
	Close() error
}

// Capabilities declares what a backend can do beyond the required contract.
type Capabilities struct {
	// Clock: Advance moves the store clock. Without it every scenario that
	// needs time to pass (expiry, takeover, retention) is skipped.
	Clock bool
	// Restart: storage survives Close of every client, so a client opened
	// afterwards sees the same records and token sequence.
	Restart bool
}

// NewHarness creates a harness over fresh, empty storage.
type NewHarness func(ctx context.Context, t *testing.T) (Harness, error)
