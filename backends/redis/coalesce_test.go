package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/coalesce"
	"github.com/durable-go/durable/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
)

// pauseWrites holds every script on the node for d (CLIENT PAUSE … WRITE:
// EVALSHA may write, so it waits), so that the calls a test starts
// meanwhile queue in the backend's batcher behind the one in flight.
func pauseWrites(t *testing.T, ctx context.Context, rdb *goredis.Client, d time.Duration) {
	t.Helper()
	if err := rdb.Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
}

// pipelinedBackend returns a private node and a raw backend on it with
// one pipeline in flight, so that every call made while one is in flight
// waits for the next pipeline.
func pipelinedBackend(t *testing.T) (*goredis.Client, *Backend) {
	t.Helper()
	rdb := nodeClient(t, redistest.Start(t, redistest.Options{}))
	b, err := NewBackend(rdb, Options{Prefix: freshPrefix(), Coalesce: CoalescePipeline, CoalesceInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return rdb, b
}

// holdFunc holds a backend's scripts so that the calls a test starts
// meanwhile go out together; release, called once those calls are
// started, lets them go once queued of them wait (the shared connection)
// or does nothing (the pipeline path: CLIENT PAUSE ends by itself).
type holdFunc func(t *testing.T, queued int) (release func())

// coalescePaths returns the two coalescing paths, each with a backend
// on a private node and its way of holding scripts back: the shared
// connection, whose first write waits in its beforeWrite hook, and the
// pooled pipelines with one in flight, held by CLIENT PAUSE.
func coalescePaths(t *testing.T) map[string]func(t *testing.T) (*goredis.Client, *Backend, holdFunc) {
	return map[string]func(t *testing.T) (*goredis.Client, *Backend, holdFunc){
		"shared": func(t *testing.T) (*goredis.Client, *Backend, holdFunc) {
			rdb := nodeClient(t, redistest.Start(t, redistest.Options{}))
			b, err := NewBackend(rdb, Options{Prefix: freshPrefix()})
			if err != nil {
				t.Fatal(err)
			}
			b.muxAlone = true // the first call too, so that the hook holds it
			t.Cleanup(func() { _ = b.Close() })
			return rdb, b, func(t *testing.T, queued int) func() {
				return holdFirstWrite(t, b.mux(rdb), queued)
			}
		},
		"pipeline": func(t *testing.T) (*goredis.Client, *Backend, holdFunc) {
			rdb, b := pipelinedBackend(t)
			return rdb, b, func(t *testing.T, _ int) func() {
				pauseWrites(t, testCtx(t), rdb, 300*time.Millisecond)
				return func() {}
			}
		},
	}
}

// TestCoalescedScriptsGetTheirOwnResults: 48 calls of one backend,
// queued while the first is held, go out together; each caller gets
// exactly the result it would have had alone — the one grant of each
// contested resource, LeaseBusy for the others, each workflow's CAS once.
func TestCoalescedScriptsGetTheirOwnResults(t *testing.T) {
	for name, path := range coalescePaths(t) {
		t.Run(name, func(t *testing.T) {
			_, b, hold := path(t)
			ownResults(t, b, hold)
		})
	}
}

func ownResults(t *testing.T, b *Backend, hold holdFunc) {
	ctx := testCtx(t)
	const scope = contract.Scope("co")
	for i := range 16 {
		if _, err := b.CreateWorkflow(ctx, contract.Workflow{Scope: scope, ID: fmt.Sprint("w", i), Status: "running"}); err != nil {
			t.Fatal(err)
		}
	}
	// Load the scripts first: a pipeline of scripts the server does not
	// have runs each again alone (TestCoalescedPipelineAfterScriptFlush).
	if _, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: "warm", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: "w15", ExpectStatus: "running", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	before := b.CoalesceStats()

	release := hold(t, 47)
	var wg sync.WaitGroup
	grants := make([]contract.Lease, 32)
	grantErrs := make([]error, 32)
	cas := make([]error, 16)
	for i := range 32 {
		wg.Go(func() {
			grants[i], grantErrs[i] = b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope,
				Resource: fmt.Sprint("r", i%8), Owner: fmt.Sprint("o", i), TTL: time.Minute})
		})
	}
	for i := range 16 {
		wg.Go(func() {
			_, cas[i] = b.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: fmt.Sprint("w", i),
				ExpectStatus: "running", ExpectRevision: int64(1 + i/15), Status: "done", Snapshot: []byte(fmt.Sprint(i))})
		})
	}
	release()
	wg.Wait()

	st := b.CoalesceStats()
	if st.Largest < 2 || st.Calls-before.Calls != 48 || st.Batches-before.Batches >= 48 {
		t.Fatalf("CoalesceStats %+v (before %+v): the 48 calls did not go out together", st, before)
	}
	granted := map[string]contract.Lease{}
	for i, l := range grants {
		res := fmt.Sprint("r", i%8)
		switch err := grantErrs[i]; {
		case err == nil:
			if _, dup := granted[res]; dup {
				t.Fatalf("%s granted twice", res)
			}
			if l.Owner != fmt.Sprint("o", i) || l.Resource != res {
				t.Fatalf("caller %d got the grant %+v", i, l)
			}
			granted[res] = l
		case contract.CodeOf(err) != contract.LeaseBusy:
			t.Fatalf("caller %d: %v, want a grant or LeaseBusy", i, err)
		}
	}
	if len(granted) != 8 {
		t.Fatalf("%d resources granted, want 8", len(granted))
	}
	for res, l := range granted {
		got, err := b.GetLease(ctx, scope, res)
		if err != nil || got.Owner != l.Owner || got.Token != l.Token {
			t.Fatalf("GetLease(%s) = %+v, %v; the caller was told %+v", res, got, err, l)
		}
	}
	for i, err := range cas {
		w, gerr := b.GetWorkflow(ctx, scope, fmt.Sprint("w", i))
		if err != nil || gerr != nil || w.Status != "done" || string(w.Snapshot) != fmt.Sprint(i) || w.Revision != int64(2+i/15) {
			t.Fatalf("workflow %d: update %v; stored %+v, %v", i, err, w, gerr)
		}
	}
}

