package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
)

// harness runs the suite on one in-process memory store per scenario, with
// a clock the suite moves. A database backend's harness would create a
// fresh schema in newHarness, open clients on it in Open and drop it in
// Close.
type harness struct {
	clock   *contract.ManualClock
	storage *memory.Storage
}

func newHarness(ctx context.Context, t *testing.T) (conformance.Harness, error) {
	clock := conformance.NewManualClock()
	return &harness{
		clock:   clock,
		storage: memory.NewStorage(memory.Options{Clock: clock, Tolerance: 2 * time.Second}),
	}, nil
}

// Open returns a new client on the same storage.
func (h *harness) Open(ctx context.Context) (contract.Backend, error) {
	return h.storage.Backend(), nil
}

// Advance moves the clock of every client.
func (h *harness) Advance(d time.Duration) { h.clock.Advance(d) }

func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{Clock: true, Restart: true}
}

func (h *harness) Close() error { return nil }

// Run is called from a test of the backend's package, with a factory
// that builds a harness over fresh storage:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, newHarness) }
//
// The suite runs every scenario as a parallel subtest, skips (and reports)
// those that need a capability the harness lacks, and logs a summary.
func ExampleRun() {
	testConformance := func(t *testing.T) { conformance.Run(t, newHarness) }
	_ = testConformance
}
