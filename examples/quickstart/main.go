// Command quickstart walks through durable's three primitives on the memory
// backend, with no setup:
//
//  1. workflow state with compare-and-set: a stale writer gets a conflict;
//  2. idempotency keys: a retried request replays the stored outcome, and a
//     reused key with another payload is rejected;
//  3. leases with fencing tokens: a worker pauses past its lease, another
//     takes over, and the paused worker's late write is fenced out.
//
// Run it with: go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	// A memory store on a simulated clock, so the lease demo needs no
	// sleeping. In a service you would write
	//   store, err := durable.Open(ctx, "memory://")      // or "postgres://…"
	clock := contract.NewManualClock(time.Now())
	store, err := memory.Open(memory.Options{Clock: clock, Tolerance: time.Second})
	if err != nil {
		return err
	}
	defer store.Close()

	fmt.Println("== 1. Workflow state with compare-and-set")
	wf, err := store.CreateWorkflow(ctx, durable.Workflow{ID: "order-42", Snapshot: []byte(`{"step":0}`)})
	if err != nil {
		return err
	}
	fmt.Printf("created %s: status=%s revision=%d\n", wf.ID, wf.Status, wf.Revision)

	// Two workers read revision 1 and both try to move the order on.
	first, err := store.UpdateWorkflow(ctx, durable.Update{ID: "order-42",
		ExpectStatus: durable.StatusPending, ExpectRevision: wf.Revision,
		Status: durable.StatusRunning, Snapshot: []byte(`{"step":1}`)})
	if err != nil {
		return err
	}
	fmt.Printf("worker A: revision %d -> %d, status=%s\n", wf.Revision, first.Revision, first.Status)
	_, err = store.UpdateWorkflow(ctx, durable.Update{ID: "order-42",
		ExpectStatus: durable.StatusPending, ExpectRevision: wf.Revision,
		Status: durable.StatusRunning, Snapshot: []byte(`{"step":1,"by":"B"}`)})
	if !errors.Is(err, durable.ErrConflict) {
		return fmt.Errorf("expected a conflict, got %v", err)
	}
	fmt.Printf("worker B: rejected, nothing overwritten: %v\n", err)

	fmt.Println()
	fmt.Println("== 2. Idempotency keys")
	key := durable.KeyRef{Key: "charge-7f3a"}
	charge := func(fingerprint string) (durable.Outcome, bool, error) {
		c, err := store.ClaimKey(ctx, durable.ClaimRequest{KeyRef: key, Fingerprint: fingerprint, TTL: time.Minute})
		if err != nil {
			return durable.Outcome{}, false, err
		}
		switch c.Kind {
		case durable.ClaimCompleted:
			return *c.Record.Outcome, true, nil
		case durable.ClaimInFlight:
			return durable.Outcome{}, false, errors.New("still running, retry later")
		}
		// We hold the claim: do the side effect exactly once, then store it.
		out := durable.Outcome{Code: 201, Body: []byte(`{"charge":"ch_1","amount":500}`), Ref: "ch_1"}
		if _, err := store.CompleteKey(ctx, durable.Completion{KeyRef: key, Token: c.Token, Outcome: out}); err != nil {
			return durable.Outcome{}, false, err
		}
		return out, false, nil
	}
	out, replayed, err := charge("sha256:amount=500")
	if err != nil {
		return err
	}
	fmt.Printf("first request:  %d %s (replayed=%v)\n", out.Code, out.Body, replayed)
	out, replayed, err = charge("sha256:amount=500")
	if err != nil {
		return err
	}
	fmt.Printf("retry:          %d %s (replayed=%v) - the card was charged once\n", out.Code, out.Body, replayed)
	_, _, err = charge("sha256:amount=900")
	if !errors.Is(err, durable.ErrKeyConflict) {
		return fmt.Errorf("expected a key conflict, got %v", err)
	}
	fmt.Printf("same key, other payload: rejected: %v\n", err)

	fmt.Println()
	fmt.Println("== 3. Leases with fencing tokens")
	a, err := store.AcquireLease(ctx, durable.LeaseRequest{Resource: "order-42", Owner: "worker-a", TTL: 10 * time.Second})
	if err != nil {
		return err
	}
	fmt.Printf("worker-a holds the lease, token %d\n", a.Token)
	if _, err := store.AcquireLease(ctx, durable.LeaseRequest{Resource: "order-42", Owner: "worker-b", TTL: 10 * time.Second}); errors.Is(err, durable.ErrLeaseBusy) {
		fmt.Println("worker-b: lease busy, waits")
	}

	clock.Advance(15 * time.Second)
	fmt.Println("... worker-a pauses for 15s (a GC pause, a stuck disk) and its lease expires ...")

	b, err := store.AcquireLease(ctx, durable.LeaseRequest{Resource: "order-42", Owner: "worker-b", TTL: 10 * time.Second})
	if err != nil {
		return err
	}
	fmt.Printf("worker-b takes over, token %d > %d\n", b.Token, a.Token)
	cur, err := store.GetWorkflow(ctx, "", "order-42")
	if err != nil {
		return err
	}
	next, err := store.UpdateWorkflow(ctx, durable.Update{ID: "order-42", Fence: b.Fence(),
		ExpectStatus: cur.Status, ExpectRevision: cur.Revision,
		Status: durable.StatusRunning, Snapshot: []byte(`{"step":2,"by":"b"}`)})
	if err != nil {
		return err
	}
	fmt.Printf("worker-b: fenced write applied, revision %d\n", next.Revision)

	// worker-a wakes up and, not knowing it was replaced, writes.
	_, err = store.UpdateWorkflow(ctx, durable.Update{ID: "order-42", Fence: a.Fence(),
		ExpectStatus: durable.StatusRunning, Status: durable.StatusRunning, Snapshot: []byte(`{"step":2,"by":"a"}`)})
	if !errors.Is(err, durable.ErrFenced) {
		return fmt.Errorf("expected the stale write to be fenced, got %v", err)
	}
	fmt.Printf("worker-a wakes: stale write rejected: %v\n", err)
	if _, err := store.RenewLease(ctx, a, 10*time.Second); errors.Is(err, durable.ErrFenced) {
		fmt.Println("worker-a: its renew is fenced too, so it stops")
	}
	if _, err := store.UpdateWorkflow(ctx, durable.Update{ID: "order-42", Fence: b.Fence(),
		ExpectStatus: durable.StatusRunning, ExpectRevision: next.Revision,
		Status: durable.StatusSucceeded, Snapshot: []byte(`{"step":3,"by":"b"}`)}); err != nil {
		return err
	}
	if _, err := store.ReleaseLease(ctx, b); err != nil {
		return err
	}
	final, err := store.GetWorkflow(ctx, "", "order-42")
	if err != nil {
		return err
	}
	fmt.Printf("final state: status=%s revision=%d snapshot=%s\n", final.Status, final.Revision, final.Snapshot)
	return nil
}
