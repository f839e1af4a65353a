package redis

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/faultmodel"
	"github.com/durable-go/durable/internal/redistest"
)

// failoverWrite is one write a failover client made and how it ended.
type failoverWrite struct {
	kind  faultmodel.Kind // Create, Acquire, Claim or Complete
	id    string          // workflow id, resource or key
	owner string
	token int64
	ref   string // request id or outcome ref
	fp    string
	out   faultmodel.Outcome
	phase string // "before" the freeze, "frozen", "after" the promotion
}

type failoverResult struct {
	acked, ackedFrozen, lost, unknown, unknownFrozen, notApplied int
}

// TestFailoverLosesOnlyUnwaitedWrites runs the same failover twice, once
// without wait and once with wait=1&wait_timeout=200ms: a primary (AOF,
// fsync always) with one replica that replicates it through a proxy;
// clients (each its own durable.Open, behind a second proxy standing for a
// virtual IP) create workflows, acquire leases and claim and complete
// idempotency keys, each on a fresh name. After 1 s the replication link
// freezes (the replica lags: a slow network, a busy replica); after 1 s
// more the primary is killed with SIGKILL, the replica promoted (REPLICAOF
// NO ONE) and the clients' proxy moved to it; the clients go on for 0.5 s
// against the new primary. Then every write the clients saw acknowledged
// is read back on the new primary.
//
// Without wait, the writes acknowledged while the link was frozen are
// lost: replication is asynchronous, and the test counts and prints them
// (and requires the count to be positive, so that it demonstrates the loss
// rather than missing it by luck). With wait=1, every acknowledged write is
// on the promoted replica (0 lost); the writes whose WAIT timed out were
// reported OutcomeUnknown, never success.
func TestFailoverLosesOnlyUnwaitedWrites(t *testing.T) {
	redistest.Require(t)
	res := map[int]failoverResult{}
	for _, wait := range []int{0, 1} {
		t.Run(fmt.Sprintf("wait=%d", wait), func(t *testing.T) {
			r := runFailover(t, wait)
			res[wait] = r
			t.Logf("wait=%d acked=%d (while frozen %d) lost=%d unknown=%d (while frozen %d) not-applied=%d",
				wait, r.acked, r.ackedFrozen, r.lost, r.unknown, r.unknownFrozen, r.notApplied)
			if r.acked < 50 {
				t.Errorf("only %d writes were acknowledged: the workload did not run", r.acked)
			}
			if wait == 0 {
				if r.ackedFrozen == 0 {
					t.Errorf("no write was acknowledged while the replication link was frozen: the scenario did not run")
				} else if r.lost == 0 {
					t.Errorf("no acknowledged write was lost although %d were acknowledged while the replica lagged: the failover did not happen as staged", r.ackedFrozen)
				}
			} else {
				if r.lost != 0 {
					t.Errorf("with wait=%d, %d acknowledged writes are missing on the promoted replica", wait, r.lost)
				}
				if r.ackedFrozen != 0 {
					t.Errorf("with wait=%d, %d writes were acknowledged while no replica could acknowledge them", wait, r.ackedFrozen)
				}
				if r.unknownFrozen == 0 {
					t.Errorf("with wait=%d, no write was reported OutcomeUnknown while the link was frozen", wait)
				}
			}
		})
	}
	w0, w1 := res[0], res[1]
	line := fmt.Sprintf("FAILOVER driver=redis wait=0 acked=%d acked-unreplicated=%d lost=%d unknown=%d wait=1 acked=%d lost=%d unknown=%d unknown-unreplicated=%d",
		w0.acked, w0.ackedFrozen, w0.lost, w0.unknown, w1.acked, w1.lost, w1.unknown, w1.unknownFrozen)
	t.Log(line)
	if !t.Failed() {
		appendSummary(t, line)
	}
}

