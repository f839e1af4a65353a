package redis

import (
	"bufio"
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	goredis "github.com/redis/go-redis/v9"
)

// rawBackend returns a raw backend on rdb with a fresh prefix and a
// manual clock, closed when the test ends.
func rawBackend(t *testing.T, rdb goredis.UniversalClient) (*Backend, *contract.ManualClock) {
	t.Helper()
	clock := conformance.NewManualClock()
	b, err := NewBackend(rdb, Options{Prefix: freshPrefix(), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, clock
}

// TestTokensOfAResourceKeepIncreasing grants one resource again and again
// — after a release, a takeover, a Cleanup that deleted its expired
// lease, a DeleteRecord of its lease, and a lost counter while its lease
// survived — and requires every token to be above all earlier ones.
func TestTokensOfAResourceKeepIncreasing(t *testing.T) {
	for name, rdb := range map[string]goredis.UniversalClient{
		"node": nodeClient(t, sharedNode(t)), "cluster": clusterClient(t, sharedCluster(t)),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			b, clock := rawBackend(t, rdb)
			const scope, res = contract.Scope("tenant/1"), "job:42"
			ttl := time.Minute
			var last int64
			grant := func(owner, after string) contract.Lease {
				t.Helper()
				l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: res, Owner: owner, TTL: ttl})
				if err != nil {
					t.Fatalf("AcquireLease %s: %v", after, err)
				}
				if l.Token <= last {
					t.Fatalf("token %d %s, not above %d", l.Token, after, last)
				}
				last = l.Token
				return l
			}
			expire := func() { clock.Advance(ttl + b.ClockTolerance() + time.Second) }

			l := grant("a", "first")
			if ok, err := b.ReleaseLease(ctx, l); err != nil || !ok {
				t.Fatalf("ReleaseLease: %v, %v", ok, err)
			}
			grant("b", "after a release")
			expire()
			grant("c", "after a takeover")

			expire()
			cr, err := b.Cleanup(ctx, contract.CleanupRequest{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if cr.Leases != 1 {
				t.Fatalf("Cleanup deleted %d leases, want 1", cr.Leases)
			}
			if _, err := b.GetLease(ctx, scope, res); contract.CodeOf(err) != contract.NotFound {
				t.Fatalf("GetLease after Cleanup: %v, want NotFound", err)
			}
			counter := b.base(scope) + "t:" + res
			if n, err := rdb.Exists(ctx, counter).Result(); err != nil || n != 1 {
				t.Fatalf("the token counter after Cleanup: exists=%d, %v", n, err)
			}
			grant("d", "after Cleanup deleted the expired lease")

			if ok, err := b.DeleteRecord(ctx, contract.KindLease, scope, res); err != nil || !ok {
				t.Fatalf("DeleteRecord: %v, %v", ok, err)
			}
			grant("e", "after DeleteRecord")

			// A counter lost while the lease record survived (an operator's
			// mistake the documentation warns against): the next grant
			// still goes past the lease's token.
			if err := rdb.Del(ctx, counter).Err(); err != nil {
				t.Fatal(err)
			}
			expire()
			l = grant("f", "after the counter was deleted under a live record")
			if ok, err := b.ReleaseLease(ctx, l); err != nil || !ok {
				t.Fatalf("ReleaseLease: %v, %v", ok, err)
			}
			grant("g", "after that grant's release")
		})
	}
}

// commandLog records the name of every command the hooked clients send,
// and each pipeline as one entry of its names joined by "+".
type commandLog struct {
	mu    sync.Mutex
	names []string
}

func (c *commandLog) add(s string) {
	c.mu.Lock()
	c.names = append(c.names, s)
	c.mu.Unlock()
}

// take returns what was recorded since the last take, without what the
// client does on its own schedule: the slot-map refreshes of a cluster
// client (CLUSTER SLOTS) and the set-up of a new connection (HELLO,
// CLIENT SETINFO, AUTH, SELECT, READONLY), which a background refresh
// may dial while a grant runs.
func (c *commandLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, entry := range c.names {
		own := false
		for _, n := range strings.Split(entry, "+") {
			switch n {
			case "cluster", "hello", "client", "auth", "select", "readonly":
			default:
				own = true
			}
		}
		if own {
			out = append(out, entry)
		}
	}
	c.names = nil
	return out
}