// TestAloneScriptGoesStraightOut: calls one after another, each alone,
// go out at once on their caller's goroutine: with the default, each on a
// pooled connection (nothing on the shared connection, whose reader would
// cost a hand-off); with coalesce=pipeline, each as a pipeline of one. A
// call made while another is in flight goes on the shared connection.
func TestAloneScriptGoesStraightOut(t *testing.T) {
	ctx := testCtx(t)
	rdb := nodeClient(t, redistest.Start(t, redistest.Options{}))
	b, _ := rawBackend(t, rdb)
	pb, err := NewBackend(rdb, Options{Prefix: freshPrefix(), Coalesce: CoalescePipeline})
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	for i := range 20 {
		if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: fmt.Sprint("w", i), Status: "running"}); err != nil {
			t.Fatal(err)
		}
		if _, err := pb.CreateWorkflow(ctx, contract.Workflow{ID: fmt.Sprint("w", i), Status: "running"}); err != nil {
			t.Fatal(err)
		}
	}
	if st := b.CoalesceStats(); st != (CoalesceStats{}) {
		t.Fatalf("CoalesceStats = %+v, want nothing on the shared connection", st)
	}
	if st := pb.CoalesceStats(); st.Batches != 20 || st.Calls != 20 || st.Largest != 1 {
		t.Fatalf("coalesce=pipeline: CoalesceStats = %+v, want 20 pipelines of one", st)
	}

	// One create held in flight by the server (CLIENT PAUSE): a read made
	// meanwhile goes on the shared connection.
	pauseWrites(t, ctx, rdb, 300*time.Millisecond)
	held := make(chan error, 1)
	go func() {
		_, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "held", Status: "running"})
		held <- err
	}()
	m := b.mux(rdb)
	for m.busy.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := b.GetWorkflow(ctx, "", "w0"); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if st := b.CoalesceStats(); st.Calls != 1 {
		t.Fatalf("CoalesceStats = %+v: the read made while a create was in flight did not go on the shared connection", st)
	}

	off, err := NewBackend(rdb, Options{Prefix: freshPrefix(), Coalesce: CoalesceOff})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if _, err := off.CreateWorkflow(ctx, contract.Workflow{ID: "w", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	if st := off.CoalesceStats(); st != (CoalesceStats{}) {
		t.Fatalf("CoalesceStats with coalescing off = %+v, want zero", st)
	}
}

// TestCoalescedPipelineAfterScriptFlush: scripts the server lost (SCRIPT
// FLUSH) that went out together each run again, alone, after loading
// their script; none fails and none runs twice. The call in flight while
// the others queue is a read, so that nothing loads the create script
// before the creates reach the server.
func TestCoalescedPipelineAfterScriptFlush(t *testing.T) {
	for name, path := range coalescePaths(t) {
		t.Run(name, func(t *testing.T) {
			rdb, b, hold := path(t)
			afterScriptFlush(t, rdb, b, hold)
		})
	}
}

func afterScriptFlush(t *testing.T, rdb *goredis.Client, b *Backend, hold holdFunc) {
	ctx := testCtx(t)
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "first", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	release := hold(t, 24)
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := b.GetLease(ctx, "", "none"); contract.CodeOf(err) != contract.NotFound {
			t.Errorf("GetLease: %v, want NotFound", err)
		}
	})
	time.Sleep(50 * time.Millisecond) // the read is in flight (or held), alone
	errs := make([]error, 24)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = b.CreateWorkflow(ctx, contract.Workflow{ID: fmt.Sprint("w", i), Status: "running"})
		})
	}
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("CreateWorkflow %d after SCRIPT FLUSH: %v", i, err)
		}
		if w, err := b.GetWorkflow(ctx, "", fmt.Sprint("w", i)); err != nil || w.Revision != 1 {
			t.Fatalf("workflow %d: %+v, %v; want revision 1", i, w, err)
		}
	}
	if st := b.CoalesceStats(); st.Largest < 2 {
		t.Fatalf("CoalesceStats = %+v: the creates did not go out together", st)
	}
	// The pipeline reached the server without its script: the GetLease
	// and the 24 creates each got NOSCRIPT at least once.
	info, err := rdb.Info(ctx, "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`errorstat_NOSCRIPT:count=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		t.Fatalf("no NOSCRIPT in INFO errorstats:\n%s", info)
	}
	if n, _ := strconv.Atoi(m[1]); n < 25 {
		t.Fatalf("%d NOSCRIPT replies, want at least 25: the creates did not go out in a pipeline without their script", n)
	}
}

