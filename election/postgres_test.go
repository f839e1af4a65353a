package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/election"
	"github.com/durable-go/durable/internal/pgtest"
)

// pgStores opens n Stores (as n processes would) on one fresh schema, with
// a tolerance of 200 ms.
func pgStores(t *testing.T, n int) []*durable.Store {
	t.Helper()
	srv := pgtest.Require(t)
	schema := srv.Schema(t)
	var out []*durable.Store
	for range n {
		s, err := postgres.Open(context.Background(), srv.DSN()+"&schema="+schema+"&tolerance=200ms&pool_max_conns=4")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out = append(out, s)
	}
	return out
}

// TestPostgres: campaign, fenced writes, resignation and hand-over between
// two Stores, and Observe through a third, on a real server.
func TestPostgres(t *testing.T) {
	stores := pgStores(t, 3)
	s1, s2, s3 := stores[0], stores[1], stores[2]
	bg := context.Background()
	createLedger(t, s1)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	ch, err := election.Observe(ctx, s3, "elect", "leader")
	if err != nil {
		t.Fatal(err)
	}
	if l := observed(t, ch, 5*time.Second); !l.IsZero() {
		t.Fatalf("first report %+v", l)
	}

	a, err := election.Campaign(bg, s1, cfgFor(s1, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Lease().Value != "addr-of-a" {
		t.Errorf("granted value %q", a.Lease().Value)
	}
	wantLeader(t, observed(t, ch, 5*time.Second), a.Lease())
	got := make(chan *election.Term, 1)
	go func() {
		b, err := election.Campaign(bg, s2, cfgFor(s2, "b"))
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	if err := fencedAppend(bg, s1, a.Fence(), "a"); err != nil {
		t.Fatalf("a's write: %v", err)
	}
	if err := a.Resign(bg); err != nil {
		t.Fatal(err)
	}
	var b *election.Term
	select {
	case b = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("b did not win after a resigned")
	}
	if b == nil {
		t.FailNow()
	}
	// Observe may see the gap between the terms or not; it ends on b.
	l := observed(t, ch, 5*time.Second)
	if l.IsZero() {
		l = observed(t, ch, 5*time.Second)
	}
	wantLeader(t, l, b.Lease())
	if b.Lease().Token <= a.Lease().Token || b.Lease().Value != "addr-of-b" {
		t.Errorf("b's lease %+v after a's %+v", b.Lease(), a.Lease())
	}
	if err := fencedAppend(bg, s1, a.Fence(), "a-late"); !errorsIsFenced(err) {
		t.Errorf("a's write after resigning: %v", err)
	}
	if err := fencedAppend(bg, s2, b.Fence(), "b"); err != nil {
		t.Errorf("b's write: %v", err)
	}
	if err := b.Resign(bg); err != nil {
		t.Fatal(err)
	}
	if l := observed(t, ch, 5*time.Second); !l.IsZero() {
		t.Fatalf("after b resigned: %+v", l)
	}
	w, err := s3.GetWorkflow(bg, "elect", "ledger")
	if err != nil || string(w.Snapshot) != "a;b;" {
		t.Errorf("ledger %q, %v", w.Snapshot, err)
	}
}

// TestPostgresObserveScenario runs the whole Observe scenario on Postgres.
func TestPostgresObserveScenario(t *testing.T) {
	s := pgStores(t, 1)[0]
	observeScenario(t, s)
}
