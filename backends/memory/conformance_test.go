package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
)

func TestConformance(t *testing.T) { conformance.Run(t, newHarness) }

// TestConformanceWideTolerance runs the tolerance-sensitive scenarios again
// with a tolerance several times the one above.
func TestConformanceWideTolerance(t *testing.T) {
	conformance.RunToleranceSensitive(t, func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
		return newHarnessTol(5 * time.Second), nil
	})
}

// harness runs the suite on one memory Storage with a manual clock.
type harness struct {
	clock   *contract.ManualClock
	storage *memory.Storage
}

const tolerance = 2 * time.Second

func newHarness(ctx context.Context, t *testing.T) (conformance.Harness, error) {
	return newHarnessTol(tolerance), nil
}

func newHarnessTol(tolerance time.Duration) *harness {
	// A fixed start, already at microsecond precision like the records.
	clock := contract.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC))
	return &harness{
		clock:   clock,
		storage: memory.NewStorage(memory.Options{Clock: clock, Tolerance: tolerance}),
	}
}

func (h *harness) Open(ctx context.Context) (contract.Backend, error) {
	return h.storage.Backend(), nil
}
func (h *harness) Advance(d time.Duration) { h.clock.Advance(d) }
func (h *harness) Close() error            { return nil }

func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{Clock: true, Restart: true}
}