// TestCoalescedWritesWaitForReplicas: with wait=1, a pipeline of writes
// is followed by one WAIT; with a replica every write succeeds, without
// one every write is OutcomeUnknown (applied on the primary, never
// confirmed) and every read succeeds.
func TestCoalescedWritesWaitForReplicas(t *testing.T) {
	ctx := testCtx(t)
	for _, replica := range []bool{true, false} {
		t.Run(fmt.Sprint("replica=", replica), func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			rdb := nodeClient(t, srv)
			timeout := 100 * time.Millisecond
			if replica {
				waitReplica(t, rdb, redistest.Start(t, redistest.Options{ReplicaOf: srv.Addr()}))
				timeout = 5 * time.Second
			}
			b, err := NewBackend(rdb, Options{Prefix: freshPrefix(), Coalesce: CoalescePipeline, CoalesceInFlight: 1, Wait: 1, WaitTimeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			// Register the scope and load the scripts (see
			// TestCoalescedScriptsGetTheirOwnResults).
			if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "warm", Status: "running"}); err != nil && contract.CodeOf(err) != contract.OutcomeUnknown {
				t.Fatal(err)
			}
			if _, err := b.GetLease(ctx, "", "warm"); contract.CodeOf(err) != contract.NotFound {
				t.Fatal(err)
			}
			pauseWrites(t, ctx, rdb, 200*time.Millisecond)
			var wg sync.WaitGroup
			writes, reads := make([]error, 16), make([]error, 16)
			for i := range 16 {
				wg.Go(func() {
					_, writes[i] = b.CreateWorkflow(ctx, contract.Workflow{ID: fmt.Sprint("w", i), Status: "running"})
				})
				wg.Go(func() {
					_, reads[i] = b.GetLease(ctx, "", fmt.Sprint("none", i))
				})
			}
			wg.Wait()
			for i := range 16 {
				if replica && writes[i] != nil {
					t.Fatalf("write %d with a replica: %v", i, writes[i])
				}
				if !replica && contract.CodeOf(writes[i]) != contract.OutcomeUnknown {
					t.Fatalf("write %d without a replica: %v, want OutcomeUnknown", i, writes[i])
				}
				if contract.CodeOf(reads[i]) != contract.NotFound {
					t.Fatalf("read %d: %v, want NotFound", i, reads[i])
				}
				if _, err := b.GetWorkflow(ctx, "", fmt.Sprint("w", i)); err != nil {
					t.Fatalf("workflow %d is not on the primary: %v", i, err)
				}
			}
			if st := b.CoalesceStats(); st.Largest < 2 {
				t.Fatalf("CoalesceStats = %+v: the creates did not go out together", st)
			}
		})
	}
}

