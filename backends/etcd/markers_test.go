package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// markerLease returns the etcd lease a marker key is attached to; the key
// must exist.
func markerLease(t *testing.T, cli *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	r, err := cli.Get(context.Background(), key)
	if err != nil || len(r.Kvs) != 1 || r.Kvs[0].Lease == 0 {
		t.Fatalf("marker %q: %v (%d keys); want one key on an etcd lease", key, err, len(r.Kvs))
	}
	return clientv3.LeaseID(r.Kvs[0].Lease)
}

func revokeMarker(t *testing.T, cli *clientv3.Client, key string) {
	t.Helper()
	id := markerLease(t, cli, key)
	if _, err := cli.Revoke(context.Background(), id); err != nil {
		t.Fatalf("revoke %q: %v", key, err)
	}
}

func errCode(err error) contract.Code {
	var ce *contract.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	return -1 // not a contract error
}

// TestLeaseMarkersRevokedOutOfOrder ends the etcd leases behind a durable
// lease's holder key and busy marker one at a time, in every order (as a
// leader change or an operator could, out of the order of their TTLs),
// while the holder still believes it holds the lease, and has a second
// owner try to take it over. After every step it checks that at most one
// owner's fence is valid (a fenced UpdateWorkflow and a fenced CompleteKey
// agree, and at most one owner's apply), that a takeover's token is
// greater than every earlier one, that an old holder never renews or
// writes after a takeover, and that the owner whose markers are intact
// keeps its grant.
func TestLeaseMarkersRevokedOutOfOrder(t *testing.T) {
	c := startCluster(t, 1)
	cliA, cliB := c.client(t), c.client(t)
	ctx := context.Background()
	const scope, res, wf = contract.Scope("s"), "res", "wf"
	orders := []struct {
		name  string
		steps []string // "hold", "busy": whose etcd lease is revoked next
	}{
		{"BusyOnly", []string{"busy"}},
		{"HolderOnly", []string{"hold"}},
		{"BusyThenHolder", []string{"busy", "hold"}},
		{"HolderThenBusy", []string{"hold", "busy"}},
	}
	seq := 0
	for _, o := range orders {
		for _, renewFirst := range []bool{false, true} {
			seq++
			prefix := fmt.Sprintf("markers-%d", seq)
			t.Run(fmt.Sprintf("%s/renewFirst=%v", o.name, renewFirst), func(t *testing.T) {
				a, err := NewBackend(cliA, Options{Prefix: prefix, Tolerance: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = a.Close() })
				b, err := NewBackend(cliB, Options{Prefix: prefix, Tolerance: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = b.Close() })
				if _, err := a.CreateWorkflow(ctx, contract.Workflow{Scope: scope, ID: wf, Status: contract.StatusRunning}); err != nil {
					t.Fatal(err)
				}
				nkey := 0
				// valid reports whether l's fence is valid now: a fenced
				// workflow update and a fenced key completion must agree.
				valid := func(be *Backend, l contract.Lease) bool {
					t.Helper()
					_, uerr := be.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: wf, ExpectStatus: contract.StatusRunning, Status: contract.StatusRunning, Fence: l.Fence()})
					if uerr != nil && errCode(uerr) != contract.Fenced {
						t.Fatalf("fenced update by %s: %v", l.Owner, uerr)
					}
					nkey++
					ref := contract.KeyRef{Scope: scope, Key: fmt.Sprintf("k%d", nkey)}
					cl, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: time.Minute})
					if err != nil || cl.Kind != contract.ClaimNew {
						t.Fatalf("claim %s: %+v, %v", ref.Key, cl, err)
					}
					_, cerr := be.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: cl.Token, Outcome: contract.Outcome{Code: 200}, Retain: time.Minute, Fence: l.Fence()})
					if cerr != nil && errCode(cerr) != contract.Fenced {
						t.Fatalf("fenced completion by %s: %v", l.Owner, cerr)
					}
					if (uerr == nil) != (cerr == nil) {
						t.Fatalf("fence of %s (token %d): update %v, completion %v; want both applied or both Fenced", l.Owner, l.Token, uerr, cerr)
					}
					return uerr == nil
				}

				la, err := a.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: res, Owner: "A", TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				if !valid(a, la) {
					t.Fatal("a fresh grant's fence is not valid")
				}
				lk := a.leaseKeys(scope, res)
				var lb *contract.Lease // B's grant, once it has one
				aHolds := true         // A's holder key is intact (A may still write)
				aOut := false          // A was taken over: its fence must never be valid again
				holdGone, busyGone := false, false

				tryB := func() {
					t.Helper()
					if lb != nil {
						return
					}
					l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: res, Owner: "B", TTL: time.Minute})
					switch {
					case err == nil:
						if !busyGone {
							t.Fatalf("B took over while A's busy marker is intact")
						}
						if l.Token <= la.Token {
							t.Fatalf("takeover token %d not greater than the old grant's %d", l.Token, la.Token)
						}
						lb, aOut, aHolds = &l, true, false
					case errCode(err) == contract.LeaseBusy:
						if busyGone {
							t.Fatalf("B: LeaseBusy though A's busy marker is gone: %v", err)
						}
					default:
						t.Fatalf("B acquire: %v", err)
					}
				}
				renewA := func() {
					t.Helper()
					l, err := a.RenewLease(ctx, la, time.Minute)
					switch {
					case err == nil:
						if aOut || !aHolds {
							t.Fatalf("A renewed (holder key intact: %v, taken over: %v)", aHolds, aOut)
						}
						if l.Token != la.Token {
							t.Fatalf("renewal changed the token: %d → %d", la.Token, l.Token)
						}
						la, holdGone, busyGone = l, false, false // fresh markers on fresh etcd leases
					case errCode(err) == contract.Fenced:
						if aHolds && !aOut {
							t.Fatalf("A's renewal Fenced while its holder key is intact and nobody took over")
						}
					default:
						t.Fatalf("A renew: %v", err)
					}
				}

				for _, step := range o.steps {
					switch step {
					case "hold":
						if holdGone || aOut {
							continue
						}
						revokeMarker(t, cliA, lk.hold)
						holdGone, aHolds = true, false
					case "busy":
						if busyGone || aOut {
							continue
						}
						revokeMarker(t, cliA, lk.busy)
						busyGone = true
					}
					if renewFirst {
						renewA()
						tryB()
					} else {
						tryB()
						renewA()
					}
					va := valid(a, la)
					vb := lb != nil && valid(b, *lb)
					if va && vb {
						t.Fatalf("after revoking %s: two valid fences, A token %d and B token %d", step, la.Token, lb.Token)
					}
					if va != (aHolds && !aOut) {
						t.Fatalf("after revoking %s: A's fence valid = %v; want %v", step, va, aHolds && !aOut)
					}
					if lb != nil && !vb {
						t.Fatalf("after revoking %s: B's fresh grant (token %d) is not valid", step, lb.Token)
					}
					if lb != nil {
						if _, err := b.RenewLease(ctx, *lb, time.Minute); err != nil {
							t.Fatalf("B renew: %v", err)
						}
					}
				}
				// Whatever is left: A releases (a no-op once taken over),
				// then B must get the lease with a greater token, and A's
				// fence must stay invalid.
				if lb == nil {
					if _, err := a.ReleaseLease(ctx, la); err != nil {
						t.Fatal(err)
					}
					aOut, busyGone = true, true // the release deleted the markers
					tryB()
					if lb == nil {
						t.Fatal("B cannot acquire after A released")
					}
				}
				if valid(a, la) || !valid(b, *lb) {
					t.Fatalf("at the end: want only B's fence (token %d) valid", lb.Token)
				}
				renewA()
				if g, err := a.GetLease(ctx, scope, res); err != nil || g.Owner != "B" || g.Token != lb.Token {
					t.Fatalf("GetLease: %+v, %v; want B's grant", g, err)
				}
			})
		}
	}
}

