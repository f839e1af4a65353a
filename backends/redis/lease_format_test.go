package redis

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	goredis "github.com/redis/go-redis/v9"
)

// The lease record has three forms (see the lrec helper in scripts.go):
// the packed string a grant writes, the tombstone ("") a release leaves,
// and the hash an earlier version wrote. These tests write the hash form
// by hand, as that version did, and require every reader and writer to
// treat it as the lease it is; and they follow a tombstone from release to
// Cleanup.

// legacyLease writes the hash record (and the index entry and counter)
// that the backend before the packed format left for a grant.
func legacyLease(t *testing.T, ctx context.Context, rdb goredis.UniversalClient, b *Backend, scope contract.Scope,
	res, owner string, tok int64, acquired, expires time.Time, reqID, value string) {
	t.Helper()
	base := b.base(scope)
	k := base + "l:" + res
	if err := rdb.HSet(ctx, k, "o", owner, "t", strconv.FormatInt(tok, 10),
		"a", strconv.FormatInt(acquired.UnixMicro(), 10), "e", strconv.FormatInt(expires.UnixMicro(), 10),
		"n", reqID, "v", value).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, base+"i:l", goredis.Z{Member: res}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, base+"t:"+contract.TokenResource(res), tok, 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// keyType is the Redis type of the record key k ("none" when absent).
func keyType(t *testing.T, ctx context.Context, rdb goredis.UniversalClient, k string) string {
	t.Helper()
	typ, err := rdb.Type(ctx, k).Result()
	if err != nil {
		t.Fatal(err)
	}
	return typ
}

// indexed reports whether res has an entry in the scope's lease index.
func indexed(t *testing.T, ctx context.Context, rdb goredis.UniversalClient, b *Backend, scope contract.Scope, res string) bool {
	t.Helper()
	_, err := rdb.ZScore(ctx, b.base(scope)+"i:l", res).Result()
	if err == goredis.Nil {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func eachServer(t *testing.T, f func(t *testing.T, rdb goredis.UniversalClient)) {
	for name, rdb := range map[string]goredis.UniversalClient{
		"node": nodeClient(t, sharedNode(t)), "cluster": clusterClient(t, sharedCluster(t)),
	} {
		t.Run(name, func(t *testing.T) { f(t, rdb) })
	}
}

// TestLegacyHashLeasesAreLeases: a lease an earlier version wrote as a
// hash is busy to another owner, returned by GetLease, ListLeases and a
// retried grant, valid as a fence, renewed, released, taken over with a
// higher token once expired, cleaned up and deleted.
func TestLegacyHashLeasesAreLeases(t *testing.T) {
	eachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		ctx := testCtx(t)
		b, clock := rawBackend(t, rdb)
		const scope = contract.Scope("legacy")
		now := clock.Now().UTC().Truncate(time.Microsecond)
		acq, exp := now.Add(-time.Second), now.Add(time.Minute)
		const value = "v\x00alue"
		legacyLease(t, ctx, rdb, b, scope, "held", "alice", 7, acq, exp, "req-1", value)
		want := contract.Lease{Scope: scope, Resource: "held", Owner: "alice", Token: 7, AcquiredAt: acq, ExpiresAt: exp, Value: value}
		same := func(what string, got contract.Lease, w contract.Lease) {
			t.Helper()
			if got.Owner != w.Owner || got.Token != w.Token || !got.AcquiredAt.Equal(w.AcquiredAt) ||
				!got.ExpiresAt.Equal(w.ExpiresAt) || got.Value != w.Value || got.Resource != w.Resource {
				t.Fatalf("%s = %+v, want %+v", what, got, w)
			}
		}

		// Held: busy to another owner (the case a reader of strings only
		// would get wrong), read back by GetLease and ListLeases.
		if _, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "held", Owner: "bob", TTL: time.Minute}); contract.CodeOf(err) != contract.LeaseBusy {
			t.Fatalf("AcquireLease of a held legacy lease: %v, want LeaseBusy", err)
		}
		got, err := b.GetLease(ctx, scope, "held")
		if err != nil {
			t.Fatal(err)
		}
		same("GetLease", got, want)
		ls, err := b.ListLeases(ctx, contract.LeaseListQuery{Scope: scope, Held: true, Limit: 10})
		if err != nil || len(ls) != 1 {
			t.Fatalf("ListLeases = %v, %v; want the legacy lease", ls, err)
		}
		same("ListLeases", ls[0], want)

		// A retry of the request that wrote it finds its grant.
		base := b.base(scope)
		v, err := b.run(ctx, leaseAcquire, true, []string{base + "l:held", base + "t:held"},
			base, b.now(), "held", "alice", us(time.Minute), b.tol(), "req-1", value, "held")
		if err != nil {
			t.Fatal(err)
		}
		r := asReply(v)
		if kind := r.str(); kind != "ok" {
			t.Fatalf("a retried grant of the legacy lease: %s", kind)
		}
		got, err = decodeAcquired(r, contract.LeaseRequest{Scope: scope, Resource: "held", Owner: "alice", Value: value})
		if err != nil {
			t.Fatal(err)
		}
		same("a retried grant", got, want)

		// A valid fence, and an invalid one.
		if _, err := b.CreateWorkflow(ctx, contract.Workflow{Scope: scope, ID: "w", Status: "running"}); err != nil {
			t.Fatal(err)
		}
		up := contract.Update{Scope: scope, ID: "w", ExpectStatus: "running", Status: "running",
			Fence: &contract.Fence{Resource: "held", Owner: "alice", Token: 8}}
		if _, err := b.UpdateWorkflow(ctx, up); contract.CodeOf(err) != contract.Fenced {
			t.Fatalf("UpdateWorkflow fenced by a wrong token: %v, want Fenced", err)
		}
		up.Fence.Token = 7
		if _, err := b.UpdateWorkflow(ctx, up); err != nil {
			t.Fatalf("UpdateWorkflow fenced by the legacy lease: %v", err)
		}

		// Renewal keeps everything but the expiry and writes the packed form.
		clock.Advance(time.Second)
		got, err = b.RenewLease(ctx, want, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		renewed := want
		renewed.ExpiresAt = now.Add(time.Second + 2*time.Minute)
		same("RenewLease", got, renewed)
		if typ := keyType(t, ctx, rdb, base+"l:held"); typ != "string" {
			t.Fatalf("the record after a renewal is a %s, want a string", typ)
		}
		got, _ = b.GetLease(ctx, scope, "held")
		same("GetLease after renewal", got, renewed)

		// Release by a stranger fails, by the owner succeeds.
		legacyLease(t, ctx, rdb, b, scope, "rel", "alice", 3, acq, exp, "", "")
		if ok, err := b.ReleaseLease(ctx, contract.Lease{Scope: scope, Resource: "rel", Owner: "alice", Token: 4}); ok || err != nil {
			t.Fatalf("ReleaseLease with a wrong token = %v, %v", ok, err)
		}
		if ok, err := b.ReleaseLease(ctx, contract.Lease{Scope: scope, Resource: "rel", Owner: "alice", Token: 3}); !ok || err != nil {
			t.Fatalf("ReleaseLease of a legacy lease = %v, %v", ok, err)
		}
		if _, err := b.GetLease(ctx, scope, "rel"); contract.CodeOf(err) != contract.NotFound {
			t.Fatalf("GetLease after release: %v, want NotFound", err)
		}
		if l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "rel", Owner: "bob", TTL: time.Minute}); err != nil || l.Token <= 3 {
			t.Fatalf("AcquireLease after release = %+v, %v; want a token above 3", l, err)
		}

		// Expired, with its counter lost: the takeover still goes past it.
		legacyLease(t, ctx, rdb, b, scope, "old", "alice", 40, acq, now, "", "")
		if err := rdb.Del(ctx, base+"t:old").Err(); err != nil {
			t.Fatal(err)
		}
		clock.Advance(b.ClockTolerance() + time.Second)
		l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "old", Owner: "bob", TTL: time.Minute})
		if err != nil || l.Token != 41 {
			t.Fatalf("AcquireLease of an expired legacy lease = %+v, %v; want token 41", l, err)
		}

		// Cleanup deletes an expired one; DeleteRecord a held one.
		now = clock.Now().UTC().Truncate(time.Microsecond)
		legacyLease(t, ctx, rdb, b, scope, "gone", "alice", 5, now.Add(-time.Hour), now.Add(-time.Minute), "", "")
		legacyLease(t, ctx, rdb, b, scope, "del", "alice", 6, now, now.Add(time.Hour), "", "")
		cr, err := b.Cleanup(ctx, contract.CleanupRequest{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if cr.Leases != 1 || keyType(t, ctx, rdb, base+"l:gone") != "none" || indexed(t, ctx, rdb, b, scope, "gone") {
			t.Fatalf("Cleanup of an expired legacy lease: %+v", cr)
		}
		if ok, err := b.DeleteRecord(ctx, contract.KindLease, scope, "del"); !ok || err != nil {
			t.Fatalf("DeleteRecord of a legacy lease = %v, %v", ok, err)
		}
		if keyType(t, ctx, rdb, base+"l:del") != "none" || indexed(t, ctx, rdb, b, scope, "del") {
			t.Fatal("DeleteRecord left the legacy lease or its index entry")
		}

		// A semaphore whose permit 1 is a held legacy lease.
		legacyLease(t, ctx, rdb, b, scope, "S#1", "alice", 9, now, now.Add(time.Hour), "", "")
		if _, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: scope, Resource: "S", Owner: "bob", TTL: time.Minute, Permits: 1}); contract.CodeOf(err) != contract.LeaseBusy {
			t.Fatalf("AcquirePermit with its one permit held as a legacy lease: %v, want LeaseBusy", err)
		}
		p, err := b.AcquirePermit(ctx, contract.PermitRequest{Scope: scope, Resource: "S", Owner: "bob", TTL: time.Minute, Permits: 2})
		if err != nil || p.Resource != "S#2" || p.Token <= 9 {
			t.Fatalf("AcquirePermit = %+v, %v; want S#2 with a token above 9", p, err)
		}
	})
}