func (c *commandLog) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// written records the commands of one write of a backend's shared
// connection (its beforeWrite hook), each as an entry of its own.
func (c *commandLog) written(w []byte) {
	rd := bufio.NewReader(bytes.NewReader(w))
	for {
		v, err := readValue(rd)
		if err != nil {
			return
		}
		if a, ok := v.([]any); ok && len(a) > 0 {
			name, _ := a[0].(string)
			c.add(strings.ToLower(name))
		}
	}
}

// logShared makes b record in log the commands of every shared
// connection it dials.
func logShared(b *Backend, log *commandLog) {
	b.newMuxHook = func(m *mux) { m.beforeWrite = log.written }
}

func (c *commandLog) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.add(cmd.Name())
		return next(ctx, cmd)
	}
}

func (c *commandLog) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		names := make([]string, len(cmds))
		for i, cmd := range cmds {
			names[i] = cmd.Name()
		}
		c.add(strings.Join(names, "+"))
		return next(ctx, cmds)
	}
}

// TestGrantIsOneRoundTrip counts, with a hook on every node's client and
// on the backend's shared connections, the commands each kind of grant
// sends: exactly one EVALSHA, on one node and on a cluster (no separate
// token sequence, no retry). The only
// other command is the one-time ZADD that adds a scope to the registry,
// the first time this backend writes in the scope.
func TestGrantIsOneRoundTrip(t *testing.T) {
	clients := map[string]func(log *commandLog) goredis.UniversalClient{
		"node": func(log *commandLog) goredis.UniversalClient {
			c := nodeClient(t, sharedNode(t))
			c.AddHook(log)
			return c
		},
		"cluster": func(log *commandLog) goredis.UniversalClient {
			c := clusterClient(t, sharedCluster(t))
			// Every command the backend sends goes through a node's
			// client; hook each as the cluster client creates it.
			c.OnNewNode(func(n *goredis.Client) { n.AddHook(log) })
			return c
		},
	}
	for name, mk := range clients {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			log := &commandLog{}
			rdb := mk(log)
			b, clock := rawBackend(t, rdb)
			logShared(b, log)
			ttl := time.Minute
			acquire := func(scope contract.Scope, res, owner string) contract.Lease {
				t.Helper()
				l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: res, Owner: owner, TTL: ttl})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			expectOne := func(what string) {
				t.Helper()
				if got := log.take(); !slices.Equal(got, []string{"evalsha"}) {
					t.Errorf("%s sent %q, want one evalsha", what, got)
				}
			}

			// Warm up: the script is loaded on every node (a first EVALSHA
			// may answer NOSCRIPT and be followed by EVAL) and the slot
			// map is known.
			acquire("warm", "w", "o")
			load := func(ctx context.Context, n *goredis.Client) error { return leaseAcquire.Load(ctx, n).Err() }
			if cc, ok := rdb.(*goredis.ClusterClient); ok {
				if err := cc.ForEachMaster(ctx, load); err != nil {
					t.Fatal(err)
				}
			} else if err := load(ctx, rdb.(*goredis.Client)); err != nil {
				t.Fatal(err)
			}
			log.take()

			acquire("s", "r0", "a")
			if got := log.take(); !slices.Equal(got, []string{"zadd", "evalsha"}) {
				t.Errorf("the first grant in a new scope sent %q, want the registry's zadd and one evalsha", got)
			}
			l := acquire("s", "r1", "a")
			expectOne("a grant of a new resource")
			if _, err := b.ReleaseLease(ctx, l); err != nil {
				t.Fatal(err)
			}
			log.take()
			acquire("s", "r1", "b")
			expectOne("a grant after a release")
			clock.Advance(ttl + b.ClockTolerance() + time.Second)
			acquire("s", "r1", "c")
			expectOne("a takeover of an expired lease")
			for i := range 20 {
				acquire(contract.Scope("many"), "x"+strings.Repeat("y", i), "o")
				log.take()
				acquire(contract.Scope("many"), "x"+strings.Repeat("y", i)+"z", "o")
				expectOne("a grant in a registered scope")
			}
		})
	}
}
