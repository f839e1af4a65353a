package etcd

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// cluster is an in-process etcd cluster of embedded members on random
// localhost ports, with data in temporary directories.
type cluster struct {
	t       testing.TB
	mu      sync.Mutex
	members []*member
}

type member struct {
	name    string
	dir     string
	cfg     *embed.Config
	etcd    *embed.Etcd // nil while stopped
	client  string      // client URL
	stopped bool
}

// handedOut is every port freePort returned in this process: the kernel
// may offer a port again once its probe listener is closed, and two
// members given one port fail to start.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

func freePort(t testing.TB) int {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		handedOut.Lock()
		seen := handedOut.ports[port]
		handedOut.ports[port] = true
		handedOut.Unlock()
		if !seen {
			return port
		}
	}
}

// startCluster starts n members and waits until they serve. They are
// stopped when the test ends.
func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	return startClusterElection(t, n, 600)
}

// startClusterElection is startCluster with an election timeout of
// electionMs (heartbeats every 50 ms).
func startClusterElection(t testing.TB, n int, electionMs uint) *cluster {
	t.Helper()
	c := &cluster{t: t}
	var initial []string
	for i := range n {
		m := &member{name: fmt.Sprintf("m%d", i), dir: t.TempDir()}
		peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
		m.client = fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
		cfg := embed.NewConfig()
		cfg.Name, cfg.Dir = m.name, m.dir
		pu, _ := url.Parse(peer)
		cu, _ := url.Parse(m.client)
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.ListenMetricsUrls = nil
		cfg.InitialClusterToken = "durable-test"
		cfg.ClusterState = embed.ClusterStateFlagNew
		// Short raft timers: elections after a member stops take a fraction
		// of a second, and the minimum lease TTL (1.5 election timeouts) is
		// 1 s, so 1 s etcd leases are granted as asked.
		cfg.TickMs, cfg.ElectionMs = 50, electionMs
		cfg.UnsafeNoFsync = true // test data: a crashed member is never restarted from its disk
		cfg.MaxRequestBytes = 4 << 20
		cfg.Logger, cfg.LogLevel = "zap", "error"
		cfg.LogOutputs = []string{"/dev/null"}
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		m.cfg = cfg
		initial = append(initial, m.name+"="+peer)
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, m := range c.members {
		wg.Go(func() { m.etcd, errs[i] = embed.StartEtcd(m.cfg) })
	}
	wg.Wait()
	t.Cleanup(c.stopAll)
	for i, m := range c.members {
		if errs[i] != nil {
			t.Fatalf("starting etcd member %s: %v", m.name, errs[i])
		}
	}
	for _, m := range c.members {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case <-time.After(30 * time.Second):
			t.Fatalf("etcd member %s not ready after 30s", m.name)
		}
	}
	return c
}

func (c *cluster) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		if m.etcd != nil {
			m.etcd.Close()
			m.etcd = nil
		}
	}
}

// endpoints returns the members' client addresses (host:port).
func (c *cluster) endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, strings.TrimPrefix(m.client, "http://"))
	}
	return out
}

// client returns a client on every member, closed when the test ends.
func (c *cluster) client(t testing.TB) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.client)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// dsn returns a DSN for the cluster with prefix and extra parameters.
func (c *cluster) dsn(prefix, params string) string {
	d := "etcd://" + strings.Join(c.endpoints(), ",") + "/" + prefix
	if params != "" {
		d += "?" + params
	}
	return d
}

// leader returns the index of the member that is leader, or -1.
func (c *cluster) leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m.etcd != nil && m.etcd.Server.Leader() == m.etcd.Server.MemberID() {
			return i
		}
	}
	return -1
}

// stop stops member i: its connections drop. With hard, it stops without
// telling its peers (a leader does not hand over leadership first), like a
// crash of its process.
func (c *cluster) stop(i int, hard bool) {
	c.mu.Lock()
	m := c.members[i]
	e := m.etcd
	m.etcd = nil
	c.mu.Unlock()
	if e != nil {
		if hard {
			e.Server.HardStop()
		}
		e.Close()
	}
}

// restart starts member i again on its data directory.
func (c *cluster) restart(t testing.TB, i int) {
	t.Helper()
	m := c.members[i]
	cfg := *m.cfg
	cfg.ClusterState = embed.ClusterStateFlagExisting
	e, err := embed.StartEtcd(&cfg)
	if err != nil {
		t.Fatalf("restarting member %s: %v", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatalf("member %s not ready after restart", m.name)
	}
	c.mu.Lock()
	m.etcd = e
	c.mu.Unlock()
}

var testCtx = context.Background