// TestCoalescedCallThatLeavesIsUnknownOnlyOnceSent: a call whose context
// ends while it waits for a batch is Canceled (never sent); once its
// pipeline is in flight, a write is OutcomeUnknown and a read Canceled.
// The flush here blocks until released, standing in for a slow server,
// so that the test controls when each call is in flight.
func TestCoalescedCallThatLeavesIsUnknownOnlyOnceSent(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan int, 8)
	bt := coalesce.New(func(ctx context.Context, items []runItem) []coalesce.Result[any] {
		entered <- len(items)
		<-release
		return make([]coalesce.Result[any], len(items))
	}, coalesce.Options{MaxInFlight: 1})
	b := &Backend{}
	ctx := context.Background()

	first := make(chan error, 1)
	go func() { _, err := b.runCoalesced(ctx, bt, runItem{write: true}); first <- err }()
	<-entered // the first call is in flight, alone

	// Waiting behind it: leaves before it is sent.
	wctx, wcancel := context.WithCancel(ctx)
	waiting := make(chan error, 1)
	go func() { _, err := b.runCoalesced(wctx, bt, runItem{write: true}); waiting <- err }()
	// Two more, which will be sent together once the first returns.
	wctx2, wcancel2 := context.WithCancel(ctx)
	rctx, rcancel := context.WithCancel(ctx)
	inWrite, inRead := make(chan error, 1), make(chan error, 1)
	time.Sleep(100 * time.Millisecond) // let the waiting call queue first
	wcancel()
	if err := <-waiting; contract.CodeOf(err) != contract.Canceled {
		t.Fatalf("a call that left before it was sent: %v, want Canceled", err)
	}
	go func() { _, err := b.runCoalesced(wctx2, bt, runItem{write: true}); inWrite <- err }()
	go func() { _, err := b.runCoalesced(rctx, bt, runItem{write: false}); inRead <- err }()
	time.Sleep(200 * time.Millisecond) // let both queue
	release <- struct{}{}              // the first call returns; the two go out together
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := <-entered; n != 2 {
		t.Fatalf("the second pipeline holds %d calls, want 2", n)
	}
	wcancel2()
	rcancel()
	if err := <-inWrite; contract.CodeOf(err) != contract.OutcomeUnknown {
		t.Fatalf("a write that left in flight: %v, want OutcomeUnknown", err)
	}
	err := <-inRead
	if contract.CodeOf(err) != contract.Canceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("a read that left in flight: %v, want Canceled", err)
	}
	close(release)
}

