package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
)

func TestConformance(t *testing.T) { conformance.Run(t, newHarness) }

// TestConformanceWideTolerance runs the tolerance-sensitive scenarios again
// with a tolerance several times the one above.
func TestConformanceWideTolerance(t *testing.T) {
	conformance.RunToleranceSensitive(t, func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
		return newHarnessTol(t, 5*time.Second), nil
	})
}

// harness runs the suite on one database file with a manual clock; every
// client is a backend of its own on the file (its own connections), and a
// restart reopens the file.
type harness struct {
	clock *contract.ManualClock
	opts  sqlite.Options
}

const tolerance = 2 * time.Second

func newHarness(ctx context.Context, t *testing.T) (conformance.Harness, error) {
	return newHarnessTol(t, tolerance), nil
}

func newHarnessTol(t *testing.T, tolerance time.Duration) *harness {
	clock := conformance.NewManualClock()
	return &harness{clock: clock, opts: sqlite.Options{
		Path: filepath.Join(t.TempDir(), "durable.db"), Tolerance: tolerance, Clock: clock,
		Synchronous: "normal", Readers: 2,
	}}
}

func (h *harness) Open(ctx context.Context) (contract.Backend, error) {
	return sqlite.NewBackend(ctx, h.opts)
}
func (h *harness) Advance(d time.Duration) { h.clock.Advance(d) }
func (h *harness) Close() error            { return nil }

func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{Clock: true, Restart: true}
}
