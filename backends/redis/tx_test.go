package redis

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
)

// txEnv is a raw backend on a fresh prefix with a manual clock, on one
// node or on the cluster.
type txEnv struct {
	ctx   context.Context
	rdb   goredis.UniversalClient
	b     *Backend
	clock *contract.ManualClock
}

func newTxEnv(t *testing.T, rdb goredis.UniversalClient, extra func(*Options)) *txEnv {
	t.Helper()
	ctx := testCtx(t)
	clock := conformance.NewManualClock()
	o := Options{Prefix: freshPrefix(), Tolerance: time.Second, Clock: clock}
	if extra != nil {
		extra(&o)
	}
	b, err := NewBackend(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Close()
		_ = deletePrefix(context.Background(), rdb, o.Prefix+":")
	})
	return &txEnv{ctx: ctx, rdb: rdb, b: b, clock: clock}
}

func (e *txEnv) claim(t *testing.T, key string) contract.Claim {
	t.Helper()
	c, err := e.b.ClaimKey(e.ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "sc", Key: key}, Fingerprint: "fp", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *txEnv) begin(t *testing.T) *Tx {
	t.Helper()
	tx, err := e.b.BeginTx(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tx.(*Tx)
}

func completion(key, token string) contract.Completion {
	return contract.Completion{KeyRef: contract.KeyRef{Scope: "sc", Key: key}, Token: token,
		Outcome: contract.Outcome{Code: 201, Body: []byte("done")}, Retain: time.Hour, Tombstone: 2 * time.Hour}
}

// counter reads a caller's key; -1 when it does not exist.
func (e *txEnv) counter(t *testing.T, name string) int64 {
	t.Helper()
	n, err := e.rdb.Get(e.ctx, e.b.ScopeKey("sc", name)).Int64()
	if errors.Is(err, goredis.Nil) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *txEnv) state(t *testing.T, key string) contract.KeyRecord {
	t.Helper()
	rec, err := e.b.GetKey(e.ctx, contract.KeyRef{Scope: "sc", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func wantCode(t *testing.T, what string, err error, code contract.Code) {
	t.Helper()
	if got := contract.CodeOf(err); got != code || err == nil {
		t.Fatalf("%s: %v (code %v), want code %v", what, err, got, code)
	}
}

// onBoth runs f on one node and on the 3-master cluster.
func onBoth(t *testing.T, f func(t *testing.T, rdb goredis.UniversalClient)) {
	t.Run("Node", func(t *testing.T) { f(t, nodeClient(t, sharedNode(t))) })
	t.Run("Cluster", func(t *testing.T) { f(t, clusterClient(t, sharedCluster(t))) })
}

// TestTxEffectAndCompletionCommitTogether: the caller's INCR and the
// completion are applied by one Commit; the record CompleteKeyTx returned
// is the one stored; a retried CompleteKeyTx with the token returns it.
func TestTxEffectAndCompletionCommitTogether(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb goredis.UniversalClient) {
		e := newTxEnv(t, rdb, nil)
		c := e.claim(t, "k1")
		tx := e.begin(t)
		var incr *goredis.IntCmd
		tx.Queue(func(p goredis.Pipeliner) { incr = p.IncrBy(e.ctx, tx.ScopeKey("sc", "n"), 5) })
		rec, err := e.b.CompleteKeyTx(e.ctx, tx, completion("k1", c.Token))
		if err != nil {
			t.Fatal(err)
		}
		if e.counter(t, "n") != -1 || e.state(t, "k1").State != contract.KeyClaimed {
			t.Fatal("something was applied before Commit")
		}
		if err := tx.Commit(e.ctx); err != nil {
			t.Fatal(err)
		}
		if incr.Val() != 5 || e.counter(t, "n") != 5 {
			t.Errorf("INCR = %d, counter %d, want 5", incr.Val(), e.counter(t, "n"))
		}
		got := e.state(t, "k1")
		if got.State != contract.KeyCompleted || string(got.Outcome.Body) != "done" || got.Outcome.Code != 201 {
			t.Fatalf("GetKey after Commit = %+v", got)
		}
		if !got.CompletedAt.Equal(rec.CompletedAt) || !got.ExpiresAt.Equal(rec.ExpiresAt) || !got.ForgetAt.Equal(rec.ForgetAt) || got.State != rec.State {
			t.Errorf("stored %+v, CompleteKeyTx returned %+v", got, rec)
		}
		if err := tx.Commit(e.ctx); err != nil {
			t.Errorf("second Commit: %v", err)
		}
		if err := tx.Rollback(e.ctx); err != nil {
			t.Errorf("Rollback after Commit: %v", err)
		}
		// A retried CompleteKeyTx with the token returns the stored record
		// and its Commit writes no second completion.
		e.clock.Advance(time.Minute)
		tx2 := e.begin(t)
		again, err := e.b.CompleteKeyTx(e.ctx, tx2, completion("k1", c.Token))
		if err != nil || !again.CompletedAt.Equal(rec.CompletedAt) || again.State != contract.KeyCompleted {
			t.Fatalf("retried CompleteKeyTx = %+v, %v; want the stored record", again, err)
		}
		if err := tx2.Commit(e.ctx); err != nil {
			t.Fatal(err)
		}
		if got := e.state(t, "k1"); !got.CompletedAt.Equal(rec.CompletedAt) {
			t.Errorf("a retried completion rewrote the record: %+v", got)
		}
		// A second completion in one Tx is refused.
		c3 := e.claim(t, "k3")
		tx3 := e.begin(t)
		if _, err := e.b.CompleteKeyTx(e.ctx, tx3, completion("k3", c3.Token)); err != nil {
			t.Fatal(err)
		}
		_, err = e.b.CompleteKeyTx(e.ctx, tx3, completion("k3", c3.Token))
		wantCode(t, "second CompleteKeyTx in one Tx", err, contract.InvalidArgument)
		_ = tx3.Rollback(e.ctx)
		// A Tx without a completion sends its commands alone.
		tx4 := e.begin(t)
		tx4.Queue(func(p goredis.Pipeliner) { p.Incr(e.ctx, tx4.ScopeKey("sc", "n")) })
		if err := tx4.Commit(e.ctx); err != nil || e.counter(t, "n") != 6 {
			t.Errorf("Commit of commands alone: %v, counter %d, want 6", err, e.counter(t, "n"))
		}
	})
}

// TestTxRollbackAppliesNothing: neither the effect nor the completion.
func TestTxRollbackAppliesNothing(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb goredis.UniversalClient) {
		e := newTxEnv(t, rdb, nil)
		c := e.claim(t, "k1")
		tx := e.begin(t)
		tx.Queue(func(p goredis.Pipeliner) { p.Incr(e.ctx, tx.ScopeKey("sc", "n")) })
		if _, err := e.b.CompleteKeyTx(e.ctx, tx, completion("k1", c.Token)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(e.ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.counter(t, "n"); n != -1 {
			t.Errorf("counter after Rollback = %d, want absent", n)
		}
		if got := e.state(t, "k1"); got.State != contract.KeyClaimed {
			t.Errorf("key after Rollback = %v, want claimed", got.State)
		}
		wantCode(t, "Commit after Rollback", tx.Commit(e.ctx), contract.InvalidArgument)
		_, err := e.b.CompleteKeyTx(e.ctx, tx, completion("k1", c.Token))
		wantCode(t, "CompleteKeyTx after Rollback", err, contract.InvalidArgument)
	})
}

// TestTxReclaimBeforeCommitFences: a reclaim between CompleteKeyTx and
// Commit makes Commit Fenced, and the effect is absent.
func TestTxReclaimBeforeCommitFences(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb goredis.UniversalClient) {
		e := newTxEnv(t, rdb, nil)
		c := e.claim(t, "k1")
		tx := e.begin(t)
		tx.Queue(func(p goredis.Pipeliner) { p.Incr(e.ctx, tx.ScopeKey("sc", "n")) })
		if _, err := e.b.CompleteKeyTx(e.ctx, tx, completion("k1", c.Token)); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Minute)
		re := e.claim(t, "k1")
		if re.Kind != contract.ClaimReclaimed {
			t.Fatalf("claim after expiry = %v, want reclaimed", re.Kind)
		}
		wantCode(t, "Commit after a reclaim", tx.Commit(e.ctx), contract.Fenced)
		if n := e.counter(t, "n"); n != -1 {
			t.Errorf("counter after a fenced Commit = %d, want absent", n)
		}
		if got := e.state(t, "k1"); got.State != contract.KeyClaimed {
			t.Errorf("key = %v, want the reclaimer's claim", got.State)
		}
	})
}

