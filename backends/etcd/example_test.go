package etcd_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/etcd" // registers "etcd"
	"github.com/durable-go/durable/contract"
	clientv3 "go.etcd.io/etcd/client/v3"
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

// New builds a Store on an etcd client the application already has; the
// client stays the application's, to close after the Store. (Compiled, not
// run: it needs a cluster.)
func ExampleNew() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://10.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	store, err := etcd.New(cli, etcd.Options{Prefix: "myapp"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	var b *etcd.Backend // the raw backend, for its own methods
	if store.As(&b) {
		fmt.Println(b.Prefix())
	}
}
