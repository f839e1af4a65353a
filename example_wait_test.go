package durable_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/durable-go/durable"
	_ "github.com/durable-go/durable/backends/memory"
)

func ExampleStore_WaitLease() {
	ctx := context.Background()
	store, _ := durable.Open(ctx, "memory://")
	defer store.Close()

	req := durable.LeaseRequest{Resource: "nightly-report", Owner: "worker-1", TTL: 30 * time.Second}
	first, _ := store.AcquireLease(ctx, req)

	// worker-2 waits (at most 10 s) instead of getting ErrLeaseBusy; the
	// release wakes it at once.
	got := make(chan durable.Lease)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := store.WaitLease(wctx, durable.LeaseRequest{Resource: "nightly-report", Owner: "worker-2", TTL: 30 * time.Second})
		if err != nil {
			fmt.Println(err)
		}
		got <- l
	}()
	store.ReleaseLease(ctx, first)
	next := <-got
	fmt.Println(next.Owner, next.Token > first.Token)
	// Output: worker-2 true
}

func ExampleStore_RunWithPermit() {
	ctx := context.Background()
	store, _ := durable.Open(ctx, "memory://")
	defer store.Close()

	// At most 3 exports run at once, each holding its own permit (and its
	// own fencing token); the others wait for a permit in arrival order.
	var (
		mu            sync.Mutex
		running, peak int
		wg            sync.WaitGroup
	)
	for i := range 8 {
		wg.Go(func() {
			req := durable.PermitRequest{Resource: "exports", Owner: fmt.Sprint("worker-", i), TTL: 30 * time.Second, Permits: 3}
			err := store.RunWithPermit(ctx, req, durable.LeaseOptions{Wait: true}, func(ctx context.Context, l durable.Lease) error {
				mu.Lock()
				running++
				peak = max(peak, running)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // the export, writing with l.Fence()
				mu.Lock()
				running--
				mu.Unlock()
				return nil
			})
			if err != nil {
				fmt.Println(err)
			}
		})
	}
	wg.Wait()
	fmt.Println("at most 3 at once:", peak <= 3)

	// AcquirePermit does not wait: with every permit held it is busy.
	for i := range 3 {
		l, _ := store.AcquirePermit(ctx, durable.PermitRequest{Resource: "exports", Owner: fmt.Sprint("batch-", i), TTL: 30 * time.Second, Permits: 3})
		fmt.Println(l.Resource)
	}
	_, err := store.AcquirePermit(ctx, durable.PermitRequest{Resource: "exports", Owner: "batch-3", TTL: 30 * time.Second, Permits: 3})
	fmt.Println(errors.Is(err, durable.ErrLeaseBusy))
	held, _ := store.Permits(ctx, "", "exports", 3)
	fmt.Println(len(held), "permits held")
	// Output:
	// at most 3 at once: true
	// exports#1
	// exports#2
	// exports#3
	// true
	// 3 permits held
}