// TestCoalescedCancelAtRandom: 300 creates from one backend, each with a
// deadline of 0–20 ms, while the node pauses now and then so that calls
// queue behind a pipeline in flight (or wait in flight on the shared
// connection). Every answer must be true of the
// stored state: a create reported Canceled (never sent) must not exist,
// a successful one must; OutcomeUnknown may go either way.
func TestCoalescedCancelAtRandom(t *testing.T) {
	for name, path := range coalescePaths(t) {
		t.Run(name, func(t *testing.T) {
			rdb, b, _ := path(t)
			cancelAtRandom(t, rdb, b, name == "shared")
		})
	}
}

// cancelAtRandom is TestCoalescedCancelAtRandom on b. On the shared
// connection a call waits unsent only while a write is in the kernel, so
// there the deadlines spread wider (0–100 ms, and every tenth 10 s) and
// the run must have ended calls both after their send and in time;
// leaving before the send is
// TestSharedCallThatLeavesBeforeItsWriteIsNeverSent's, and calls sharing
// a write TestCoalescedScriptsGetTheirOwnResults'.
func cancelAtRandom(t *testing.T, rdb *goredis.Client, b *Backend, shared bool) {
	ctx := testCtx(t)
	if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "warm", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	delays := make([]time.Duration, 300)
	spread := 20000
	if shared {
		spread = 100000
	}
	for i := range delays {
		delays[i] = time.Duration(rng.IntN(spread)) * time.Microsecond
		if shared && i%10 == 5 {
			delays[i] = 10 * time.Second
		}
	}
	errs := make([]error, len(delays))
	var wg sync.WaitGroup
	for i := range delays {
		if i%60 == 0 {
			pauseWrites(t, ctx, rdb, 2*time.Millisecond)
		}
		wg.Go(func() {
			c, cancel := context.WithTimeout(ctx, delays[i])
			defer cancel()
			_, errs[i] = b.CreateWorkflow(c, contract.Workflow{ID: fmt.Sprint("w", i), Status: "running"})
		})
		if i%10 == 0 {
			time.Sleep(200 * time.Microsecond)
		}
	}
	wg.Wait()
	counts := map[string]int{}
	for i, err := range errs {
		code := contract.CodeOf(err)
		if err == nil {
			counts["ok"]++
		} else {
			counts[code.String()]++
		}
		_, gerr := b.GetWorkflow(ctx, "", fmt.Sprint("w", i))
		exists := gerr == nil
		if gerr != nil && contract.CodeOf(gerr) != contract.NotFound {
			t.Fatal(gerr)
		}
		switch {
		case err == nil && !exists:
			t.Errorf("create %d succeeded but the workflow is not there", i)
		case code == contract.Canceled && exists:
			t.Errorf("create %d was Canceled (not sent) but the workflow is there", i)
		case err != nil && code != contract.Canceled && code != contract.OutcomeUnknown:
			t.Errorf("create %d: %v, want success, Canceled or OutcomeUnknown", i, err)
		}
	}
	st := b.CoalesceStats()
	t.Logf("outcomes %v; %d scripts in %d pipelines, the largest of %d", counts, st.Calls, st.Batches, st.Largest)
	switch {
	case shared && (counts[contract.OutcomeUnknown.String()] == 0 || counts["ok"] == 0):
		t.Errorf("no create left after its send, or none succeeded: the test did not test")
	case !shared && (counts[contract.Canceled.String()] == 0 || st.Largest < 2):
		t.Errorf("no create was canceled before its send, or no pipeline formed: the test did not test")
	}
}
