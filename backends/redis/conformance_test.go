package redis

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable/conformance"
	goredis "github.com/redis/go-redis/v9"
)

// TestConformance runs the whole suite on one node, and its
// tolerance-sensitive scenarios again at a wider tolerance. Times are
// exact to the microsecond (Granularity 0), so the default tolerance of a
// second already spans a million granules; the wide run uses 5 s like
// the SQL backends.
func TestConformance(t *testing.T) {
	rdb := nodeClient(t, sharedNode(t))
	start := time.Now()
	conformance.Run(t, NewHarness(rdb, DefaultTolerance))
	t.Run("WideTolerance", func(t *testing.T) { conformance.RunToleranceSensitive(t, NewHarness(rdb, 5*time.Second)) })
	t.Cleanup(func() { t.Logf("conformance on one node took %v", time.Since(start)) })
}

// TestConformanceCluster runs the same on a 3-master Redis Cluster: every
// scenario's scopes hash to several slots, on several primaries.
func TestConformanceCluster(t *testing.T) {
	rdb := clusterClient(t, sharedCluster(t))
	start := time.Now()
	conformance.Run(t, NewHarness(rdb, DefaultTolerance))
	t.Run("WideTolerance", func(t *testing.T) { conformance.RunToleranceSensitive(t, NewHarness(rdb, 5*time.Second)) })
	t.Cleanup(func() { t.Logf("conformance on a 3-master cluster took %v", time.Since(start)) })
}

// TestConformanceSharedConnection runs the whole suite with every script
// on the backend's shared connections, alone ones too (by default a
// script alone takes a pooled connection, so the sequential scenarios
// above mostly do), on one node and on the cluster.
func TestConformanceSharedConnection(t *testing.T) {
	for name, rdb := range map[string]goredis.UniversalClient{
		"node": nodeClient(t, sharedNode(t)), "cluster": clusterClient(t, sharedCluster(t)),
	} {
		t.Run(name, func(t *testing.T) {
			conformance.Run(t, func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
				return &Harness{RDB: rdb, Prefix: freshPrefix(), Tol: DefaultTolerance, Clock: conformance.NewManualClock(), MuxAlone: true}, nil
			})
		})
	}
}
