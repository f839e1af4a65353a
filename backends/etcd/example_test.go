package etcd_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"

	_ "github.com/durable-go/durable/backends/etcd" // registers "etcd"
)

// Open a Store on a three-member etcd cluster, take a lease and write with
// its fence. (Compiled, not run: it needs a cluster.)
func Example() {
	ctx := context.Background()
	store, err := durable.Open(ctx, "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/myapp?tolerance=1s&username=app&password=secret")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	l, err := store.AcquireLease(ctx, contract.LeaseRequest{Resource: "billing-run", Owner: "worker-7", TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err) // contract.ErrLeaseBusy: another worker holds it
	}
	w, err := store.UpdateWorkflow(ctx, contract.Update{
		ID: "billing-2030-01", ExpectStatus: contract.StatusRunning, Status: contract.StatusSucceeded,
		Fence: l.Fence(), // rejected once etcd's lease timer ends the grant
	})
	fmt.Println(w.Revision, err)
}
