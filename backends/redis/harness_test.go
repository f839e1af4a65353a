package redis

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
)

// The servers shared by this test binary: one node and one 3-master
// cluster, started on first use and killed by TestMain.
var (
	shared struct {
		sync.Mutex
		dir     string
		node    *redistest.Server
		cluster *redistest.Cluster
	}
	prefixSeq atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Lock()
	if shared.node != nil {
		shared.node.Kill()
	}
	if shared.cluster != nil {
		shared.cluster.Kill()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	shared.Unlock()
	os.Exit(code)
}

func sharedDir(t testing.TB) string {
	if shared.dir == "" {
		d, err := os.MkdirTemp("", "durable-redis-")
		if err != nil {
			t.Fatal(err)
		}
		shared.dir = d
	}
	return shared.dir
}

// sharedNode returns the binary's single node (AOF on, fsync always).
func sharedNode(t testing.TB) *redistest.Server {
	t.Helper()
	redistest.Require(t)
	shared.Lock()
	defer shared.Unlock()
	if shared.node == nil {
		s, err := redistest.StartServer(sharedDir(t)+"/node", redistest.Options{})
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		shared.node = s
	}
	return shared.node
}

// sharedCluster returns the binary's 3-master cluster.
func sharedCluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	redistest.Require(t)
	shared.Lock()
	defer shared.Unlock()
	if shared.cluster == nil {
		c, err := redistest.NewCluster(sharedDir(t)+"/cluster", redistest.ClusterOptions{Masters: 3})
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		shared.cluster = c
	}
	return shared.cluster
}

func nodeClient(t testing.TB, s *redistest.Server) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func clusterClient(t testing.TB, c *redistest.Cluster) *goredis.ClusterClient {
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// freshPrefix returns a key prefix no other scenario uses.
func freshPrefix() string { return fmt.Sprintf("t%d-%d", os.Getpid(), prefixSeq.Add(1)) }

// Harness is the conformance harness on a Redis client (one node or a
// cluster): every harness gets a fresh key prefix, its clients share the
// client and a manual clock, and Close deletes the prefix's keys. It is
// exported within the test package for the other tests of the package
// (and later fault tests) to reuse.
type Harness struct {
	RDB    goredis.UniversalClient
	Prefix string
	Tol    time.Duration
	Clock  *contract.ManualClock // nil: the server's clock
	Extra  func(*Options)        // adjusts the options of each client
	// MuxAlone sends every script of the harness's backends on their
	// shared connections, alone ones too (Backend.muxAlone).
	MuxAlone bool
}

// NewHarness returns a conformance.NewHarness on rdb at tolerance tol.
func NewHarness(rdb goredis.UniversalClient, tol time.Duration) conformance.NewHarness {
	return func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
		return &Harness{RDB: rdb, Prefix: freshPrefix(), Tol: tol, Clock: conformance.NewManualClock()}, nil
	}
}

func (h *Harness) Options() Options {
	o := Options{Prefix: h.Prefix, Tolerance: h.Tol}
	if h.Clock != nil {
		o.Clock = h.Clock
	}
	if h.Extra != nil {
		h.Extra(&o)
	}
	return o
}

func (h *Harness) Open(ctx context.Context) (contract.Backend, error) {
	b, err := NewBackend(h.RDB, h.Options())
	if err != nil {
		return nil, err
	}
	b.muxAlone = h.MuxAlone
	return b, nil
}

func (h *Harness) Advance(d time.Duration) { h.Clock.Advance(d) }

func (h *Harness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{Clock: h.Clock != nil, Restart: true}
}

// Close deletes every key under the prefix, on every primary.
func (h *Harness) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return deletePrefix(ctx, h.RDB, h.Prefix+":")
}

func deletePrefix(ctx context.Context, rdb goredis.UniversalClient, prefix string) error {
	del := func(ctx context.Context, c *goredis.Client) error {
		it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			if err := c.Del(ctx, it.Val()).Err(); err != nil {
				return err
			}
		}
		return it.Err()
	}
	if cc, ok := rdb.(*goredis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, del)
	}
	return del(ctx, rdb.(*goredis.Client))
}