// TestClaimBusyMarkerRevoked ends the etcd lease behind a claim's busy
// marker (its only marker) while the claimer still works: either the
// claimer renews first and keeps the claim (a second claimer sees it in
// flight), or a second claimer reclaims it with a new token first and the
// old claimer can then neither renew nor complete. Never both.
func TestClaimBusyMarkerRevoked(t *testing.T) {
	c := startCluster(t, 1)
	cliA, cliB := c.client(t), c.client(t)
	ctx := context.Background()
	ref := contract.KeyRef{Scope: "s", Key: "k"}
	for i, renewFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("renewFirst=%v", renewFirst), func(t *testing.T) {
			prefix := fmt.Sprintf("claimmarker-%d", i)
			a, err := NewBackend(cliA, Options{Prefix: prefix, Tolerance: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = a.Close() })
			b, err := NewBackend(cliB, Options{Prefix: prefix, Tolerance: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			req := contract.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: time.Minute}
			ca, err := a.ClaimKey(ctx, req)
			if err != nil || ca.Kind != contract.ClaimNew {
				t.Fatalf("A claim: %+v, %v", ca, err)
			}
			revokeMarker(t, cliA, a.keyKeys(ref).busy)
			if renewFirst {
				if _, err := a.RenewKey(ctx, ref, ca.Token, time.Minute); err != nil {
					t.Fatalf("A renew after its busy marker was revoked, before any reclaim: %v", err)
				}
			}
			cb, err := b.ClaimKey(ctx, req)
			if err != nil {
				t.Fatalf("B claim: %v", err)
			}
			complete := func(be *Backend, token string) error {
				_, err := be.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: token, Outcome: contract.Outcome{Code: 201}, Retain: time.Minute})
				if err != nil && errCode(err) != contract.Fenced {
					t.Fatalf("complete: %v", err)
				}
				return err
			}
			if renewFirst {
				if cb.Kind != contract.ClaimInFlight {
					t.Fatalf("B claim of a renewed claim: %v; want in flight", cb.Kind)
				}
				if err := complete(a, ca.Token); err != nil {
					t.Fatalf("A complete: %v", err)
				}
				return
			}
			if cb.Kind != contract.ClaimReclaimed || cb.Token == ca.Token {
				t.Fatalf("B claim after the busy marker ended: %+v; want reclaimed with a new token", cb)
			}
			if _, err := a.RenewKey(ctx, ref, ca.Token, time.Minute); errCode(err) != contract.Fenced {
				t.Fatalf("A renew after a reclaim: %v; want Fenced", err)
			}
			if err := complete(a, ca.Token); err == nil {
				t.Fatal("A completed a claim B reclaimed")
			}
			if err := complete(b, cb.Token); err != nil {
				t.Fatalf("B complete: %v", err)
			}
			if err := complete(a, ca.Token); err == nil {
				t.Fatal("A completed after B")
			}
		})
	}
}
