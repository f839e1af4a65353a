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

// harness gives the suite clients on one shared storage and a clock it can
// move. A database backend would create a fresh schema or database here.
type harness struct {
	clock   *memory.ManualClock
	storage *memory.Storage
	clients []*thirdparty.Counting
}

func newHarness(ctx context.Context, t *testing.T) (conformance.Harness, error) {
	clock := memory.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	return &harness{clock: clock, storage: memory.NewStorage(memory.Options{Clock: clock, Tolerance: time.Second})}, nil
}

func (h *harness) Open(ctx context.Context) (contract.Backend, error) {
	c := thirdparty.New(h.storage.Backend())
	h.clients = append(h.clients, c)
	return c, nil
}
func (h *harness) Advance(d time.Duration)  { h.clock.Advance(d) }
func (h *harness) Tolerance() time.Duration { return time.Second }
func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{Clock: true, Restart: true}
}
func (h *harness) Close() error { return nil }

// TestConformance is the one line every backend's tests need.
func TestConformance(t *testing.T) { conformance.Run(t, newHarness) }

func TestCountsCalls(t *testing.T) {
	ctx := context.Background()
	c := thirdparty.New(memory.New(memory.Options{}))
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