func runFailover(t *testing.T, wait int) failoverResult {
	ctx := t.Context()
	primary := redistest.Start(t, redistest.Options{})
	link := redistest.StartProxy(t, primary.Addr())
	replica := redistest.StartReplica(t, link.Addr(), redistest.Options{})
	front := redistest.StartProxy(t, primary.Addr())

	params := "/?prefix=fo&tolerance=1s&dial_timeout=500ms"
	if wait > 0 {
		params += fmt.Sprintf("&wait=%d&wait_timeout=200ms", wait)
	}
	const clients = 8
	stores := make([]*durable.Store, clients)
	for i := range stores {
		var err error
		if stores[i], err = durable.Open(ctx, "redis://"+front.Addr()+params, durable.WithOperationTimeout(2*time.Second)); err != nil {
			t.Fatalf("Open: %v", err)
		}
	}
	defer func() {
		for _, s := range stores {
			_ = s.Close()
		}
	}()

	var (
		mu     sync.Mutex
		phase  = "before"
		writes []failoverWrite
		bad    []string
	)
	getPhase := func() string { mu.Lock(); defer mu.Unlock(); return phase }
	setPhase := func(p string) { mu.Lock(); phase = p; mu.Unlock() }
	record := func(w failoverWrite, err error, ctxEnded bool) faultmodel.Outcome {
		out, why := faultmodel.Classify(w.kind, err, ctxEnded)
		w.out = out.O
		mu.Lock()
		defer mu.Unlock()
		if why != "" && len(bad) < 20 {
			bad = append(bad, fmt.Sprintf("%s: %s (%v)", w.kind, why, err))
		}
		writes = append(writes, w)
		return out.O
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c, s := range stores {
		wg.Go(func() {
			owner := fmt.Sprintf("c%d", c)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				ph := getPhase()
				cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				id := fmt.Sprintf("%s-%d", owner, n)
				var o faultmodel.Outcome
				switch n % 3 {
				case 0:
					_, err := s.CreateWorkflow(cctx, contract.Workflow{ID: "wf-" + id, Status: contract.StatusRunning, RequestID: "r-" + id})
					o = record(failoverWrite{kind: faultmodel.Create, id: "wf-" + id, ref: "r-" + id, phase: ph}, err, cctx.Err() != nil)
				case 1:
					l, err := s.AcquireLease(cctx, contract.LeaseRequest{Resource: "res-" + id, Owner: owner, TTL: time.Minute})
					o = record(failoverWrite{kind: faultmodel.Acquire, id: "res-" + id, owner: owner, token: l.Token, phase: ph}, err, cctx.Err() != nil)
				case 2:
					k := contract.KeyRef{Key: "key-" + id}
					cl, err := s.ClaimKey(cctx, contract.ClaimRequest{KeyRef: k, Fingerprint: "fp", TTL: time.Minute})
					o = record(failoverWrite{kind: faultmodel.Claim, id: k.Key, fp: "fp", phase: ph}, err, cctx.Err() != nil)
					if err == nil && cl.Kind == contract.ClaimNew {
						ph := getPhase()
						_, err := s.CompleteKey(cctx, contract.Completion{KeyRef: k, Token: cl.Token, Outcome: contract.Outcome{Code: 200, Ref: "out-" + id}, Retain: time.Hour})
						o = record(failoverWrite{kind: faultmodel.Complete, id: k.Key, ref: "out-" + id, phase: ph}, err, cctx.Err() != nil)
					}
				}
				cancel()
				if o == faultmodel.NotApplied || o == faultmodel.Unknown {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}

	time.Sleep(time.Second)
	before, _ := replica.ReplOffset(ctx)
	link.Freeze() // the replica receives nothing more
	setPhase("frozen")
	time.Sleep(time.Second)
	setPhase("failover")
	primary.Kill()
	link.Reset()
	offPrimary, _ := replica.ReplOffset(ctx)
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	front.SetTarget(replica.Addr())
	front.Reset() // the clients' connections to the dead primary break; they reconnect to the new one
	setPhase("after")
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("replica offset %d at the freeze, %d at the promotion", before, offPrimary)
	for _, b := range bad {
		t.Errorf("violation: %s", b)
	}

	// Read back every acknowledged write on the new primary.
	check, err := durable.Open(ctx, replica.URL()+"/?prefix=fo&tolerance=1s")
	if err != nil {
		t.Fatalf("Open the promoted replica: %v", err)
	}
	defer check.Close()
	var r failoverResult
	completed := map[string]bool{}
	for _, w := range writes {
		if w.kind == faultmodel.Complete && w.out == faultmodel.OK {
			completed[w.id] = true
		}
	}
	missing := 0
	for _, w := range writes {
		switch w.out {
		case faultmodel.Unknown, faultmodel.Bad:
			r.unknown++
			if w.phase == "frozen" {
				r.unknownFrozen++
			}
			continue
		case faultmodel.NotApplied:
			r.notApplied++
			continue
		case faultmodel.OK:
		default:
			continue
		}
		r.acked++
		if w.phase == "frozen" {
			r.ackedFrozen++
		}
		present := false
		switch w.kind {
		case faultmodel.Create:
			wf, err := check.GetWorkflow(ctx, "", w.id)
			present = err == nil && wf.RequestID == w.ref
			if err != nil && contract.CodeOf(err) != contract.NotFound {
				t.Fatalf("GetWorkflow on the new primary: %v", err)
			}
		case faultmodel.Acquire:
			l, err := check.GetLease(ctx, "", w.id)
			present = err == nil && l.Owner == w.owner && l.Token == w.token
			if err != nil && contract.CodeOf(err) != contract.NotFound {
				t.Fatalf("GetLease on the new primary: %v", err)
			}
		case faultmodel.Claim, faultmodel.Complete:
			k, err := check.GetKey(ctx, contract.KeyRef{Key: w.id})
			if err != nil && contract.CodeOf(err) != contract.NotFound {
				t.Fatalf("GetKey on the new primary: %v", err)
			}
			switch {
			case err != nil:
			case w.kind == faultmodel.Complete:
				present = k.State == contract.KeyCompleted && k.Outcome != nil && k.Outcome.Ref == w.ref
			default:
				present = k.Fingerprint == w.fp && (k.State == contract.KeyClaimed || k.State == contract.KeyCompleted)
			}
		}
		if !present {
			r.lost++
			if wait > 0 && missing < 10 {
				missing++
				t.Errorf("acknowledged %s of %s (phase %s) is missing on the promoted replica", w.kind, w.id, w.phase)
			}
		}
	}
	return r
}
