package durable_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable"
	_ "github.com/durable-go/durable/backends/memory"
)

func ExampleStore_UpdateWorkflow() {
	ctx := context.Background()
	store, _ := durable.Open(ctx, "memory://")
	defer store.Close()

	wf, _ := store.CreateWorkflow(ctx, durable.Workflow{ID: "order-1", Snapshot: []byte("v1")})
	next, err := store.UpdateWorkflow(ctx, durable.Update{
		ID: "order-1", ExpectStatus: durable.StatusPending, ExpectRevision: wf.Revision,
		Status: durable.StatusRunning, Snapshot: []byte("v2"),
	})
	fmt.Println(next.Revision, next.Status, err)

	// A second writer still holding revision 1 is rejected.
	_, err = store.UpdateWorkflow(ctx, durable.Update{
		ID: "order-1", ExpectStatus: durable.StatusPending, ExpectRevision: wf.Revision,
		Status: durable.StatusRunning,
	})
	fmt.Println(errors.Is(err, durable.ErrConflict))
	// Output:
	// 2 running <nil>
	// true
}

func ExampleStore_ClaimKey() {
	ctx := context.Background()
	store, _ := durable.Open(ctx, "memory://")
	defer store.Close()

	req := durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "pay-123"}, Fingerprint: "sha256:body", TTL: time.Minute}
	c, _ := store.ClaimKey(ctx, req)
	fmt.Println(c.Kind)
	store.CompleteKey(ctx, durable.Completion{KeyRef: req.KeyRef, Token: c.Token,
		Outcome: durable.Outcome{Code: 201, Body: []byte(`{"id":"pay_1"}`)}})

	retry, _ := store.ClaimKey(ctx, req)
	fmt.Println(retry.Kind, retry.Record.Outcome.Code, string(retry.Record.Outcome.Body))
	// Output:
	// new
	// completed 201 {"id":"pay_1"}
}

func ExampleStore_AcquireLease() {
	ctx := context.Background()
	store, _ := durable.Open(ctx, "memory://")
	defer store.Close()

	lease, _ := store.AcquireLease(ctx, durable.LeaseRequest{Resource: "nightly-report", Owner: "worker-1", TTL: 30 * time.Second})
	_, err := store.AcquireLease(ctx, durable.LeaseRequest{Resource: "nightly-report", Owner: "worker-2", TTL: 30 * time.Second})
	fmt.Println(errors.Is(err, durable.ErrLeaseBusy))

	released, _ := store.ReleaseLease(ctx, lease)
	next, _ := store.AcquireLease(ctx, durable.LeaseRequest{Resource: "nightly-report", Owner: "worker-2", TTL: 30 * time.Second})
	fmt.Println(released, next.Token > lease.Token)
	// Output:
	// true
	// true true
}

func ExampleTenantScope() {
	fmt.Println(durable.TenantScope("acme")[:15])
	// Output: sha256:822b33ad
}
