package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

// Harness gives the suite access to one backend's storage. The suite calls
// the harness factory once per scenario, so every scenario starts from
// fresh, empty storage of its own (and scenarios run in parallel), and
// closes the harness when the scenario ends.
//
// The clock tolerance is not declared here: the suite reads it from the
// backend's contract.ToleranceReporter, the value the Store itself uses
// (for its minimum TTL and the lease runner), so the two cannot disagree.
type Harness interface {
	// Open returns a new client on the harness's storage. Every client
	// opened by one harness sees the same records, so the suite can race
	// them against each other and restart them. The suite closes what it
	// opens.
	Open(ctx context.Context) (contract.Backend, error)

	// Advance moves the store clock forward by d for every client of this
	// harness. Only called when Capabilities().Clock is true; wire a
	// contract.ManualClock (see [NewManualClock]) into the backend and call
	// its Advance.
	Advance(d time.Duration)

	// Capabilities declares what the harness can do; the suite skips, with
	// a message, the scenarios that need a capability it lacks.
	Capabilities() Capabilities

	// Close releases the storage (for example drops a test schema).
	Close() error
}

// Capabilities declares what a harness can do beyond opening clients.
type Capabilities struct {
	// Clock: Advance moves the store clock of every client. Without it
	// every scenario that needs time to pass (expiry, takeover, retention,
	// renewal arithmetic, cleanup) is skipped, and the suite says so at the
	// top of its output, in each skipped scenario and in its summary.
	Clock bool
	// Restart: storage survives Close of every client, so a client opened
	// afterwards sees the same records and token sequence.
	Restart bool
	// Granularity is the coarsest unit in which the backend stores times
	// and durations (timestamps, TTLs, retention). Zero means the
	// microsecond of a database timestamp: every time the suite computes
	// is a whole number of microseconds and must come back exactly. A
	// backend that keeps, say, whole seconds declares time.Second, and the
	// suite then accepts any stored time within one Granularity of the
	// exact value.
	Granularity time.Duration
}

// NewHarness creates a harness over fresh, empty storage.
type NewHarness func(ctx context.Context, t *testing.T) (Harness, error)

// ClockStart is where [NewManualClock] starts its clock: a fixed instant
// (so failures reproduce) that is not a whole second but is a whole
// microsecond (so a database timestamp holds it exactly).
var ClockStart = time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)

// ManualClock is the store clock a harness gives its backend so that the
// suite can move time: contract.ManualClock, which stands still until
// Advance is called. Pass it to the backend wherever it reads the time (a
// database backend passes its Now as a statement parameter, e.g.
// coalesce($1, now())), and call Advance from Harness.Advance.
//
// Deprecated: use contract.ManualClock; this alias remains for one release.
type ManualClock = contract.ManualClock

// NewManualClock returns a contract.ManualClock stopped at [ClockStart].
func NewManualClock() *contract.ManualClock { return contract.NewManualClock(ClockStart) }
