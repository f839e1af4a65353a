package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRealTimeExpiry checks, on the real clock and etcd's real lease
// timers (no harness moving time), that a lease's fenced writes stop by
// its TTL minus the tolerance, that a takeover waits the TTL plus the
// tolerance, and likewise for a claim and a completed key's retention.
// The conformance suite checks the same rules with time moved by the
// harness; this test checks that etcd's timers are what enforce them.
func TestRealTimeExpiry(t *testing.T) {
	c := startCluster(t, 3)
	open := func(t *testing.T) *durable.Store {
		s, err := durable.Open(t.Context(), c.dsn("realtime-"+t.Name(), "tolerance=1s"))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	const ttl = 2 * time.Second // holder key 1 s, busy marker 3 s
	const poll = 50 * time.Millisecond
	// etcd's leader looks for expired leases every 500 ms and revokes them
	// through raft: a key can outlive its lease by that much.
	const revokeLag = 1500 * time.Millisecond

	t.Run("Lease", func(t *testing.T) {
		t.Parallel()
		s, other := open(t), open(t)
		ctx := t.Context()
		w, err := s.CreateWorkflow(ctx, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		l, err := s.AcquireLease(ctx, contract.LeaseRequest{Resource: "res-1", Owner: "owner-1", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if d := l.ExpiresAt.Sub(l.AcquiredAt); d != ttl {
			t.Errorf("ExpiresAt - AcquiredAt = %v, want %v", d, ttl)
		}
		var lastWrite, fenced, takeover time.Time
		for fenced.IsZero() || takeover.IsZero() {
			if time.Since(t0) > ttl+time.Second+revokeLag+2*time.Second {
				t.Fatalf("after %v: fenced at %v, takeover at %v", time.Since(t0), fenced, takeover)
			}
			if fenced.IsZero() {
				w2, err := s.UpdateWorkflow(ctx, contract.Update{ID: "wf-1", ExpectStatus: contract.StatusRunning, Status: contract.StatusRunning, Fence: l.Fence()})
				switch contract.CodeOf(err) {
				case contract.Code(0):
					if err == nil {
						lastWrite, w = time.Now(), w2
					}
				case contract.Fenced:
					fenced = time.Now()
				default:
					t.Fatalf("fenced update: %v", err)
				}
			}
			l2, err := other.AcquireLease(ctx, contract.LeaseRequest{Resource: "res-1", Owner: "owner-2", TTL: ttl})
			switch {
			case err == nil:
				takeover = time.Now()
				if l2.Token <= l.Token {
					t.Errorf("token after takeover %d, want > %d", l2.Token, l.Token)
				}
			case contract.CodeOf(err) != contract.LeaseBusy:
				t.Fatalf("takeover: %v", err)
			}
			if !takeover.IsZero() && fenced.IsZero() {
				t.Fatalf("takeover at %v while the old holder's fenced writes still succeed", takeover.Sub(t0))
			}
			time.Sleep(poll)
		}
		t.Logf("last fenced write %v, fenced %v, takeover %v after the grant began (holder lease 1s, busy 3s)",
			lastWrite.Sub(t0), fenced.Sub(t0), takeover.Sub(t0))
		if d := fenced.Sub(t0); d < ttl-time.Second || d > ttl-time.Second+revokeLag+poll {
			t.Errorf("fenced %v after the grant, want within [%v, %v]", d, ttl-time.Second, ttl-time.Second+revokeLag+poll)
		}
		if d := takeover.Sub(t0); d < ttl+time.Second || d > ttl+time.Second+revokeLag+poll {
			t.Errorf("takeover %v after the grant, want within [%v, %v]", d, ttl+time.Second, ttl+time.Second+revokeLag+poll)
		}
		if !lastWrite.Before(takeover) {
			t.Errorf("last fenced write %v not before the takeover %v", lastWrite.Sub(t0), takeover.Sub(t0))
		}
		if w.Revision < 2 {
			t.Errorf("no fenced write succeeded while the lease was valid")
		}
	})

	t.Run("Claim", func(t *testing.T) {
		t.Parallel()
		s, other := open(t), open(t)
		ctx := t.Context()
		req := contract.ClaimRequest{KeyRef: contract.KeyRef{Key: "key-1"}, Fingerprint: "fp", TTL: ttl}
		t0 := time.Now()
		c1, err := s.ClaimKey(ctx, req)
		if err != nil || c1.Kind != contract.ClaimNew {
			t.Fatalf("ClaimKey = %v, %v", c1.Kind, err)
		}
		for {
			c2, err := other.ClaimKey(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if c2.Kind == contract.ClaimReclaimed {
				d := time.Since(t0)
				t.Logf("reclaimed %v after the claim (busy marker 3s)", d)
				if d < ttl+time.Second {
					t.Errorf("reclaimed %v after the claim, before TTL + tolerance %v", d, ttl+time.Second)
				}
				if _, err := s.CompleteKey(ctx, contract.Completion{KeyRef: req.KeyRef, Token: c1.Token, Outcome: contract.Outcome{Code: 200}}); contract.CodeOf(err) != contract.Fenced {
					t.Errorf("completion with the reclaimed token: %v, want Fenced", err)
				}
				break
			}
			if c2.Kind != contract.ClaimInFlight {
				t.Fatalf("ClaimKey = %v, want in flight", c2.Kind)
			}
			if time.Since(t0) > ttl+time.Second+revokeLag+time.Second {
				t.Fatalf("still in flight %v after the claim", time.Since(t0))
			}
			time.Sleep(poll)
		}
	})

	t.Run("Retention", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		ctx := t.Context()
		ref := contract.KeyRef{Key: "key-1"}
		c1, err := s.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		done, err := s.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: c1.Token, Outcome: contract.Outcome{Code: 201}, Retain: time.Second, Tombstone: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if d := done.ExpiresAt.Sub(done.CompletedAt); d != time.Second {
			t.Errorf("ExpiresAt - CompletedAt = %v, want 1s", d)
		}
		if d := done.ForgetAt.Sub(done.CompletedAt); d != 2*time.Second {
			t.Errorf("ForgetAt - CompletedAt = %v, want 2s", d)
		}
		// The outcome goes after Retain (1 s), leaving the tombstone; the
		// tombstone goes after its own 2 s.
		var expiredAt time.Duration
		for {
			rec, err := s.GetKey(ctx, ref)
			d := time.Since(t0)
			if contract.CodeOf(err) == contract.NotFound {
				t.Logf("outcome dropped %v, key forgotten %v after completion (Retain 1s, Tombstone 2s)", expiredAt, d)
				if expiredAt == 0 {
					t.Error("forgotten without ever reading as expired (a tombstone)")
				}
				if d < 2*time.Second {
					t.Errorf("forgotten after %v, before its tombstone ended", d)
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			switch rec.State {
			case contract.KeyExpired:
				if expiredAt == 0 {
					expiredAt = d
					if d < time.Second {
						t.Errorf("outcome dropped after %v, before its retention", d)
					}
				}
				if rec.Outcome == nil || rec.Outcome.Code != 201 || len(rec.Outcome.Body) != 0 || rec.Outcome.Header != nil {
					t.Errorf("tombstone outcome = %+v, want the code alone", rec.Outcome)
				}
			case contract.KeyCompleted:
				if expiredAt != 0 {
					t.Errorf("completed again at %v after reading as expired", d)
				}
			}
			if d > 2*time.Second+revokeLag+time.Second {
				t.Fatalf("still there %v after completion (state %s)", d, rec.State)
			}
			time.Sleep(poll)
		}
		res, err := s.Cleanup(ctx, contract.CleanupRequest{TerminalAge: time.Hour})
		if err != nil || res.Keys != 1 {
			t.Errorf("Cleanup = %+v, %v; want the expired key deleted", res, err)
		}
	})
}

// TestMinimumLeaseTTL checks the reports when etcd grants a longer lease
// than asked: with a 1 s election timeout the cluster's minimum lease TTL
// is 2 s, so the holder key of a 2 s lease (tolerance 1 s) lives 2 s, not
// 1 s; ExpiresAt says 3 s, and the busy marker outlives it by the
// tolerance.
func TestMinimumLeaseTTL(t *testing.T) {
	c := startClusterElection(t, 1, 1000)
	ctx := t.Context()
	s, err := durable.Open(ctx, c.dsn("minttl", "tolerance=1s"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.AcquireLease(ctx, contract.LeaseRequest{Resource: "res-1", Owner: "owner-1", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if d := l.ExpiresAt.Sub(l.AcquiredAt); d != 3*time.Second {
		t.Errorf("ExpiresAt - AcquiredAt = %v, want 3s (the 2s minimum lease TTL of the holder key + 1s tolerance)", d)
	}
	var b *Backend
	if !s.As(&b) {
		t.Fatal("Store.As(*Backend) failed")
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lk := b.leaseKeys("", "res-1")
	r, err := b.cli.Get(cctx, lk.busy)
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("busy marker: %v", err)
	}
	ttl, err := b.cli.TimeToLive(cctx, clientv3.LeaseID(r.Kvs[0].Lease))
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL < 4 {
		t.Errorf("busy marker's etcd lease granted %ds, want at least 4s (ExpiresAt + tolerance)", ttl.GrantedTTL)
	}
}
