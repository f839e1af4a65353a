package etcd

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestTombstoneRecords checks the tombstone's etcd records: a key
// completed before tombstones existed (no tombstone record) reads with
// ForgetAt = ExpiresAt and is gone when its outcome's lease ends; the
// tombstone record outlives the outcome record; and a payload is never
// read past its reported ExpiresAt, even while etcd still keeps its
// record (a leader change restarts lease countdowns).
func TestTombstoneRecords(t *testing.T) {
	c := startCluster(t, 1)
	cli := c.client(t)
	var seq atomic.Int64
	setup := func(t *testing.T) (*harness, *Backend) {
		h := &harness{cli: cli, prefix: fmt.Sprintf("tomb-%d", seq.Add(1)), clock: conformance.NewManualClock(), leases: map[clientv3.LeaseID]time.Time{}}
		t.Cleanup(func() { _ = h.Close() })
		be, err := h.Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = be.Close() })
		return h, be.(*Backend)
	}
	ctx := context.Background()
	ref := contract.KeyRef{Scope: "s", Key: "k"}

	t.Run("RecordWithoutTombstone", func(t *testing.T) {
		h, b := setup(t)
		now := h.clock.Now()
		id, _, err := b.grant(ctx, 60, now)
		if err != nil {
			t.Fatal(err)
		}
		kk := b.keyKeys(ref)
		expires := now.Add(time.Minute)
		// What CompleteKey stored before tombstones: record, token,
		// outcome on its retention lease; no tombstone record.
		if _, err := cli.Txn(ctx).Then(
			clientv3.OpPut(kk.rec, string(encodeKey(now, "fp", ""))),
			clientv3.OpPut(kk.tok, string(encodeToken("tok", stateCompleted, time.Time{}))),
			clientv3.OpPut(kk.out, string(encodeOutcome(now, expires, &contract.Outcome{Code: 200, Body: []byte("x")})), clientv3.WithLease(id)),
		).Commit(); err != nil {
			t.Fatal(err)
		}
		g, err := b.GetKey(ctx, ref)
		if err != nil || g.State != contract.KeyCompleted || !g.ForgetAt.Equal(expires) || !g.ExpiresAt.Equal(expires) || string(g.Outcome.Body) != "x" {
			t.Fatalf("an old completed record: %+v, %v; want ForgetAt = ExpiresAt", g, err)
		}
		h.Advance(time.Minute)
		if _, err := b.GetKey(ctx, ref); contract.CodeOf(err) != contract.NotFound {
			t.Fatalf("an old record past its retention: %v; want NotFound", err)
		}
		if res, err := b.Cleanup(ctx, contract.CleanupRequest{Limit: 10, TerminalAge: time.Hour}); err != nil || res.Keys != 1 {
			t.Fatalf("Cleanup: %+v, %v; want Keys 1", res, err)
		}
	})

	t.Run("TombstoneOutlivesOutcome", func(t *testing.T) {
		h, b := setup(t)
		cl, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		done, err := b.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: cl.Token, Outcome: contract.Outcome{Code: 201, Body: []byte("x")},
			Retain: time.Minute, Tombstone: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		kk := b.keyKeys(ref)
		r, err := cli.Get(ctx, kk.out)
		if err != nil || len(r.Kvs) != 1 {
			t.Fatal(r, err)
		}
		outTTL, err := cli.TimeToLive(ctx, clientv3.LeaseID(r.Kvs[0].Lease))
		if err != nil {
			t.Fatal(err)
		}
		r, err = cli.Get(ctx, kk.tomb)
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("no tombstone record: %v, %v", r, err)
		}
		if r.Kvs[0].Lease == 0 || clientv3.LeaseID(r.Kvs[0].Lease) == clientv3.LeaseID(outTTL.ID) {
			t.Fatal("the tombstone is not on a lease of its own")
		}
		// The payload is hidden once the reported ExpiresAt passed on the
		// local clock, although etcd still keeps the outcome record.
		h.clock.Advance(done.ExpiresAt.Sub(done.CompletedAt))
		g, err := b.GetKey(ctx, ref)
		if err != nil || g.State != contract.KeyExpired || g.Outcome == nil || g.Outcome.Body != nil || g.Outcome.Code != 201 {
			t.Fatalf("past ExpiresAt, outcome record still there: %+v, %v; want the tombstone", g, err)
		}
		if _, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: time.Minute}); contract.CodeOf(err) != contract.OutcomeExpired {
			t.Fatalf("ClaimKey past ExpiresAt: %v; want OutcomeExpired", err)
		}
		h.Advance(0) // etcd's timer catches up: the outcome record goes
		if r, err := cli.Get(ctx, kk.out); err != nil || len(r.Kvs) != 0 {
			t.Fatalf("the outcome record outlived its lease: %v, %v", r, err)
		}
		if g, err := b.GetKey(ctx, ref); err != nil || g.State != contract.KeyExpired || !g.ForgetAt.Equal(done.ForgetAt) || !g.ExpiresAt.Equal(done.ExpiresAt) {
			t.Fatalf("the tombstone record alone: %+v, %v", g, err)
		}
		h.Advance(done.ForgetAt.Sub(done.ExpiresAt))
		if r, err := cli.Get(ctx, kk.tomb); err != nil || len(r.Kvs) != 0 {
			t.Fatalf("the tombstone record outlived its lease: %v, %v", r, err)
		}
		if _, err := b.GetKey(ctx, ref); contract.CodeOf(err) != contract.NotFound {
			t.Fatalf("past ForgetAt: %v; want NotFound", err)
		}
	})
}