// TestTxChangeAfterWatchAborts: a write to the key's record after WATCH
// and before EXEC (made by a hook as MULTI is sent) aborts EXEC: Fenced,
// nothing applied.
func TestTxChangeAfterWatchAborts(t *testing.T) {
	node := sharedNode(t)
	other := nodeClient(t, node)
	rdb := goredis.NewClient(&goredis.Options{Addr: node.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	e := newTxEnv(t, rdb, nil)
	var touch string
	rdb.AddHook(multiHook{before: func(ctx context.Context) {
		if touch != "" {
			_ = other.HSet(ctx, touch, "x", "1").Err()
		}
	}})
	c := e.claim(t, "k1")
	tx := e.begin(t)
	tx.Queue(func(p goredis.Pipeliner) { p.Incr(e.ctx, tx.ScopeKey("sc", "n")) })
	if _, err := e.b.CompleteKeyTx(e.ctx, tx, completion("k1", c.Token)); err != nil {
		t.Fatal(err)
	}
	touch = e.b.base("sc") + "k:k1"
	wantCode(t, "Commit after the record changed under WATCH", tx.Commit(e.ctx), contract.Fenced)
	touch = ""
	if n := e.counter(t, "n"); n != -1 {
		t.Errorf("counter = %d, want absent", n)
	}
	if got := e.state(t, "k1"); got.State != contract.KeyClaimed {
		t.Errorf("key = %v, want claimed", got.State)
	}
}

// multiHook calls before when a MULTI … EXEC pipeline is about to be sent.
type multiHook struct{ before func(context.Context) }

func (multiHook) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (multiHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h multiHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "multi" {
			h.before(ctx)
		}
		return next(ctx, cmds)
	}
}

// TestTxKeyOutsideTheSlotIsRefused: a ScopeKey of another scope (another
// slot) is refused before anything is sent; on a cluster, a key of the
// caller's own naming in another slot makes the server refuse the
// transaction. Either way nothing is applied and the claim still holds.
func TestTxKeyOutsideTheSlotIsRefused(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb goredis.UniversalClient) {
		e := newTxEnv(t, rdb, nil)
		c := e.claim(t, "k1")
		var far contract.Scope = "far"
		for keySlot(e.b.ScopeKey(far, "n")) == keySlot(e.b.base("sc")+"k:k1") {
			far += "x"
		}
		tx := e.begin(t)
		tx.Queue(func(p goredis.Pipeliner) { p.Incr(e.ctx, tx.ScopeKey("sc", "n")) })
		tx.Queue(func(p goredis.Pipeliner) { p.Incr(e.ctx, tx.ScopeKey(far, "n")) })
		if _, err := e.b.CompleteKeyTx(e.ctx, tx, completion("k1", c.Token)); err != nil {
			t.Fatal(err)
		}
		wantCode(t, "Commit with a key of another slot", tx.Commit(e.ctx), contract.InvalidArgument)
		if n := e.counter(t, "n"); n != -1 {
			t.Errorf("counter = %d, want absent", n)
		}
		if n, _ := e.rdb.Exists(e.ctx, e.b.ScopeKey(far, "n")).Result(); n != 0 {
			t.Error("the far key was written")
		}
		if got := e.state(t, "k1"); got.State != contract.KeyClaimed {
			t.Errorf("key = %v, want claimed", got.State)
		}
		_ = tx.Rollback(e.ctx)

		if _, ok := rdb.(*goredis.ClusterClient); !ok {
			return
		}
		// A key of the caller's own naming in another slot: on another
		// primary (MOVED when queued) and on the same one (CROSSSLOT at
		// EXEC).
		cc := rdb.(*goredis.ClusterClient)
		rec := e.b.base("sc") + "k:k1"
		home, err := cc.MasterForKey(e.ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		var near, other string
		for i := 0; near == "" || other == ""; i++ {
			k := "plain-" + e.b.Prefix() + strconv.Itoa(i)
			if keySlot(k) == keySlot(rec) {
				continue
			}
			n, err := cc.MasterForKey(e.ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if n.Options().Addr == home.Options().Addr {
				if near == "" {
					near = k
				}
			} else if other == "" {
				other = k
			}
		}
		for _, own := range []string{other, near} {
			t.Cleanup(func() { _ = rdb.Del(context.Background(), own).Err() })
			tx = e.begin(t)
			tx.Queue(func(p goredis.Pipeliner) { p.Incr(e.ctx, tx.ScopeKey("sc", "n")) })
			tx.Queue(func(p goredis.Pipeliner) { p.Incr(e.ctx, own) })
			if _, err := e.b.CompleteKeyTx(e.ctx, tx, completion("k1", c.Token)); err != nil {
				t.Fatal(err)
			}
			wantCode(t, "Commit with an unprefixed key of another slot", tx.Commit(e.ctx), contract.InvalidArgument)
			if n := e.counter(t, "n"); n != -1 {
				t.Errorf("counter = %d, want absent", n)
			}
			if n, _ := rdb.Exists(e.ctx, own).Result(); n != 0 {
				t.Error("the unprefixed key was written")
			}
			if got := e.state(t, "k1"); got.State != contract.KeyClaimed {
				t.Errorf("key = %v, want claimed", got.State)
			}
		}
	})
}

// TestTxFailingCommandIsReported: a queued command that fails at run time
// (INCR of a non-integer) is reported with its index; the completion and
// the other commands applied (Redis does not roll back). A command
// refused when queued (unknown) applies nothing.
func TestTxFailingCommandIsReported(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb goredis.UniversalClient) {
		e := newTxEnv(t, rdb, nil)
		if err := rdb.Set(e.ctx, e.b.ScopeKey("sc", "text"), "not a number", 0).Err(); err != nil {
			t.Fatal(err)
		}
		c := e.claim(t, "k1")
		tx := e.begin(t)
		tx.Queue(func(p goredis.Pipeliner) {
			p.Incr(e.ctx, tx.ScopeKey("sc", "n"))
			p.Incr(e.ctx, tx.ScopeKey("sc", "text"))
		})
		if _, err := e.b.CompleteKeyTx(e.ctx, tx, completion("k1", c.Token)); err != nil {
			t.Fatal(err)
		}
		err := tx.Commit(e.ctx)
		wantCode(t, "Commit with a failing command", err, contract.Unknown)
		var ce *CommandError
		if !errors.As(err, &ce) || ce.Index != 1 || ce.Name != "incr" || ce.Err == nil {
			t.Fatalf("cause = %#v, want command 1 (incr)", ce)
		}
		if n := e.counter(t, "n"); n != 1 {
			t.Errorf("the other command: counter = %d, want 1", n)
		}
		wantCode(t, "Commit again after it ran", tx.Commit(e.ctx), contract.InvalidArgument)
		if n := e.counter(t, "n"); n != 1 {
			t.Errorf("a second Commit sent the commands again: counter = %d", n)
		}
		if got := e.state(t, "k1"); got.State != contract.KeyCompleted {
			t.Errorf("key = %v, want completed (the completion applied)", got.State)
		}

		c2 := e.claim(t, "k2")
		tx = e.begin(t)
		tx.Queue(func(p goredis.Pipeliner) {
			p.Incr(e.ctx, tx.ScopeKey("sc", "n"))
			p.Do(e.ctx, "nosuchcommand", tx.ScopeKey("sc", "n"))
		})
		if _, err := e.b.CompleteKeyTx(e.ctx, tx, completion("k2", c2.Token)); err != nil {
			t.Fatal(err)
		}
		err = tx.Commit(e.ctx)
		wantCode(t, "Commit with an unknown command", err, contract.InvalidArgument)
		if !errors.As(err, &ce) || ce.Index != 1 {
			t.Errorf("cause = %#v, want command 1", ce)
		}
		if n := e.counter(t, "n"); n != 1 {
			t.Errorf("counter = %d, want 1 (nothing applied)", n)
		}
		if got := e.state(t, "k2"); got.State != contract.KeyClaimed {
			t.Errorf("key = %v, want claimed", got.State)
		}
	})
}

