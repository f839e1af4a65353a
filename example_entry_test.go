package durable_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
)

// Open picks the backend by the DSN's scheme. The backend's package must be
// imported (here memory, for its registration) somewhere in the program.
func ExampleOpen() {
	ctx := context.Background()
	store, err := durable.Open(ctx, "memory://", durable.WithDefaultTTLs(time.Minute, 30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	wf, err := store.CreateWorkflow(ctx, durable.Workflow{ID: "order-42", Snapshot: []byte(`{"step":1}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(wf.ID, wf.Status, wf.Revision)
	// Output: order-42 pending 1
}

// New wraps a backend you built yourself, bypassing the registry: here the
// raw memory backend, shared by two Stores.
func ExampleNew() {
	ctx := context.Background()
	storage := memory.NewStorage(memory.Options{})
	a, err := durable.New(storage.Backend())
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := durable.New(storage.Backend(), durable.WithMaxSnapshotBytes(1<<20))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	if _, err := a.CreateWorkflow(ctx, durable.Workflow{ID: "order-7"}); err != nil {
		log.Fatal(err)
	}
	wf, err := b.GetWorkflow(ctx, "", "order-7")
	fmt.Println(wf.ID, wf.Status, err)
	// Output: order-7 pending <nil>
}

// Step reads the workflow, applies a pure change and writes it with
// compare-and-set, retrying on a conflict with a concurrent writer.
func ExampleStore_Step() {
	ctx := context.Background()
	store, _ := durable.Open(ctx, "memory://")
	defer store.Close()
	store.CreateWorkflow(ctx, durable.Workflow{ID: "order-1", Snapshot: []byte("cart")})

	wf, err := store.Step(ctx, "", "order-1", durable.StepOptions{}, func(cur durable.Workflow) (durable.Change, error) {
		// May run more than once: derive the change from cur only.
		return durable.Change{Status: durable.StatusRunning, Snapshot: append(cur.Snapshot, "+paid"...)}, nil
	})
	fmt.Println(wf.Status, wf.Revision, string(wf.Snapshot), err)

	wf, err = store.Step(ctx, "", "order-1", durable.StepOptions{}, func(cur durable.Workflow) (durable.Change, error) {
		return durable.Change{Status: durable.StatusSucceeded, Snapshot: cur.Snapshot}, nil
	})
	fmt.Println(wf.Status, wf.Revision, err)

	// A terminal workflow is not stepped again.
	_, err = store.Step(ctx, "", "order-1", durable.StepOptions{}, func(cur durable.Workflow) (durable.Change, error) {
		panic("not called")
	})
	fmt.Println(errors.Is(err, durable.ErrTerminal))
	// Output:
	// running 2 cart+paid <nil>
	// succeeded 3 <nil>
	// true
}

// RunWithLease holds a lease while fn runs, renews it in the background and
// releases it afterwards. fn passes l.Fence() with its writes so that they
// are rejected once the lease is lost.
func ExampleStore_RunWithLease() {
	ctx := context.Background()
	store, _ := durable.Open(ctx, "memory://")
	defer store.Close()
	store.CreateWorkflow(ctx, durable.Workflow{ID: "report-2026-12-03"})

	// The TTL must be at least store.MinTTL(): 1 s plus the clock tolerance.
	req := durable.LeaseRequest{Resource: "nightly-report", Owner: "worker-1", TTL: 30 * time.Second}
	err := store.RunWithLease(ctx, req, durable.LeaseOptions{}, func(ctx context.Context, l durable.Lease) error {
		// Another owner is turned away while this one holds the lease.
		_, err := store.AcquireLease(ctx, durable.LeaseRequest{Resource: "nightly-report", Owner: "worker-2", TTL: 30 * time.Second})
		fmt.Println("worker-2:", errors.Is(err, durable.ErrLeaseBusy))

		_, err = store.Step(ctx, "", "report-2026-12-03", durable.StepOptions{Fence: l.Fence()},
			func(cur durable.Workflow) (durable.Change, error) {
				return durable.Change{Status: durable.StatusSucceeded, Snapshot: []byte("done")}, nil
			})
		return err
	})
	fmt.Println("run:", err)

	// Released: the next owner gets it at once.
	l, err := store.AcquireLease(ctx, durable.LeaseRequest{Resource: "nightly-report", Owner: "worker-2", TTL: 30 * time.Second})
	fmt.Println("worker-2:", l.Owner, err)
	// Output:
	// worker-2: true
	// run: <nil>
	// worker-2: worker-2 <nil>
}

// WaitKey lets a duplicate request wait for the first one's outcome
// instead of failing with ErrInFlight.
func ExampleStore_WaitKey() {
	ctx := context.Background()
	store, _ := durable.Open(ctx, "memory://")
	defer store.Close()

	req := durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "pay-123"}, Fingerprint: "sha256:body", TTL: time.Minute}
	first, _ := store.ClaimKey(ctx, req)

	done := make(chan durable.KeyRecord)
	go func() {
		// The duplicate: waits until the first request completes.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		rec, err := store.WaitKey(wctx, req.KeyRef)
		if err != nil {
			log.Fatal(err)
		}
		done <- rec
	}()

	store.CompleteKey(ctx, durable.Completion{KeyRef: req.KeyRef, Token: first.Token,
		Outcome: durable.Outcome{Code: 201, Body: []byte(`{"id":"pay_1"}`)}})
	rec := <-done
	fmt.Println(rec.State, rec.Outcome.Code, string(rec.Outcome.Body))
	// Output: completed 201 {"id":"pay_1"}
}
