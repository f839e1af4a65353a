package redis

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/election"
)

// TestElection: package election on Redis, as three processes would use
// it (three Stores, each its own backend and pub/sub connection, over two
// clients): a campaigns and leads with its
// value, b campaigns and waits, a resigns and b leads with a greater
// token; an observer on the third Store sees a, then b, then nobody,
// well within election.WatchedPollInterval (the backend's watch, not the
// poll, woke it). On a node and on a cluster.
func TestElection(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			prefix := freshPrefix()
			stores := make([]*durable.Store, 3)
			for i := range stores {
				rdb := c[i%2]
				s, err := New(rdb, Options{Prefix: prefix})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				stores[i] = s
			}
			t.Cleanup(func() { _ = deletePrefix(context.Background(), c[0], prefix+":") })
			const scope, elect = durable.Scope("tenant-1"), "leader"
			// Well below WatchedPollInterval: a report this soon came from
			// the watch.
			const soon = 2 * time.Second
			octx, stop := context.WithCancel(ctx)
			defer stop()
			ch, err := election.Observe(octx, stores[2], scope, elect)
			if err != nil {
				t.Fatal(err)
			}
			next := func(what string) election.Leader {
				t.Helper()
				select {
				case l, ok := <-ch:
					if !ok {
						t.Fatalf("%s: the observer's channel closed", what)
					}
					return l
				case <-time.After(soon):
					t.Fatalf("%s: no report within %v", what, soon)
				}
				return election.Leader{}
			}
			if l := next("the first report"); !l.IsZero() {
				t.Fatalf("first report %+v, want no leader", l)
			}
			cfg := func(who string) election.Config {
				return election.Config{Scope: scope, Name: elect, Candidate: who, Value: who + ":8080\x00", TTL: 10 * time.Second}
			}
			a, err := election.Campaign(ctx, stores[0], cfg("a"))
			if err != nil {
				t.Fatal(err)
			}
			if l := next("a's term"); l.Owner != "a" || l.Token != a.Lease().Token || l.Value != "a:8080\x00" {
				t.Fatalf("observed %+v, want a's term %+v", l, a.Lease())
			}
			won := make(chan *election.Term, 1)
			go func() {
				b, err := election.Campaign(ctx, stores[1], cfg("b"))
				if err != nil {
					t.Error(err)
				}
				won <- b
			}()
			time.Sleep(100 * time.Millisecond) // b waits
			resigned := time.Now()
			if err := a.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			var b *election.Term
			select {
			case b = <-won:
			case <-time.After(soon):
				t.Fatalf("b did not lead within %v of a's resignation", soon)
			}
			if b == nil {
				t.FailNow()
			}
			t.Logf("b led %v after a resigned", time.Since(resigned))
			if b.Lease().Token <= a.Lease().Token || b.Lease().Value != "b:8080\x00" {
				t.Fatalf("b's lease %+v after a's %+v", b.Lease(), a.Lease())
			}
			l := next("b's term")
			if l.IsZero() { // the gap between the terms, seen or not
				l = next("b's term")
			}
			if l.Owner != "b" || l.Token != b.Lease().Token || l.Value != "b:8080\x00" {
				t.Fatalf("observed %+v, want b's term %+v", l, b.Lease())
			}
			if err := b.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if l := next("b's resignation"); !l.IsZero() {
				t.Fatalf("observed %+v after b resigned, want no leader", l)
			}
		})
	}
}
