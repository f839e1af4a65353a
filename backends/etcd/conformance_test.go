package etcd

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestConformance runs the whole suite on a 3-member cluster, and its
// tolerance-sensitive scenarios again at a wider tolerance (WideTolerance). Every
// scenario gets a fresh prefix. Time is moved for etcd as well as for the
// times records report: see harness.Advance.
func TestConformance(t *testing.T) {
	c := startCluster(t, 3)
	cli := c.client(t)
	var seq atomic.Int64
	newHarness := func(tol time.Duration) conformance.NewHarness {
		return func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
			return &harness{
				cli: cli, prefix: fmt.Sprintf("conf-%d", seq.Add(1)), tol: tol,
				clock: conformance.NewManualClock(), leases: map[clientv3.LeaseID]time.Time{},
			}, nil
		}
	}
	// The default tolerance equals the granularity (a second): the
	// window between expiry and takeover is one granule. The
	// tolerance-sensitive scenarios run again with a tolerance of 4 s, so
	// that "expired, but within the tolerance" spans several.
	conformance.Run(t, newHarness(DefaultTolerance))
	t.Run("WideTolerance", func(t *testing.T) { conformance.RunToleranceSensitive(t, newHarness(4*time.Second)) })
}

// harness gives the suite clients on one prefix of the shared cluster.
//
// Expiry on this backend is etcd's: keys on etcd leases disappear when
// the lease's TTL has passed on the etcd leader's clock. The suite moves
// time with Advance instead of sleeping, so the harness moves etcd's time
// for the backend's keys: every etcd lease the backend grants is recorded
// with the expiry it would have on the manual clock (the operation's time
// plus the TTL asked for), and Advance revokes every lease whose expiry
// it reaches — exactly what etcd's timer would do — deleting its keys.
// So that real time does not expire them meanwhile, the leases are
// granted with a real TTL of an hour; the TTLs etcd itself enforces are
// tested in real time by TestRealTimeExpiry.
type harness struct {
	cli    *clientv3.Client
	prefix string
	tol    time.Duration // the backends' clock tolerance
	clock  *contract.ManualClock

	mu     sync.Mutex
	leases map[clientv3.LeaseID]time.Time // virtual expiry
}

func (h *harness) grant(ctx context.Context, cli *clientv3.Client, ttl int64, now time.Time) (clientv3.LeaseID, int64, error) {
	r, err := cli.Grant(ctx, 3600)
	if err != nil {
		return 0, 0, err
	}
	h.mu.Lock()
	h.leases[r.ID] = now.Add(time.Duration(ttl) * time.Second)
	h.mu.Unlock()
	return r.ID, ttl, nil
}

func (h *harness) Open(ctx context.Context) (contract.Backend, error) {
	b, err := NewBackend(h.cli, Options{Prefix: h.prefix, Tolerance: h.tol})
	if err != nil {
		return nil, err
	}
	b.now = h.clock
	b.grantFn = h.grant
	return b, nil
}

func (h *harness) Advance(d time.Duration) {
	h.clock.Advance(d)
	now := h.clock.Now()
	h.mu.Lock()
	var due []clientv3.LeaseID
	for id, exp := range h.leases {
		if !exp.After(now) {
			due = append(due, id)
			delete(h.leases, id)
		}
	}
	h.mu.Unlock()
	h.revoke(due)
}

func (h *harness) revoke(ids []clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(testCtx(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		_, _ = h.cli.Revoke(ctx, id) // already revoked by the backend: fine
	}
}

func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{Clock: true, Restart: true, Granularity: time.Second}
}

func (h *harness) Close() error {
	h.mu.Lock()
	var all []clientv3.LeaseID
	for id := range h.leases {
		all = append(all, id)
	}
	h.leases = nil
	h.mu.Unlock()
	h.revoke(all)
	ctx, cancel := context.WithTimeout(testCtx(), 10*time.Second)
	defer cancel()
	_, err := h.cli.Delete(ctx, h.prefix+"/", clientv3.WithPrefix())
	return err
}
