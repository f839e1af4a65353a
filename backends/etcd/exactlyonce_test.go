package etcd

// Backend-level tests of issue 27's key rules (caller-chosen claim tokens,
// two-tier retention), on the raw backend through the conformance harness.
// The same scenarios run in the SQLite and etcd packages (each package its
// own copy: the backends share no test code outside the conformance
// suite).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestExactlyOnceKeys runs on a one-member cluster, with the conformance
// harness's virtual etcd time (see harness).
func TestExactlyOnceKeys(t *testing.T) {
	c := startCluster(t, 1)
	cli := c.client(t)
	var seq atomic.Int64
	runExactlyOnceKeys(t, func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
		return &harness{
			cli: cli, prefix: fmt.Sprintf("eo-%d", seq.Add(1)),
			clock: conformance.NewManualClock(), leases: map[clientv3.LeaseID]time.Time{},
		}, nil
	})
}

type exactlyOnceEnv struct {
	t   *testing.T
	ctx context.Context
	h   conformance.Harness
	b   contract.Backend
	tol time.Duration
}

func runExactlyOnceKeys(t *testing.T, newH func(context.Context, *testing.T) (conformance.Harness, error)) {
	setup := func(t *testing.T) *exactlyOnceEnv {
		ctx := context.Background()
		h, err := newH(ctx, t)
		if err != nil {
			t.Fatal(err)
		}
		b, err := h.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = b.Close()
			_ = h.Close()
		})
		e := &exactlyOnceEnv{t: t, ctx: ctx, h: h, b: b}
		if tr, ok := b.(contract.ToleranceReporter); ok {
			e.tol = tr.ClockTolerance()
		}
		return e
	}
	const ttl = 10 * time.Second
	req := func(key, token string) contract.ClaimRequest {
		return contract.ClaimRequest{
			KeyRef:      contract.KeyRef{Scope: "eo", Key: key},
			Fingerprint: "fp-" + key, WorkflowID: "wf-" + key, TTL: ttl, Token: token,
		}
	}
	const tokA = "caller-token-AAAAAAAAAAAAAAAAAAAAAAAA"
	const tokB = "caller-token-BBBBBBBBBBBBBBBBBBBBBBBB"

	t.Run("OwnTokenIsStoredAndHandedBack", func(t *testing.T) {
		e := setup(t)
		c, err := e.b.ClaimKey(e.ctx, req("k1", tokA))
		if err != nil || c.Kind != contract.ClaimNew || c.Token != tokA {
			t.Fatalf("first claim: %+v, %v; want ClaimNew with the caller's token", c, err)
		}
		e.h.Advance(3 * time.Second)
		// The reply was lost: the retry finds its own claim.
		c2, err := e.b.ClaimKey(e.ctx, req("k1", tokA))
		if err != nil || c2.Kind != contract.ClaimNew || c2.Token != tokA {
			t.Fatalf("retry with the same token: %+v, %v; want ClaimNew, the same token", c2, err)
		}
		if want := c.Record.LeaseUntil.Add(3 * time.Second); !c2.Record.LeaseUntil.Equal(want) {
			t.Errorf("held claim's LeaseUntil = %v, want now + TTL = %v", c2.Record.LeaseUntil, want)
		}
		if !c2.Record.CreatedAt.Equal(c.Record.CreatedAt) || c2.Record.State != contract.KeyClaimed {
			t.Errorf("held claim's record: %+v", c2.Record)
		}
		if g, err := e.b.GetKey(e.ctx, c.Record.KeyRef); err != nil || !g.LeaseUntil.Equal(c2.Record.LeaseUntil) {
			t.Errorf("GetKey after the held claim: %+v, %v", g, err)
		}
		// Another token of the same request: in flight; another request
		// with the same token: conflict.
		if c3, err := e.b.ClaimKey(e.ctx, req("k1", tokB)); err != nil || c3.Kind != contract.ClaimInFlight {
			t.Errorf("another token: %+v, %v; want ClaimInFlight", c3, err)
		}
		other := req("k1", tokA)
		other.Fingerprint = "fp-other"
		if _, err := e.b.ClaimKey(e.ctx, other); !isCode(err, contract.KeyConflict) {
			t.Errorf("another request with the same token: %v; want KeyConflict", err)
		}
		// Byte for byte: the token with one letter's case changed is
		// another token.
		if c4, err := e.b.ClaimKey(e.ctx, req("k1", strings.ToLower(tokA))); err != nil || c4.Kind != contract.ClaimInFlight {
			t.Errorf("the token in another case: %+v, %v; want ClaimInFlight", c4, err)
		}
		if _, err := e.b.CompleteKey(e.ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: tokA,
			Outcome: contract.Outcome{Code: 201}, Retain: time.Hour, Tombstone: time.Hour}); err != nil {
			t.Fatalf("complete with the caller's token: %v", err)
		}
	})

	t.Run("LapsedOwnClaimIsHandedBack", func(t *testing.T) {
		e := setup(t)
		c, err := e.b.ClaimKey(e.ctx, req("k2", tokA))
		if err != nil || c.Kind != contract.ClaimNew {
			t.Fatal(c, err)
		}
		e.h.Advance(ttl + e.tol + 2*time.Second)
		c2, err := e.b.ClaimKey(e.ctx, req("k2", tokA))
		if err != nil || c2.Kind != contract.ClaimNew || c2.Token != tokA {
			t.Fatalf("own lapsed claim: %+v, %v; want ClaimNew with the same token", c2, err)
		}
	})

	t.Run("ReclaimedClaimIsNotHandedBack", func(t *testing.T) {
		e := setup(t)
		if c, err := e.b.ClaimKey(e.ctx, req("k3", tokA)); err != nil || c.Kind != contract.ClaimNew {
			t.Fatal(c, err)
		}
		e.h.Advance(ttl + e.tol + 2*time.Second)
		c2, err := e.b.ClaimKey(e.ctx, req("k3", tokB))
		if err != nil || c2.Kind != contract.ClaimReclaimed || c2.Token != tokB {
			t.Fatalf("reclaim with another token: %+v, %v; want ClaimReclaimed with that token", c2, err)
		}
		c3, err := e.b.ClaimKey(e.ctx, req("k3", tokA))
		if err != nil || c3.Kind != contract.ClaimInFlight || c3.Token != "" {
			t.Fatalf("the old token after a reclaim: %+v, %v; want ClaimInFlight", c3, err)
		}
		if _, err := e.b.CompleteKey(e.ctx, contract.Completion{KeyRef: c2.Record.KeyRef, Token: tokA,
			Outcome: contract.Outcome{Code: 200}, Retain: time.Hour}); !isCode(err, contract.Fenced) {
			t.Fatalf("complete with the old token: %v; want Fenced", err)
		}
		// A random-token reclaim (no token given) is not the old caller's
		// either.
		e.h.Advance(ttl + e.tol + 2*time.Second)
		c4, err := e.b.ClaimKey(e.ctx, req("k3", ""))
		if err != nil || c4.Kind != contract.ClaimReclaimed || c4.Token == tokB || c4.Token == "" {
			t.Fatalf("reclaim without a token: %+v, %v", c4, err)
		}
		if c5, err := e.b.ClaimKey(e.ctx, req("k3", tokB)); err != nil || c5.Kind != contract.ClaimInFlight {
			t.Fatalf("the reclaimed token: %+v, %v; want ClaimInFlight", c5, err)
		}
	})

	t.Run("CompletedKeyIsNotHandedBackAsHeld", func(t *testing.T) {
		e := setup(t)
		c, err := e.b.ClaimKey(e.ctx, req("k4", tokA))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.b.CompleteKey(e.ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: tokA,
			Outcome: contract.Outcome{Code: 202, Body: []byte("done")}, Retain: time.Hour, Tombstone: 2 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		c2, err := e.b.ClaimKey(e.ctx, req("k4", tokA))
		if err != nil || c2.Kind != contract.ClaimCompleted || c2.Token != "" || c2.Record.Outcome == nil || string(c2.Record.Outcome.Body) != "done" {
			t.Fatalf("claim of a completed key with its token: %+v, %v; want ClaimCompleted with the outcome", c2, err)
		}
	})

	t.Run("Tombstone", func(t *testing.T) {
		e := setup(t)
		const retain, tomb = 2 * time.Minute, 10 * time.Minute
		c, err := e.b.ClaimKey(e.ctx, req("k5", tokA))
		if err != nil {
			t.Fatal(err)
		}
		done, err := e.b.CompleteKey(e.ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: tokA,
			Outcome: contract.Outcome{Code: 201, Body: []byte("secret payload"), Ref: "r1", Header: map[string][]string{"A": {"b"}}},
			Retain:  retain, Tombstone: tomb})
		if err != nil {
			t.Fatal(err)
		}
		if done.State != contract.KeyCompleted || done.ForgetAt.Before(done.ExpiresAt) ||
			done.ForgetAt.Sub(done.CompletedAt) < tomb || done.ExpiresAt.Sub(done.CompletedAt) < retain {
			t.Fatalf("completed record: %+v", done)
		}
		if g, err := e.b.GetKey(e.ctx, c.Record.KeyRef); err != nil || g.State != contract.KeyCompleted || !g.ForgetAt.Equal(done.ForgetAt) {
			t.Fatalf("GetKey before ExpiresAt: %+v, %v", g, err)
		}
		e.h.Advance(done.ExpiresAt.Sub(done.CompletedAt))
		checkTombstone := func(what string) {
			t.Helper()
			g, err := e.b.GetKey(e.ctx, c.Record.KeyRef)
			if err != nil {
				t.Fatalf("%s: GetKey: %v", what, err)
			}
			wantTombstone(t, what+": GetKey", g, done)
			if w, ok := e.b.(contract.KeyWaiter); ok {
				ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
				g, err := w.WaitKey(ctx, c.Record.KeyRef)
				cancel()
				if err != nil {
					t.Fatalf("%s: WaitKey: %v", what, err)
				}
				wantTombstone(t, what+": WaitKey", g, done)
			}
			if l, ok := e.b.(contract.RecordLister); ok {
				for _, st := range []contract.KeyState{"", contract.KeyExpired} {
					ks, err := l.ListKeys(e.ctx, contract.KeyListQuery{Scope: "eo", State: st, Limit: 10})
					if err != nil || len(ks) != 1 {
						t.Fatalf("%s: ListKeys(%q): %+v, %v", what, st, ks, err)
					}
					wantTombstone(t, what+": ListKeys", ks[0], done)
				}
				if ks, err := l.ListKeys(e.ctx, contract.KeyListQuery{Scope: "eo", State: contract.KeyCompleted, Limit: 10}); err != nil || len(ks) != 0 {
					t.Fatalf("%s: ListKeys(completed) lists a tombstone: %+v, %v", what, ks, err)
				}
			}
			// The same request: OutcomeExpired; another: KeyConflict.
			if c2, err := e.b.ClaimKey(e.ctx, req("k5", tokA)); !isCode(err, contract.OutcomeExpired) {
				t.Fatalf("%s: ClaimKey of the same request: %+v, %v; want OutcomeExpired", what, c2, err)
			}
			if _, err := e.b.ClaimKey(e.ctx, req("k5", "")); !isCode(err, contract.OutcomeExpired) {
				t.Fatalf("%s: ClaimKey of the same request without a token: %v; want OutcomeExpired", what, err)
			}
			other := req("k5", tokB)
			other.Fingerprint = "fp-other"
			if _, err := e.b.ClaimKey(e.ctx, other); !isCode(err, contract.KeyConflict) {
				t.Fatalf("%s: ClaimKey of another request: %v; want KeyConflict", what, err)
			}
			// A retried completion with the token gets the tombstone.
			r, err := e.b.CompleteKey(e.ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: tokA,
				Outcome: contract.Outcome{Code: 500}, Retain: retain, Tombstone: tomb})
			if err != nil {
				t.Fatalf("%s: CompleteKey retried: %v", what, err)
			}
			wantTombstone(t, what+": CompleteKey retried", r, done)
			if _, err := e.b.CompleteKey(e.ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: tokB,
				Outcome: contract.Outcome{Code: 500}, Retain: retain}); !isCode(err, contract.Fenced) {
				t.Fatalf("%s: CompleteKey with another token: %v; want Fenced", what, err)
			}
			if _, err := e.b.RenewKey(e.ctx, c.Record.KeyRef, tokA, ttl); !isCode(err, contract.Fenced) {
				t.Fatalf("%s: RenewKey: %v; want Fenced", what, err)
			}
			if ok, err := e.b.ReleaseKey(e.ctx, c.Record.KeyRef, tokA); ok || err != nil {
				t.Fatalf("%s: ReleaseKey: %v, %v; want false", what, ok, err)
			}
		}
		checkTombstone("past ExpiresAt")
		if cc, ok := e.b.(contract.CleanupCounter); ok {
			n, err := cc.CountCleanup(e.ctx, contract.CleanupRequest{Limit: 100, TerminalAge: time.Hour})
			if err != nil || n.Keys != 0 || n.Outcomes != outcomesDropped(1) {
				t.Fatalf("CountCleanup past ExpiresAt: %+v, %v; want Outcomes %d, Keys 0", n, err, outcomesDropped(1))
			}
		}
		res, err := e.b.Cleanup(e.ctx, contract.CleanupRequest{Limit: 100, TerminalAge: time.Hour})
		if err != nil || res.Keys != 0 || res.Outcomes != outcomesDropped(1) || res.More {
			t.Fatalf("Cleanup past ExpiresAt: %+v, %v", res, err)
		}
		if res, err := e.b.Cleanup(e.ctx, contract.CleanupRequest{Limit: 100, TerminalAge: time.Hour}); err != nil || res.Keys != 0 || res.Outcomes != 0 {
			t.Fatalf("second Cleanup: %+v, %v; want nothing", res, err)
		}
		checkTombstone("after Cleanup")
		e.h.Advance(done.ForgetAt.Sub(done.ExpiresAt))
		if g, err := e.b.GetKey(e.ctx, c.Record.KeyRef); !isCode(err, contract.NotFound) {
			t.Fatalf("GetKey past ForgetAt: %+v, %v; want NotFound", g, err)
		}
		if cc, ok := e.b.(contract.CleanupCounter); ok {
			n, err := cc.CountCleanup(e.ctx, contract.CleanupRequest{Limit: 100, TerminalAge: time.Hour})
			if err != nil || n.Keys != 1 || n.Outcomes != 0 {
				t.Fatalf("CountCleanup past ForgetAt: %+v, %v; want Keys 1", n, err)
			}
		}
		// Past ForgetAt the key is free, whoever asks.
		c3, err := e.b.ClaimKey(e.ctx, req("k5", tokB))
		if err != nil || c3.Kind != contract.ClaimNew || c3.Token != tokB {
			t.Fatalf("claim past ForgetAt: %+v, %v; want ClaimNew", c3, err)
		}
	})

	t.Run("NoTombstone", func(t *testing.T) {
		// Tombstone 0 (a raw backend's caller): ForgetAt = ExpiresAt.
		e := setup(t)
		c, err := e.b.ClaimKey(e.ctx, req("k6", ""))
		if err != nil {
			t.Fatal(err)
		}
		done, err := e.b.CompleteKey(e.ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token,
			Outcome: contract.Outcome{Code: 200}, Retain: time.Minute})
		if err != nil || !done.ForgetAt.Equal(done.ExpiresAt) {
			t.Fatalf("completion without a tombstone: %+v, %v; want ForgetAt = ExpiresAt", done, err)
		}
		e.h.Advance(done.ExpiresAt.Sub(done.CompletedAt))
		if g, err := e.b.GetKey(e.ctx, c.Record.KeyRef); !isCode(err, contract.NotFound) {
			t.Fatalf("GetKey past ExpiresAt without a tombstone: %+v, %v; want NotFound", g, err)
		}
		res, err := e.b.Cleanup(e.ctx, contract.CleanupRequest{Limit: 100, TerminalAge: time.Hour})
		if err != nil || res.Keys != 1 || res.Outcomes != 0 {
			t.Fatalf("Cleanup: %+v, %v; want Keys 1", res, err)
		}
		if c2, err := e.b.ClaimKey(e.ctx, req("k6", "")); err != nil || c2.Kind != contract.ClaimNew {
			t.Fatalf("claim after: %+v, %v", c2, err)
		}
	})

	t.Run("CleanupLimit", func(t *testing.T) {
		e := setup(t)
		var last contract.KeyRecord
		for _, k := range []string{"l1", "l2", "l3"} {
			c, err := e.b.ClaimKey(e.ctx, req(k, ""))
			if err != nil {
				t.Fatal(err)
			}
			if last, err = e.b.CompleteKey(e.ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token,
				Outcome: contract.Outcome{Code: 200, Body: []byte("x")}, Retain: time.Minute, Tombstone: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		e.h.Advance(last.ExpiresAt.Sub(last.CompletedAt) + time.Second)
		if outcomesDropped(1) == 0 {
			return // this backend's payloads vanish by themselves
		}
		if cc, ok := e.b.(contract.CleanupCounter); ok {
			n, err := cc.CountCleanup(e.ctx, contract.CleanupRequest{Limit: 2, TerminalAge: time.Hour})
			if err != nil || n.Outcomes != 2 || !n.More {
				t.Fatalf("CountCleanup(limit 2): %+v, %v; want Outcomes 2, More", n, err)
			}
		}
		res, err := e.b.Cleanup(e.ctx, contract.CleanupRequest{Limit: 2, TerminalAge: time.Hour})
		if err != nil || res.Outcomes != 2 || !res.More || res.Keys != 0 {
			t.Fatalf("Cleanup(limit 2): %+v, %v; want Outcomes 2, More", res, err)
		}
		res, err = e.b.Cleanup(e.ctx, contract.CleanupRequest{Limit: 2, TerminalAge: time.Hour})
		if err != nil || res.Outcomes != 1 || res.More {
			t.Fatalf("Cleanup again: %+v, %v; want Outcomes 1, no More", res, err)
		}
	})
}

// wantTombstone checks that got is done's tombstone: state KeyExpired,
// the code alone, the completion's times.
func wantTombstone(t *testing.T, what string, got, done contract.KeyRecord) {
	t.Helper()
	if got.State != contract.KeyExpired || got.Outcome == nil || got.Outcome.Code != done.Outcome.Code ||
		got.Outcome.Body != nil || got.Outcome.Header != nil || got.Outcome.Ref != "" ||
		got.Fingerprint != done.Fingerprint || got.WorkflowID != done.WorkflowID ||
		!got.CompletedAt.Equal(done.CompletedAt) || !got.ExpiresAt.Equal(done.ExpiresAt) || !got.ForgetAt.Equal(done.ForgetAt) ||
		!got.LeaseUntil.IsZero() {
		t.Fatalf("%s: %+v (outcome %+v); want the tombstone of %+v", what, got, got.Outcome, done)
	}
}

func isCode(err error, code contract.Code) bool {
	var ce *contract.Error
	return errors.As(err, &ce) && ce.Code == code
}

// outcomesDropped is what Cleanup reports as Outcomes for n payloads past
// ExpiresAt: none, since here they vanish by themselves on their etcd
// lease.
func outcomesDropped(n int) int { return 0 }