// TestReleaseLeavesATombstoneUntilCleanup: a release leaves the empty
// string and the index entry; nothing reads it as a lease; the next grant
// reuses both; DeleteRecord and Cleanup remove both, and a grant after
// that indexes the resource again (a string record is always indexed).
func TestReleaseLeavesATombstoneUntilCleanup(t *testing.T) {
	eachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		ctx := testCtx(t)
		b, _ := rawBackend(t, rdb)
		const scope = contract.Scope("tomb")
		k := b.base(scope) + "l:R"
		req := contract.LeaseRequest{Scope: scope, Resource: "R", Owner: "a", TTL: time.Minute}
		grantRelease := func() contract.Lease {
			t.Helper()
			l, err := b.AcquireLease(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if !indexed(t, ctx, rdb, b, scope, "R") {
				t.Fatal("a granted lease is not in the lease index")
			}
			if ok, err := b.ReleaseLease(ctx, l); !ok || err != nil {
				t.Fatalf("ReleaseLease = %v, %v", ok, err)
			}
			return l
		}
		tombstone := func(when string) {
			t.Helper()
			if s, err := rdb.Get(ctx, k).Result(); err != nil || s != "" || !indexed(t, ctx, rdb, b, scope, "R") {
				t.Fatalf("%s: record %q, %v, indexed %v; want the tombstone, indexed", when, s, err, indexed(t, ctx, rdb, b, scope, "R"))
			}
		}
		gone := func(when string) {
			t.Helper()
			if keyType(t, ctx, rdb, k) != "none" || indexed(t, ctx, rdb, b, scope, "R") {
				t.Fatalf("%s: the tombstone or its index entry is still there", when)
			}
		}

		l := grantRelease()
		tombstone("after release")
		if ok, err := b.ReleaseLease(ctx, l); ok || err != nil {
			t.Fatalf("a second ReleaseLease = %v, %v; want false", ok, err)
		}
		if _, err := b.GetLease(ctx, scope, "R"); contract.CodeOf(err) != contract.NotFound {
			t.Fatalf("GetLease of a tombstone: %v, want NotFound", err)
		}
		if ls, err := b.ListLeases(ctx, contract.LeaseListQuery{Scope: scope, Limit: 10}); err != nil || len(ls) != 0 {
			t.Fatalf("ListLeases with a tombstone = %v, %v; want none", ls, err)
		}
		if _, err := b.RenewLease(ctx, l, time.Minute); contract.CodeOf(err) != contract.Fenced {
			t.Fatalf("RenewLease of a released lease: %v, want Fenced", err)
		}
		if cr, err := b.CountCleanup(ctx, contract.CleanupRequest{Limit: 100}); err != nil || cr.Leases != 0 {
			t.Fatalf("CountCleanup with a tombstone = %+v, %v; want 0 leases", cr, err)
		}
		tombstone("after CountCleanup")

		l2 := grantRelease()
		if l2.Token <= l.Token {
			t.Fatalf("the grant after a tombstone has token %d, not above %d", l2.Token, l.Token)
		}
		if ok, err := b.DeleteRecord(ctx, contract.KindLease, scope, "R"); ok || err != nil {
			t.Fatalf("DeleteRecord of a tombstone = %v, %v; want false (no lease)", ok, err)
		}
		gone("after DeleteRecord")

		grantRelease()
		cr, err := b.Cleanup(ctx, contract.CleanupRequest{Limit: 100})
		if err != nil || cr.Leases != 0 {
			t.Fatalf("Cleanup with a tombstone = %+v, %v; want 0 leases counted", cr, err)
		}
		gone("after Cleanup")
		grantRelease()
		tombstone("after a grant and release that followed Cleanup")
	})
}

// TestUnreadableLeaseRecordIsAnError: a record that is neither form (an
// operator's hand-written value) fails the operations that read it; none
// takes it for a free resource.
func TestUnreadableLeaseRecordIsAnError(t *testing.T) {
	ctx := testCtx(t)
	rdb := nodeClient(t, sharedNode(t))
	b, _ := rawBackend(t, rdb)
	const scope = contract.Scope("bad")
	if err := rdb.Set(ctx, b.base(scope)+"l:R", "not a lease", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "R", Owner: "a", TTL: time.Minute}); err == nil {
		t.Fatalf("AcquireLease over an unreadable record granted %+v", l)
	}
	if l, err := b.GetLease(ctx, scope, "R"); err == nil {
		t.Fatalf("GetLease of an unreadable record = %+v", l)
	}
	if ok, err := b.ReleaseLease(ctx, contract.Lease{Scope: scope, Resource: "R", Owner: "a", Token: 1}); ok {
		t.Fatalf("ReleaseLease of an unreadable record = %v, %v", ok, err)
	}
}
