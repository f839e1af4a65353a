package thirdparty_test

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/examples/thirdparty"
)

// TestForwardsRenewLeases: a batch reaches the wrapped backend's
// LeaseRenewer as one call; over a backend without it, the decorator
// declines and the Store renews lease by lease.
func TestForwardsRenewLeases(t *testing.T) {
	ctx := context.Background()
	m := memory.NewStorage(memory.Options{}).Backend()
	for _, tc := range []struct {
		name     string
		next     contract.Backend
		batches  int
		perLease int
	}{
		{"capable", m, 1, 0},
		{"incapable", struct{ contract.Backend }{m}, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := thirdparty.New(tc.next)
			s, err := durable.New(c)
			if err != nil {
				t.Fatal(err)
			}
			var leases []durable.Lease
			for _, r := range []string{"a-" + tc.name, "b-" + tc.name} {
				l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: r, Owner: "w", TTL: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				leases = append(leases, l)
			}
			out, err := s.RenewLeases(ctx, leases, 20*time.Second)
			if err != nil || len(out) != 2 || out[0].Err != nil || out[1].Err != nil {
				t.Fatalf("RenewLeases = %+v, %v", out, err)
			}
			if got := c.Counts(); got["RenewLeases"] != tc.batches || got["RenewLease"] != tc.perLease {
				t.Fatalf("counts = %v, want %d RenewLeases and %d RenewLease", got, tc.batches, tc.perLease)
			}
		})
	}
}