// TestTxFence: CompleteKeyTx with an invalid fence is Fenced at once; a
// lease released between CompleteKeyTx and Commit fences the Commit.
func TestTxFence(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb goredis.UniversalClient) {
		e := newTxEnv(t, rdb, nil)
		l, err := e.b.AcquireLease(e.ctx, contract.LeaseRequest{Scope: "sc", Resource: "r", Owner: "o", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c := e.claim(t, "k1")
		comp := completion("k1", c.Token)
		comp.Fence = &contract.Fence{Resource: "r", Owner: "o", Token: l.Token + 1}
		tx := e.begin(t)
		_, err = e.b.CompleteKeyTx(e.ctx, tx, comp)
		wantCode(t, "CompleteKeyTx with a wrong fence", err, contract.Fenced)
		_ = tx.Rollback(e.ctx)

		comp.Fence.Token = l.Token
		tx = e.begin(t)
		tx.Queue(func(p goredis.Pipeliner) { p.Incr(e.ctx, tx.ScopeKey("sc", "n")) })
		if _, err := e.b.CompleteKeyTx(e.ctx, tx, comp); err != nil {
			t.Fatal(err)
		}
		if ok, err := e.b.ReleaseLease(e.ctx, l); err != nil || !ok {
			t.Fatal(ok, err)
		}
		wantCode(t, "Commit after the fence's lease was released", tx.Commit(e.ctx), contract.Fenced)
		if n := e.counter(t, "n"); n != -1 {
			t.Errorf("counter = %d, want absent", n)
		}
		if got := e.state(t, "k1"); got.State != contract.KeyClaimed {
			t.Errorf("key = %v, want claimed", got.State)
		}
	})
}

