package redis

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/claimrule"
	"github.com/durable-go/durable/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, rdb goredis.UniversalClient, opts Options) *durable.Store {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = freshPrefix()
	}
	s, err := New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestClaimRuleInLuaIsTheRule checks the Lua port of internal/claimrule
// against the Go rule for every combination of facts.
func TestClaimRuleInLuaIsTheRule(t *testing.T) {
	ctx := testCtx(t)
	rdb := nodeClient(t, sharedNode(t))
	for f := claimrule.Facts(0); f < 128; f++ {
		got, err := decideScript.Run(ctx, rdb, []string{"x"}, "x", int(f)).Text()
		if err != nil {
			t.Fatal(err)
		}
		if want := claimrule.Decide(f).String(); got != want {
			t.Errorf("facts %07b: Lua decides %s, Go %s", f, got, want)
		}
	}
}

// TestScriptFlushReloads: after SCRIPT FLUSH every operation still works
// (EVALSHA's NOSCRIPT makes the client send the script again), with and
// without WAIT.
func TestScriptFlushReloads(t *testing.T) {
	ctx := testCtx(t)
	rdb := nodeClient(t, sharedNode(t))
	for _, wait := range []int{0, 1} {
		s := open(t, rdb, Options{})
		if wait > 0 {
			// WAIT 1 on a node without replicas never succeeds; use a
			// replica so that the reload path of the pipeline is taken.
			rep := redistest.Start(t, redistest.Options{ReplicaOf: sharedNode(t).Addr()})
			waitReplica(t, rdb, rep)
			s = open(t, rdb, Options{Wait: 1, WaitTimeout: 5 * time.Second})
		}
		if _, err := s.AcquireLease(ctx, contract.LeaseRequest{Resource: "r", Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateWorkflow(ctx, contract.Workflow{ID: "wf", Status: "running"}); err != nil {
			t.Fatalf("wait=%d: CreateWorkflow after SCRIPT FLUSH: %v", wait, err)
		}
		if _, err := s.GetWorkflow(ctx, "", "wf"); err != nil {
			t.Fatalf("GetWorkflow after SCRIPT FLUSH: %v", err)
		}
	}
}

func waitReplica(t *testing.T, master *goredis.Client, rep *redistest.Server) {
	t.Helper()
	c := rep.Client()
	defer c.Close()
	for i := 0; i < 200; i++ {
		info, _ := c.Info(context.Background(), "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the replica did not connect")
}

// TestRestartKeepsRecordsAndTokenOrder restarts a private node (AOF,
// fsync always), gracefully and with kill -9: records survive, scripts
// are reloaded, and a grant of the resource after the restart gets a
// greater token than every grant before it. The resource's lease is
// released before each restart, so only its counter carries the order.
func TestRestartKeepsRecordsAndTokenOrder(t *testing.T) {
	ctx := testCtx(t)
	srv := redistest.Start(t, redistest.Options{})
	rdb := nodeClient(t, srv)
	s := open(t, rdb, Options{Prefix: "restart"})
	var last int64
	for i, stop := range []func(){srv.Stop, srv.Kill} {
		l, err := s.AcquireLease(ctx, contract.LeaseRequest{Resource: "r", Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if l.Token <= last {
			t.Fatalf("token %d after %d", l.Token, last)
		}
		if ok, err := s.ReleaseLease(ctx, l); err != nil || !ok {
			t.Fatalf("ReleaseLease: %v, %v", ok, err)
		}
		last = l.Token
		if _, err := s.CreateWorkflow(ctx, contract.Workflow{ID: "wf" + strconv.Itoa(i), Status: "running"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLease(ctx, contract.LeaseRequest{Resource: "held" + strconv.Itoa(i), Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		stop()
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetWorkflow(ctx, "", "wf"+strconv.Itoa(i)); err != nil {
			// The first command on a pooled connection that the restart
			// broke may fail; the next one reconnects.
			if _, err := s.GetWorkflow(ctx, "", "wf"+strconv.Itoa(i)); err != nil {
				t.Fatalf("workflow after restart: %v", err)
			}
		}
		if _, err := s.GetLease(ctx, "", "held"+strconv.Itoa(i)); err != nil {
			t.Fatalf("lease after restart: %v", err)
		}
		l2, err := s.AcquireLease(ctx, contract.LeaseRequest{Resource: "r", Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if l2.Token <= last {
			t.Fatalf("token %d after restart, not above %d", l2.Token, last)
		}
		if ok, err := s.ReleaseLease(ctx, l2); err != nil || !ok {
			t.Fatalf("ReleaseLease: %v, %v", ok, err)
		}
		last = l2.Token
	}
}

// TestWaitKeyWakesByMessage sets the poll floor to an hour: a waiter can
// only return because the completion's message woke it.
func TestWaitKeyWakesByMessage(t *testing.T) {
	for name, rdb := range map[string]goredis.UniversalClient{
		"node": nodeClient(t, sharedNode(t)), "cluster": clusterClient(t, sharedCluster(t)),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			prefix := freshPrefix()
			owner := open(t, rdb, Options{Prefix: prefix})
			waiter := open(t, rdb, Options{Prefix: prefix, PollFloor: time.Hour})
			c, err := owner.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s1", Key: "k"}, Fingerprint: "fp", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				rec, err := waiter.WaitKey(ctx, c.Record.KeyRef)
				if err == nil && rec.State != contract.KeyCompleted {
					err = &contract.Error{Code: contract.Unknown, Msg: "not completed"}
				}
				done <- err
			}()
			// Let the waiter subscribe and read; a completion before that
			// is seen by its first read, which proves nothing, so wait
			// until the channel has a subscriber.
			ch := "" + prefix + ":{ss1}:c:k"
			for {
				n, _ := rdb.PubSubNumSub(ctx, ch).Result()
				if n[ch] > 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if _, err := owner.CompleteKey(ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: contract.Outcome{Code: 200}}); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWaitWithoutReplicasIsOutcomeUnknown: wait=1 on a node without a
// replica applies the write but can never confirm it: OutcomeUnknown.
func TestWaitWithoutReplicasIsOutcomeUnknown(t *testing.T) {
	ctx := testCtx(t)
	rdb := nodeClient(t, sharedNode(t))
	s := open(t, rdb, Options{Wait: 1, WaitTimeout: 50 * time.Millisecond})
	_, err := s.CreateWorkflow(ctx, contract.Workflow{ID: "wf", Status: "running"})
	if contract.CodeOf(err) != contract.OutcomeUnknown {
		t.Fatalf("CreateWorkflow with wait=1 and no replica: %v, want OutcomeUnknown", err)
	}
	// Reads do not wait.
	if _, err := s.GetWorkflow(ctx, "", "wf"); err != nil {
		t.Fatalf("GetWorkflow: %v", err)
	}
}

// TestDoctorCatchesUnsafeSettings runs Doctor against servers configured
// unsafely, and Open against an evicting one.
func TestDoctorCatchesUnsafeSettings(t *testing.T) {
	ctx := testCtx(t)
	cases := []struct {
		name  string
		opts  redistest.Options
		check string
	}{
		{"allkeys-lru", redistest.Options{MaxmemoryPolicy: "allkeys-lru"}, "eviction"},
		{"appendonly-no", redistest.Options{AppendOnly: "no"}, "persistence"},
		{"appendfsync-no", redistest.Options{AppendFsync: "no"}, "persistence"},
		{"safe", redistest.Options{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.opts)
			b, err := NewBackend(nodeClient(t, srv), Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range b.Doctor(ctx) {
				if c.OK == (c.Name == tc.check) {
					t.Errorf("check %s: OK=%v (%s), want OK=%v", c.Name, c.OK, c.Detail, c.Name != tc.check)
				}
			}
			st, err := durable.Open(ctx, srv.URL())
			if err == nil {
				_ = st.Close()
			}
			if tc.check == "eviction" {
				if contract.CodeOf(err) != contract.Misconfigured {
					t.Errorf("Open on an evicting server: %v, want Misconfigured", err)
				}
			} else if err != nil {
				t.Errorf("Open: %v", err)
			}
		})
	}
}

// lateCtx has a deadline that has passed while Err still reports nil, as
// a context does for the instant before its timer fires.
type lateCtx struct{ context.Context }

func (lateCtx) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
func (lateCtx) Err() error                  { return nil }

// TestFailAfterTheDeadlineIsTheContexts: a socket timeout at the
// context's deadline is the context's ending (Canceled for a read,
// OutcomeUnknown for a write), not a server that is unavailable.
func TestFailAfterTheDeadlineIsTheContexts(t *testing.T) {
	b := &Backend{}
	timeout := &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}
	ctx := lateCtx{context.Background()}
	if got := contract.CodeOf(b.fail(ctx, timeout, false)); got != contract.Canceled {
		t.Errorf("a read timing out at the deadline = %q, want %q", got, contract.Canceled)
	}
	if got := contract.CodeOf(b.fail(ctx, timeout, true)); got != contract.OutcomeUnknown {
		t.Errorf("a write timing out at the deadline = %q, want %q", got, contract.OutcomeUnknown)
	}
	if got := contract.CodeOf(b.fail(context.Background(), timeout, false)); got != contract.Unavailable {
		t.Errorf("a read timing out with time left = %q, want %q", got, contract.Unavailable)
	}
}
