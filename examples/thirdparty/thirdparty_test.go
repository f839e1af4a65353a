package thirdparty_test

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/examples/thirdparty"
)

// harness gives the suite clients on one shared storage and a store clock
// it can move: a contract.ManualClock, wired into the backend, so that
// every scenario about expiry, takeover, retention and renewal runs. A
// database backend would create a fresh schema or database here, and pass
// clock.Now to its statements.
type harness struct {
	clock   *contract.ManualClock
	storage *memory.Storage
}

func newHarness(ctx context.Context, t *testing.T) (conformance.Harness, error) {
	return newHarnessTolerance(time.Second)(ctx, t)
}

// newHarnessTolerance configures the backend with the given clock
// tolerance.
func newHarnessTolerance(tol time.Duration) conformance.NewHarness {
	return func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
		clock := conformance.NewManualClock()
		return &harness{clock: clock, storage: memory.NewStorage(memory.Options{Clock: clock, Tolerance: tol})}, nil
	}
}

func (h *harness) Open(ctx context.Context) (contract.Backend, error) {
	return thirdparty.New(h.storage.Backend()), nil
}
func (h *harness) Advance(d time.Duration) { h.clock.Advance(d) }
func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{Clock: true, Restart: true}
}
func (h *harness) Close() error { return nil }

// TestConformance is the one line every backend's tests need.
func TestConformance(t *testing.T) { conformance.Run(t, newHarness) }

// TestConformanceWideTolerance runs the scenarios whose outcome turns on
// the clock tolerance again at one several times larger, so that "expired,
// but still within the tolerance" is a wide window: a backend that judges
// expiry with a fixed tolerance instead of its configured one fails here.
func TestConformanceWideTolerance(t *testing.T) {
	conformance.RunToleranceSensitive(t, newHarnessTolerance(5*time.Second))
}

func TestCountsCalls(t *testing.T) {
	ctx := context.Background()
	c := thirdparty.New(memory.NewStorage(memory.Options{}).Backend())
	if _, err := c.CreateWorkflow(ctx, contract.Workflow{ID: "w", Status: contract.StatusPending}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetWorkflow(ctx, "", "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetWorkflow(ctx, "", "w"); err != nil {
		t.Fatal(err)
	}
	got := c.Counts()
	if got["CreateWorkflow"] != 1 || got["GetWorkflow"] != 2 || len(got) != 2 {
		t.Fatalf("counts = %v", got)
	}
}
