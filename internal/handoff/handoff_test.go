package handoff_test

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/handoff"
)

// memFactory opens Stores on one memory Storage.
func memFactory(st *memory.Storage) handoff.Factory {
	return func(tb testing.TB) *durable.Store {
		s, err := durable.New(st.Backend())
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { s.Close() })
		return s
	}
}

func TestHideHidesTheWatcherOnly(t *testing.T) {
	b := memory.NewStorage(memory.Options{Tolerance: 300 * time.Millisecond}).Backend()
	h := handoff.Hide(b)
	if _, ok := h.(contract.LeaseWatcher); ok {
		t.Fatal("Hide kept LeaseWatcher")
	}
	if _, ok := h.(contract.KeyWaiter); ok {
		t.Fatal("Hide kept KeyWaiter")
	}
	if r, ok := h.(contract.ToleranceReporter); !ok || r.ClockTolerance() != 300*time.Millisecond {
		t.Fatal("Hide lost the tolerance")
	}
	if ip, ok := h.(contract.InProcess); !ok || !ip.InProcess() {
		t.Fatal("Hide lost InProcess")
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	// The backend is still open.
	if _, err := b.AcquireLease(context.Background(), contract.LeaseRequest{Resource: "r", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
}

func TestMeasure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := memFactory(memory.NewStorage(memory.Options{}))
	a := open(t)
	hidden, err := handoff.Hidden(open(t))
	if err != nil {
		t.Fatal(err)
	}
	defer hidden.Close()
	for name, w := range map[string]*durable.Store{"local": a, "other": open(t), "hidden": hidden} {
		r, err := handoff.Measure(ctx, a, w, handoff.Options{Handoffs: 10, Hold: time.Millisecond})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(r.Samples) != 10 || r.Median() <= 0 || r.P99() < r.Median() {
			t.Fatalf("%s: %v", name, r)
		}
		t.Logf("%s: %v", name, r)
	}
}

func TestQuantile(t *testing.T) {
	var r handoff.Result
	for i := 1; i <= 100; i++ {
		r.Samples = append(r.Samples, time.Duration(i))
	}
	if r.Median() != 50 || r.P99() != 99 || r.Quantile(1) != 100 || r.Quantile(0) != 1 {
		t.Fatal(r.Median(), r.P99(), r.Quantile(1), r.Quantile(0))
	}
}

// TestFairnessInOneStore: in one Store the queue serves the workers in
// arrival order. (Arrival is when a worker's call began, which may differ
// from the Store's queue order when two workers call at once: hence 90 %.)
func TestFairnessInOneStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := memFactory(memory.NewStorage(memory.Options{}))
	r, err := handoff.Fairness(ctx, []*durable.Store{open(t)}, handoff.FairnessOptions{Workers: 8, Grants: 400, Hold: 50 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	if r.Grants != 400 || r.InOrder < 360 {
		t.Fatalf("%v: want 400 grants, at least 90 %% in arrival order", r)
	}
	for w, n := range r.PerWorker {
		if n == 0 {
			t.Fatalf("worker %d starved: %v", w, r)
		}
	}
}
