package memory_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
)

// Open gives a Store on a new private in-process store. A test that moves
// time passes a contract.ManualClock.
func ExampleOpen() {
	ctx := context.Background()
	clock := contract.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	store, err := memory.Open(memory.Options{Clock: clock, Tolerance: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// The shortest TTL is 1 s plus the clock tolerance.
	fmt.Println("min TTL:", store.MinTTL())

	lease, _ := store.AcquireLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "a", TTL: 10 * time.Second})
	// Takeover waits until the TTL plus the tolerance has passed.
	clock.Advance(11 * time.Second)
	_, err = store.AcquireLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "b", TTL: 10 * time.Second})
	fmt.Println("after 11s:", err != nil)
	clock.Advance(2 * time.Second)
	next, err := store.AcquireLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "b", TTL: 10 * time.Second})
	fmt.Println("after 13s:", next.Owner, next.Token > lease.Token, err)
	// Output:
	// min TTL: 3s
	// after 11s: true
	// after 13s: b true <nil>
}

// A DSN with a name opens a store shared by every durable.Open of that name
// in the process.
func Example_dsn() {
	ctx := context.Background()
	a, _ := durable.Open(ctx, "memory://orders?tolerance=1s")
	defer a.Close()
	b, _ := durable.Open(ctx, "memory://orders?tolerance=1s")
	defer b.Close()

	a.CreateWorkflow(ctx, durable.Workflow{ID: "order-1"})
	wf, err := b.GetWorkflow(ctx, "", "order-1")
	fmt.Println(wf.ID, err)
	// Output: order-1 <nil>
}
