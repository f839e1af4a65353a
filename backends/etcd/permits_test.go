package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAcquirePermit checks the semaphore one call at a time: permits are
// granted lowest first, as leases on "R#n" that every lease call takes;
// the N+1th caller gets LeaseBusy; a released or expired (busy marker
// gone) permit is the next one granted; permits beyond N are never
// granted; and tokens of the permits and of a lease on R itself form one
// increasing sequence.
func TestAcquirePermit(t *testing.T) {
	c := startCluster(t, 1)
	ctx := t.Context()
	cli := c.client(t)
	be, err := NewBackend(cli, Options{Prefix: "permits"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := durable.New(be)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const ttl = 30 * time.Second
	var last int64
	acquire := func(owner string, n int, wantRes string) contract.Lease {
		t.Helper()
		l, err := s.AcquirePermit(ctx, contract.PermitRequest{Scope: "sc", Resource: "R", Owner: owner, TTL: ttl, Value: "v-" + owner, Permits: n})
		if err != nil {
			t.Fatalf("AcquirePermit(%s, %d): %v", owner, n, err)
		}
		if l.Resource != wantRes || l.Owner != owner || l.Value != "v-"+owner || l.Scope != "sc" {
			t.Fatalf("AcquirePermit(%s, %d) = %+v, want %s", owner, n, l, wantRes)
		}
		if !l.ExpiresAt.Equal(l.AcquiredAt.Add(ttl)) {
			t.Errorf("ExpiresAt %v, want AcquiredAt + TTL", l.ExpiresAt)
		}
		if l.Token <= last {
			t.Fatalf("token %d after %d: not increasing", l.Token, last)
		}
		last = l.Token
		g, err := s.GetLease(ctx, "sc", wantRes)
		if err != nil || g != l {
			t.Fatalf("GetLease(%s) = %+v, %v; want %+v", wantRes, g, err, l)
		}
		return l
	}
	busy := func(n int) {
		t.Helper()
		_, err := s.AcquirePermit(ctx, contract.PermitRequest{Scope: "sc", Resource: "R", Owner: "x", TTL: ttl, Permits: n})
		if contract.CodeOf(err) != contract.LeaseBusy {
			t.Fatalf("AcquirePermit with every permit held = %v, want LeaseBusy", err)
		}
	}
	p1 := acquire("a", 3, "R#1")
	p2 := acquire("b", 3, "R#2")
	// A lease on R itself is no permit, and shares the token sequence.
	plain, err := s.AcquireLease(ctx, contract.LeaseRequest{Scope: "sc", Resource: "R", Owner: "p", TTL: ttl})
	if err != nil || plain.Token <= last {
		t.Fatalf("AcquireLease(R) = %+v, %v; want a token above %d", plain, err, last)
	}
	last = plain.Token
	p3 := acquire("c", 3, "R#3")
	busy(3)
	busy(2)
	// Released: the lowest free permit is the next granted.
	if ok, err := s.ReleaseLease(ctx, p2); err != nil || !ok {
		t.Fatalf("ReleaseLease = %v, %v", ok, err)
	}
	p2 = acquire("d", 3, "R#2")
	// A larger semaphore on the same resource goes on past them.
	p4 := acquire("e", 5, "R#4")
	// Expired beyond the tolerance (its busy marker's etcd lease ended):
	// taken over with a greater token, and the old holder is fenced.
	revokeMarker(t, cli, be.key(nsLeaseBusy, "sc", "R#1"))
	revokeMarker(t, cli, be.key(nsLeaseHold, "sc", "R#1"))
	p1b := acquire("f", 3, "R#1")
	if _, err := s.RenewLease(ctx, p1, ttl); contract.CodeOf(err) != contract.Fenced {
		t.Errorf("RenewLease of the expired permit after its takeover = %v, want Fenced", err)
	}
	if ok, _ := s.ReleaseLease(ctx, p1); ok {
		t.Error("ReleaseLease of the expired permit after its takeover = true")
	}
	// Released and expired at once: the lowest wins.
	for _, l := range []contract.Lease{p3, p2} {
		if ok, err := s.ReleaseLease(ctx, l); err != nil || !ok {
			t.Fatalf("ReleaseLease = %v, %v", ok, err)
		}
	}
	revokeMarker(t, cli, be.key(nsLeaseBusy, "sc", "R#4"))
	acquire("g", 5, "R#2")
	acquire("h", 5, "R#3")
	p4b := acquire("i", 5, "R#4")
	acquire("j", 5, "R#5")
	busy(5)
	// Permits are leases like any other: fenced writes, renewal,
	// DeleteRecord, ListLeases in byte order.
	if _, err := s.CreateWorkflow(ctx, contract.Workflow{Scope: "sc", ID: "wf", Status: contract.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateWorkflow(ctx, contract.Update{Scope: "sc", ID: "wf", ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusRunning, Fence: p1b.Fence()}); err != nil {
		t.Errorf("fenced update under a permit: %v", err)
	}
	if _, err := s.UpdateWorkflow(ctx, contract.Update{Scope: "sc", ID: "wf", ExpectStatus: contract.StatusRunning, ExpectRevision: 2, Status: contract.StatusRunning, Fence: p1.Fence()}); contract.CodeOf(err) != contract.Fenced {
		t.Errorf("fenced update under a taken-over permit = %v, want Fenced", err)
	}
	if r, err := s.RenewLease(ctx, p4b, ttl); err != nil || r.Value != "v-i" {
		t.Errorf("RenewLease(R#4) = %+v, %v", r, err)
	}
	if _, err := s.RenewLease(ctx, p4, ttl); contract.CodeOf(err) != contract.Fenced {
		t.Errorf("RenewLease of R#4's first grant after its takeover = %v, want Fenced", err)
	}
	ls, err := s.ListLeases(ctx, contract.LeaseListQuery{Scope: "sc", After: "R#1", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.Resource)
	}
	if fmt.Sprint(names) != "[R#2 R#3 R#4 R#5]" {
		t.Errorf("ListLeases after R#1 = %v", names)
	}
	if ok, err := s.DeleteRecord(ctx, contract.KindLease, "sc", "R#3"); err != nil || !ok {
		t.Fatalf("DeleteRecord(R#3) = %v, %v", ok, err)
	}
	acquire("k", 5, "R#3")
}

// TestAcquirePermitConcurrent races clients, each on its own etcd client
// and backend, for a semaphore: all N callers rushing an empty semaphore
// are granted (no LeaseBusy while a permit is free), each a different
// permit; and under churn (acquire, hold, release) no permit ever has two
// holders, no more than N are held, and every permit's tokens increase,
// all of them distinct.
func TestAcquirePermitConcurrent(t *testing.T) {
	c := startCluster(t, 1)
	ctx := t.Context()
	const clients, n = 6, 3
	bes := make([]*Backend, clients)
	for i := range bes {
		be, err := NewBackend(c.client(t), Options{Prefix: "permits-race"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = be.Close() })
		bes[i] = be
	}
	const ttl = 30 * time.Second

	t.Run("Rush", func(t *testing.T) {
		for round := range 8 {
			res := fmt.Sprintf("rush-%d", round)
			got := make([]contract.Lease, clients)
			errs := make([]error, clients)
			var wg sync.WaitGroup
			for i := range clients {
				wg.Go(func() {
					got[i], errs[i] = bes[i].AcquirePermit(ctx, contract.PermitRequest{Resource: res, Owner: fmt.Sprintf("o%d", i), TTL: ttl, Permits: clients})
				})
			}
			wg.Wait()
			seen := map[string]bool{}
			for i := range clients {
				if errs[i] != nil {
					t.Fatalf("round %d: client %d: %v (with %d permits for %d callers)", round, i, errs[i], clients, clients)
				}
				if seen[got[i].Resource] {
					t.Fatalf("round %d: %s granted twice", round, got[i].Resource)
				}
				seen[got[i].Resource] = true
			}
			if _, err := bes[0].AcquirePermit(ctx, contract.PermitRequest{Resource: res, Owner: "late", TTL: ttl, Permits: clients}); contract.CodeOf(err) != contract.LeaseBusy {
				t.Fatalf("round %d: the N+1th caller got %v, want LeaseBusy", round, err)
			}
		}
	})

	t.Run("Churn", func(t *testing.T) {
		var (
			mu      sync.Mutex
			holder  = map[string]string{} // permit → owner, while held
			tokens  = map[int64]bool{}
			last    = map[string]int64{} // permit → its latest token
			grants  int
			maxHeld int
			errs    []error
		)
		fail := func(err error) { // with mu held
			if len(errs) < 10 {
				errs = append(errs, err)
			}
		}
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				owner := fmt.Sprintf("o%d", i)
				for range 40 {
					l, err := bes[i].AcquirePermit(ctx, contract.PermitRequest{Resource: "churn", Owner: owner, TTL: ttl, Permits: n})
					// LeaseBusy, or Unavailable when the permits changed
					// hands on every one of AcquirePermit's rounds (the
					// documented, retryable answer to churn; seen on a
					// loaded machine): try again. Safety is what this
					// test checks.
					if c := contract.CodeOf(err); c == contract.LeaseBusy || c == contract.Unavailable {
						time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
						continue
					}
					if err != nil {
						mu.Lock()
						fail(err)
						mu.Unlock()
						return
					}
					mu.Lock()
					base, num, ok := contract.SplitPermit(l.Resource)
					switch {
					case !ok || base != "churn" || num > n:
						fail(fmt.Errorf("granted %q", l.Resource))
					case holder[l.Resource] != "":
						fail(fmt.Errorf("%s granted to %s while %s holds it", l.Resource, owner, holder[l.Resource]))
					case tokens[l.Token]:
						fail(fmt.Errorf("token %d issued twice", l.Token))
					case l.Token <= last[l.Resource]:
						fail(fmt.Errorf("%s: token %d after %d", l.Resource, l.Token, last[l.Resource]))
					}
					holder[l.Resource] = owner
					tokens[l.Token] = true
					last[l.Resource] = l.Token
					grants++
					maxHeld = max(maxHeld, len(holder))
					mu.Unlock()
					time.Sleep(time.Duration(rand.IntN(6)) * time.Millisecond)
					mu.Lock()
					delete(holder, l.Resource) // before the release: the model never lags
					mu.Unlock()
					if ok, err := bes[i].ReleaseLease(ctx, l); err != nil || !ok {
						mu.Lock()
						fail(fmt.Errorf("release %s by %s: %v, %v", l.Resource, owner, ok, err))
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			t.Error(err)
		}
		if maxHeld > n {
			t.Errorf("%d permits held at once, want at most %d", maxHeld, n)
		}
		if grants == 0 {
			t.Fatal("no permit was granted")
		}
		t.Logf("%d grants, at most %d held at once", grants, maxHeld)
	})
}

// TestAcquirePermitLowestFree checks, with the permits' states set up by
// hand, that the lowest permit AcquireLease would grant is the one
// granted: a permit whose holder key expired but whose busy marker lives
// is still held, one whose busy marker expired is free.
func TestAcquirePermitLowestFree(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	cli := c.client(t)
	be, err := NewBackend(cli, Options{Prefix: "permits-low"})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	const ttl = 30 * time.Second
	req := contract.PermitRequest{Resource: "R", Owner: "o", TTL: ttl, Permits: 12}
	var ls []contract.Lease
	for range 12 {
		l, err := be.AcquirePermit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	// Permit 2 is in its last tolerance (holder key gone), permit 11 is
	// expired beyond it (busy marker gone), permit 10 was released: 10 is
	// granted (10 sorts before 2 and 11 in byte order, not in number).
	revokeMarker(t, cli, be.key(nsLeaseHold, "", "R#2"))
	revokeMarker(t, cli, be.key(nsLeaseBusy, "", "R#11"))
	if ok, err := be.ReleaseLease(ctx, ls[9]); err != nil || !ok {
		t.Fatal(ok, err)
	}
	for _, want := range []string{"R#10", "R#11"} {
		l, err := be.AcquirePermit(ctx, req)
		if err != nil || l.Resource != want {
			t.Fatalf("AcquirePermit = %+v, %v; want %s", l, err, want)
		}
	}
	if _, err := be.AcquirePermit(ctx, req); contract.CodeOf(err) != contract.LeaseBusy {
		t.Fatalf("AcquirePermit with permit 2 in its last tolerance = %v, want LeaseBusy", err)
	}
}

// TestAcquirePermitAtomicLowest checks the grant's own transaction: it
// grants permit n only if, at its revision, permit n has no record and
// every lower permit is held, so a lower permit freed after the read (a
// release, an expiry) fails it and the next attempt takes the lower one.
// It does so up to permit 128, the most one transaction can check (etcd
// allows 128 comparisons); beyond, AcquirePermit still grants the lowest
// free permit as of its read.
func TestAcquirePermitAtomicLowest(t *testing.T) {
	c := startCluster(t, 1)
	ctx := context.Background()
	cli := c.client(t)
	be, err := NewBackend(cli, Options{Prefix: "permits-atomic"})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	const ttl = 30 * time.Second
	const n = maxLowerCmps + 1
	req := contract.PermitRequest{Resource: "R", Owner: "o", TTL: ttl, Permits: 300}
	ls := map[string]contract.Lease{}
	for range n - 1 {
		l, err := be.AcquirePermit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ls[l.Resource] = l
	}
	reads := be.permitReads("", "R")
	try := func(k int) (bool, permitState) {
		t.Helper()
		lk := be.leaseKeys("", contract.PermitResource("R", k))
		r, err := be.grantPermitTxn(ctx, "", "R", k, []clientv3.Op{
			clientv3.OpPut(lk.rec, string(encodeLease("x", time.Now(), time.Now().Add(ttl), ""))),
			clientv3.OpPut(lk.busy, ""),
		}, reads)
		if err != nil {
			t.Fatal(err)
		}
		if r.Succeeded {
			if _, err := cli.Txn(ctx).Then(clientv3.OpDelete(lk.rec), clientv3.OpDelete(lk.busy)).Commit(); err != nil {
				t.Fatal(err)
			}
			return true, permitState{}
		}
		return false, be.permitStateOf("", "R", r, 0, req.Permits)
	}
	// Permit 128 is the lowest free: granted (127 lower permits checked).
	if ok, _ := try(n); !ok {
		t.Fatal("the grant of the lowest free permit failed")
	}
	// A lower permit freed since the read (released, or expired beyond the
	// tolerance): the grant fails, and its reads show the lower permit
	// free.
	for _, low := range []int{1, 64, n - 1} {
		name := contract.PermitResource("R", low)
		if low == 64 {
			revokeMarker(t, cli, be.key(nsLeaseBusy, "", name))
		} else if ok, err := be.ReleaseLease(ctx, ls[name]); err != nil || !ok {
			t.Fatal(ok, err)
		}
		ok, st := try(n)
		if ok {
			t.Fatalf("permit %d granted while permit %d was free", n, low)
		}
		if got, _ := st.lowestFree(); got != low {
			t.Fatalf("the failed grant read permit %d as the lowest free, want %d", got, low)
		}
		l, err := be.AcquirePermit(ctx, req)
		if err != nil || l.Resource != name {
			t.Fatalf("AcquirePermit = %+v, %v; want %s", l, err, name)
		}
	}
	// Beyond permit 128 the grant fits in one transaction all the same.
	for want := n; want <= n+5; want++ {
		l, err := be.AcquirePermit(ctx, req)
		if err != nil || l.Resource != contract.PermitResource("R", want) {
			t.Fatalf("AcquirePermit = %+v, %v; want permit %d", l, err, want)
		}
	}
}