// TestTxWaitShortIsOutcomeUnknown: with Options.Wait and no replica to
// acknowledge, Commit applies on the primary and reports OutcomeUnknown.
func TestTxWaitShortIsOutcomeUnknown(t *testing.T) {
	// A private server: no replica of another test can acknowledge.
	e := newTxEnv(t, nodeClient(t, redistest.Start(t, redistest.Options{})), func(o *Options) {
		o.Wait, o.WaitTimeout = 1, 50*time.Millisecond
	})
	// Claim without WAIT (it would be OutcomeUnknown too).
	plain, err := NewBackend(e.rdb, Options{Prefix: e.b.opts.Prefix, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	c, err := plain.ClaimKey(e.ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "sc", Key: "k1"}, Fingerprint: "fp", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tx := e.begin(t)
	tx.Queue(func(p goredis.Pipeliner) { p.Incr(e.ctx, tx.ScopeKey("sc", "n")) })
	if _, err := e.b.CompleteKeyTx(e.ctx, tx, completion("k1", c.Token)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "Commit without the replicas wait asks for", tx.Commit(e.ctx), contract.OutcomeUnknown)
	if n := e.counter(t, "n"); n != 1 || e.state(t, "k1").State != contract.KeyCompleted {
		t.Errorf("counter %d, key %v: want both applied on the primary", n, e.state(t, "k1").State)
	}
}

// TestKeySlot checks keySlot against the server's CLUSTER KEYSLOT.
func TestKeySlot(t *testing.T) {
	ctx := testCtx(t)
	rdb := clusterClient(t, sharedCluster(t))
	for _, k := range []string{"", "a", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "durable:{s%2F}:u:x", "{", "}{x}"} {
		want, err := rdb.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(k); int64(got) != want {
			t.Errorf("keySlot(%q) = %d, server says %d", k, got, want)
		}
	}
}

// TestDoTxCommitFenced: DoTx whose claim is taken over between
// CompleteKeyTx and EXEC (a hook deletes the key's record as MULTI is
// sent, and another caller claims it) returns Fenced; the effect is
// absent.
func TestDoTxCommitFenced(t *testing.T) {
	node := sharedNode(t)
	other := nodeClient(t, node)
	rdb := goredis.NewClient(&goredis.Options{Addr: node.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := testCtx(t)
	prefix := freshPrefix()
	s := open(t, rdb, Options{Prefix: prefix})
	thief := open(t, other, Options{Prefix: prefix})
	var b *Backend
	s.As(&b)
	req := contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "sc", Key: "k1"}, Fingerprint: "fp"}
	stolen := false
	rdb.AddHook(multiHook{before: func(ctx context.Context) {
		if stolen {
			return
		}
		stolen = true
		if _, err := thief.DeleteRecord(ctx, contract.KindKey, "sc", "k1"); err != nil {
			t.Error(err)
		}
		if c, err := thief.ClaimKey(ctx, req); err != nil || c.Kind != contract.ClaimNew {
			t.Error(c.Kind, err)
		}
	}})
	_, err := durable.DoTx(ctx, s, req, durable.DoOptions{}, func(ctx context.Context, tx *Tx) (contract.Outcome, error) {
		tx.Queue(func(p goredis.Pipeliner) { p.Incr(ctx, tx.ScopeKey("sc", "n")) })
		return contract.Outcome{Code: 200}, nil
	})
	wantCode(t, "DoTx whose claim was taken before EXEC", err, contract.Fenced)
	if n, err := rdb.Exists(ctx, b.ScopeKey("sc", "n")).Result(); err != nil || n != 0 {
		t.Errorf("the effect was applied (%d, %v)", n, err)
	}
	if rec, err := thief.GetKey(ctx, req.KeyRef); err != nil || rec.State != contract.KeyClaimed {
		t.Errorf("key = %+v, %v; want the thief's claim", rec, err)
	}
}
