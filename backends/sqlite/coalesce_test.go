package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/coalesce"
)

// Tests of coalesced writes (see "Coalesced writes" in the package doc).

var coStart = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func openCoalesce(t *testing.T, mode, sync string, clock contract.Clock) *sqlite.Backend {
	t.Helper()
	b, err := sqlite.NewBackend(t.Context(), sqlite.Options{
		Path: filepath.Join(t.TempDir(), "co.db"), Synchronous: sync, Coalesce: mode, Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// goid returns the current goroutine's id, from its stack header.
func goid() string {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	f := strings.Fields(string(buf[:n]))
	return f[1]
}

type ctxKey struct{}

func newWF(id string) contract.Workflow {
	return contract.Workflow{ID: id, Status: "running", Snapshot: []byte("s-" + id)}
}

// (a) A write that is alone is flushed at once, alone, on the caller's
// goroutine and with the caller's context.
func TestCoalesceAloneRunsOnCaller(t *testing.T) {
	b := openCoalesce(t, "", "normal", nil)
	var flushCtx, bodyCtx context.Context
	var flushG, bodyG string
	var flushN int
	sqlite.SetWriteHooksForTest(b, func(ctx context.Context) error {
		bodyCtx, bodyG = ctx, goid()
		return nil
	}, func(ctx context.Context, n int) {
		flushCtx, flushG, flushN = ctx, goid(), n
	})
	ctx, cancel := context.WithTimeout(context.WithValue(t.Context(), ctxKey{}, "mine"), time.Minute)
	defer cancel()
	if _, err := b.CreateWorkflow(ctx, newWF("w")); err != nil {
		t.Fatal(err)
	}
	if st := sqlite.WriteStatsForTest(b); st.Batches != 1 || st.Calls != 1 || st.Largest != 1 {
		t.Errorf("stats = %+v, want one batch of one call", st)
	}
	me := goid()
	if flushN != 1 || flushCtx != ctx || flushG != me {
		t.Errorf("flush of %d on goroutine %s (caller's %s), its ctx the caller's: %v", flushN, flushG, me, flushCtx == ctx)
	}
	if bodyG != me || bodyCtx.Value(ctxKey{}) != "mine" {
		t.Errorf("body on goroutine %s (caller's %s) with value %v", bodyG, me, bodyCtx.Value(ctxKey{}))
	}
}

// gate holds the write batcher's first flush until open, so that the
// writes started meanwhile queue and are flushed together as the next
// batch.
type gate struct {
	entered chan struct{}
	release chan struct{}
	first   atomic.Bool
	mu      sync.Mutex
	sizes   []int
}

func newGate() *gate { return &gate{entered: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) flush(ctx context.Context, n int) {
	g.mu.Lock()
	g.sizes = append(g.sizes, n)
	g.mu.Unlock()
	if g.first.CompareAndSwap(false, true) {
		close(g.entered)
		<-g.release
	}
}

func (g *gate) largest() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := 0
	for _, n := range g.sizes {
		m = max(m, n)
	}
	return m
}

// batch runs ops concurrently as one batch behind a blocking write: it
// starts the blocker, waits for its flush to hold the gate, starts ops,
// gives them time to queue, and opens the gate. It returns once every op
// has returned.
func (g *gate) batch(t *testing.T, b *sqlite.Backend, ops ...func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := b.CreateWorkflow(context.Background(), newWF("blocker-"+strconv.Itoa(len(ops)))); err != nil {
			t.Error(err)
		}
	}()
	<-g.entered
	var wg sync.WaitGroup
	for _, op := range ops {
		wg.Go(op)
	}
	time.Sleep(100 * time.Millisecond) // let them queue (a batch needs it; the results do not)
	close(g.release)
	wg.Wait()
	<-done
	if g.largest() < 2 {
		t.Fatalf("no batch formed (flush sizes %v)", g.sizes)
	}
}

var errInjected = errors.New("injected failure")

type failKey struct{}

// (c) A member whose body fails is rolled back alone, with its own error;
// the others of its batch commit.
func TestCoalesceMemberFailureRollsBackAlone(t *testing.T) {
	b := openCoalesce(t, "", "normal", nil)
	g := newGate()
	sqlite.SetWriteHooksForTest(b, func(ctx context.Context) error {
		if ctx.Value(failKey{}) != nil {
			return errInjected
		}
		return nil
	}, g.flush)
	const n = 8
	errs := make([]error, n)
	var ops []func()
	for i := range n {
		ops = append(ops, func() {
			ctx := t.Context()
			if i%3 == 1 {
				ctx = context.WithValue(ctx, failKey{}, true)
			}
			_, errs[i] = b.CreateWorkflow(ctx, newWF("w"+strconv.Itoa(i)))
		})
	}
	g.batch(t, b, ops...)
	if g.largest() != n {
		t.Logf("flush sizes %v", g.sizes)
	}
	for i := range n {
		_, gerr := b.GetWorkflow(t.Context(), "", "w"+strconv.Itoa(i))
		if i%3 == 1 {
			if !errors.Is(errs[i], errInjected) || contract.CodeOf(errs[i]) != contract.Unknown {
				t.Errorf("member %d: err = %v, want the injected failure (Unknown)", i, errs[i])
			}
			if contract.CodeOf(gerr) != contract.NotFound {
				t.Errorf("member %d failed but its workflow exists (%v)", i, gerr)
			}
			continue
		}
		if errs[i] != nil || gerr != nil {
			t.Errorf("member %d: err = %v, read %v; want committed", i, errs[i], gerr)
		}
	}
}

// (d) A member whose context ends while it waits is not sent: Canceled,
// nothing applied — whether it ends while the batch is queued or after the
// batch was taken, before the member's turn.
func TestCoalesceCanceledWhileQueued(t *testing.T) {
	b := openCoalesce(t, "", "normal", nil)
	g := newGate()
	ctxQueued, cancelQueued := context.WithCancel(t.Context())
	ctxTurn, cancelTurn := context.WithCancel(t.Context())
	defer cancelTurn()
	sqlite.SetWriteHooksForTest(b, func(ctx context.Context) error {
		if ctx.Value(ctxKey{}) == "canceler" {
			cancelTurn() // ends a later member's context inside the batch
		}
		return nil
	}, g.flush)
	var errQueued, errTurn, errFirst, errLast error
	first := context.WithValue(t.Context(), ctxKey{}, "canceler")
	g.batch(t, b,
		func() { _, errFirst = b.CreateWorkflow(first, newWF("first")) },
		func() {
			go func() { time.Sleep(50 * time.Millisecond); cancelQueued() }()
			_, errQueued = b.CreateWorkflow(ctxQueued, newWF("queued"))
		},
		func() { time.Sleep(20 * time.Millisecond); _, errTurn = b.CreateWorkflow(ctxTurn, newWF("turn")) },
		func() { time.Sleep(20 * time.Millisecond); _, errLast = b.CreateWorkflow(t.Context(), newWF("last")) },
	)
	if errFirst != nil || errLast != nil {
		t.Fatalf("first %v, last %v", errFirst, errLast)
	}
	for name, err := range map[string]error{"queued": errQueued, "turn": errTurn} {
		if contract.CodeOf(err) != contract.Canceled || !errors.Is(err, context.Canceled) {
			t.Errorf("%s: err = %v, want Canceled", name, err)
		}
		if _, gerr := b.GetWorkflow(t.Context(), "", name); contract.CodeOf(gerr) != contract.NotFound {
			t.Errorf("%s was canceled but applied (%v)", name, gerr)
		}
	}
}

// A member whose context ends once its statements have started returns at
// once with OutcomeUnknown; its batch goes on and commits it.
func TestCoalesceLeftAfterStartIsUnknown(t *testing.T) {
	b := openCoalesce(t, "", "normal", nil)
	g := newGate()
	ctxL, cancelL := context.WithCancel(context.WithValue(t.Context(), ctxKey{}, "leaver"))
	returned := make(chan struct{})
	sqlite.SetWriteHooksForTest(b, func(ctx context.Context) error {
		if ctx.Value(ctxKey{}) == "leaver" {
			cancelL()
			<-returned // the batch waits until its caller has returned
		}
		return nil
	}, g.flush)
	var errL, errOther error
	g.batch(t, b,
		func() {
			_, errL = b.CreateWorkflow(ctxL, newWF("leaver"))
			close(returned)
		},
		func() { _, errOther = b.CreateWorkflow(t.Context(), newWF("other")) },
	)
	if contract.CodeOf(errL) != contract.OutcomeUnknown || !errors.Is(errL, context.Canceled) {
		t.Errorf("leaver: err = %v, want OutcomeUnknown", errL)
	}
	if errOther != nil {
		t.Fatal(errOther)
	}
	for _, id := range []string{"leaver", "other"} {
		if _, err := b.GetWorkflow(t.Context(), "", id); err != nil {
			t.Errorf("%s not committed: %v", id, err)
		}
	}
}

// (e) The watches of leases released in one batch are signalled, each
// once the batch has committed: none while the batch's bodies run.
func TestCoalesceWatchSignalsAfterCommit(t *testing.T) {
	b := openCoalesce(t, "", "normal", nil)
	ctx := t.Context()
	const n = 6
	leases := make([]contract.Lease, n)
	chans := make([]<-chan struct{}, n)
	for i := range n {
		var err error
		leases[i], err = b.AcquireLease(ctx, contract.LeaseRequest{Resource: "r" + strconv.Itoa(i), Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if chans[i], err = b.WatchLease(ctx, "", leases[i].Resource); err != nil {
			t.Fatal(err)
		}
	}
	g := newGate()
	var early atomic.Int32
	sqlite.SetWriteHooksForTest(b, func(ctx context.Context) error {
		for _, ch := range chans {
			early.Add(int32(len(ch)))
		}
		return nil
	}, g.flush)
	released := make([]bool, n)
	errs := make([]error, n)
	var ops []func()
	for i := range n {
		ops = append(ops, func() { released[i], errs[i] = b.ReleaseLease(ctx, leases[i]) })
	}
	g.batch(t, b, ops...)
	for i := range n {
		if !released[i] || errs[i] != nil {
			t.Errorf("release %d: %v %v", i, released[i], errs[i])
		}
		select {
		case <-chans[i]:
		default:
			t.Errorf("watch %d not signalled", i)
		}
		if _, err := b.GetLease(ctx, "", leases[i].Resource); contract.CodeOf(err) != contract.NotFound {
			t.Errorf("lease %d still there: %v", i, err)
		}
	}
	if early.Load() != 0 {
		t.Errorf("%d signals before the batch committed", early.Load())
	}
}

// (b) Many goroutines on one backend: writes are batched, and every
// result, conditional failures included, is what the memory backend (the
// contract's reference) gives for the same calls.
func TestCoalesceManyGoroutinesAsIfAlone(t *testing.T) {
	for _, sync := range []string{"normal", "full"} {
		t.Run("sync="+sync, func(t *testing.T) {
			mem := memory.NewStorage(memory.Options{Clock: contract.NewManualClock(coStart), Tolerance: time.Second}).Backend()
			want := coScenario(t, mem)
			b := openCoalesce(t, "on", sync, contract.NewManualClock(coStart))
			got := coScenario(t, b)
			if st := sqlite.WriteStatsForTest(b); st.Largest < 2 {
				t.Errorf("no batch formed: %+v", st)
			} else {
				t.Logf("batches: %+v", st)
			}
			if got != want {
				t.Errorf("results differ from the memory backend's:\nsqlite: %s\nmemory: %s", got, want)
			}
		})
	}
}

// coScenario runs concurrent writes with deterministic outcomes on c and
// returns a summary of every result.
func coScenario(t *testing.T, c contract.Backend) string {
	ctx := t.Context()
	const goroutines, revisions = 16, 12
	if _, err := c.CreateWorkflow(ctx, newWF("shared")); err != nil {
		t.Fatal(err)
	}
	held, err := c.AcquireLease(ctx, contract.LeaseRequest{Resource: "held", Owner: "holder", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	counts := map[string]int{}
	winners := map[int64]int{}
	note := func(what string, err error) {
		mu.Lock()
		counts[what+":"+contract.CodeOf(err).String()+":"+fmt.Sprint(err == nil)]++
		mu.Unlock()
	}
	bad := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
	}
	var wg sync.WaitGroup
	for gi := range goroutines {
		wg.Go(func() {
			id := "g" + strconv.Itoa(gi)
			// Stale-version updates of one workflow: one winner per revision.
			for r := int64(1); r <= revisions; r++ {
				w, err := c.UpdateWorkflow(ctx, contract.Update{ID: "shared", ExpectStatus: "running", ExpectRevision: r,
					Status: "running", Snapshot: []byte(id)})
				switch {
				case err == nil:
					if w.Revision != r+1 || !bytes.Equal(w.Snapshot, []byte(id)) {
						bad("update: %+v", w)
					}
					mu.Lock()
					winners[r]++
					mu.Unlock()
				case contract.CodeOf(err) == contract.Conflict:
					var ce *contract.Error
					if !errors.As(err, &ce) || ce.Details == nil || ce.Details.ActualRevision == r {
						bad("conflict without the actual revision: %v", err)
					}
				default:
					bad("update: %v", err)
				}
			}
			// Keys: claim, a completion with a wrong token (Fenced), the
			// right one, and its retry (the same record).
			key := contract.KeyRef{Key: "k-" + id}
			cl, err := c.ClaimKey(ctx, contract.ClaimRequest{KeyRef: key, Fingerprint: "fp", TTL: time.Minute})
			note("claim", err)
			if err == nil && cl.Kind != contract.ClaimNew {
				bad("claim kind %v", cl.Kind)
			}
			_, err = c.RenewKey(ctx, key, cl.Token, 2*time.Minute)
			note("renewkey", err)
			comp := contract.Completion{KeyRef: key, Token: "wrong-token-" + id, Outcome: contract.Outcome{Code: 200, Body: []byte(id)}, Retain: time.Hour}
			_, err = c.CompleteKey(ctx, comp)
			note("complete-wrong", err)
			comp.Token = cl.Token
			rec, err := c.CompleteKey(ctx, comp)
			note("complete", err)
			if err == nil && (rec.State != contract.KeyCompleted || string(rec.Outcome.Body) != id) {
				bad("complete: %+v", rec)
			}
			again, err := c.CompleteKey(ctx, comp)
			note("complete-again", err)
			if err == nil && !again.CompletedAt.Equal(rec.CompletedAt) {
				bad("retry of a completion: %+v, first %+v", again, rec)
			}
			replay, err := c.ClaimKey(ctx, contract.ClaimRequest{KeyRef: key, Fingerprint: "fp", TTL: time.Minute})
			note("claim-replay:"+fmt.Sprint(replay.Kind), err)
			// A claim released.
			key2 := contract.KeyRef{Key: "k2-" + id}
			cl2, err := c.ClaimKey(ctx, contract.ClaimRequest{KeyRef: key2, Fingerprint: "fp", TTL: time.Minute})
			note("claim2", err)
			ok, err := c.ReleaseKey(ctx, key2, cl2.Token)
			note("releasekey:"+fmt.Sprint(ok), err)
			// Leases: a busy one, one of its own renewed and released, and
			// the renewal of the released one (Fenced).
			_, err = c.AcquireLease(ctx, contract.LeaseRequest{Resource: "held", Owner: id, TTL: time.Minute})
			note("acquire-busy", err)
			l, err := c.AcquireLease(ctx, contract.LeaseRequest{Resource: "l-" + id, Owner: id, TTL: time.Minute, Value: id})
			note("acquire", err)
			if err == nil && (l.Token <= held.Token || l.Value != id) {
				bad("lease %+v", l)
			}
			r, err := c.RenewLease(ctx, l, 2*time.Minute)
			note("renew", err)
			if err == nil && (r.Token != l.Token || r.Value != id || !r.ExpiresAt.Equal(coStart.Add(2*time.Minute))) {
				bad("renewed %+v", r)
			}
			ok, err = c.ReleaseLease(ctx, l)
			note("release:"+fmt.Sprint(ok), err)
			ok, err = c.ReleaseLease(ctx, l)
			note("release-again:"+fmt.Sprint(ok), err)
			_, err = c.RenewLease(ctx, l, time.Minute)
			note("renew-lost", err)
			_, err = c.CreateWorkflow(ctx, newWF("shared"))
			note("create-exists", err)
			_, err = c.CreateWorkflow(ctx, newWF("w-"+id))
			note("create", err)
		})
	}
	wg.Wait()
	for r := int64(1); r <= revisions; r++ {
		if winners[r] != 1 {
			t.Errorf("revision %d: %d winners", r, winners[r])
		}
	}
	w, err := c.GetWorkflow(ctx, "", "shared")
	if err != nil || w.Revision != revisions+1 {
		t.Errorf("shared: %+v %v", w, err)
	}
	var lines []string
	for k, v := range counts {
		lines = append(lines, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, " ")
}

// (f) coalesce=off writes each operation in its own transaction; the
// parameter is validated like the others.
func TestCoalesceSwitch(t *testing.T) {
	for _, tc := range []struct {
		dsn  string
		want string
		bad  bool
	}{
		{dsn: "sqlite:///x.db?coalesce=off", want: "off"},
		{dsn: "sqlite:///x.db?coalesce=on", want: "on"},
		{dsn: "sqlite:///x.db?coalesce=OFF", want: "OFF"},
		{dsn: "sqlite:///x.db", want: ""},
		{dsn: "sqlite:///x.db?coalesce=", bad: true},
		{dsn: "sqlite:///x.db?coalesce=yes", bad: true},
		{dsn: "sqlite:///x.db?coalesce=on&coalesce=off", bad: true},
	} {
		o, err := sqlite.ParseDSN(tc.dsn)
		if tc.bad {
			if !errors.Is(err, contract.ErrInvalidArgument) || strings.Contains(err.Error(), "yes") {
				t.Errorf("%s: err = %v, want InvalidArgument not quoting the value", tc.dsn, err)
			}
			continue
		}
		if err != nil || o.Coalesce != tc.want {
			t.Errorf("%s: %+v %v", tc.dsn, o, err)
		}
	}
	if _, err := sqlite.NewBackend(t.Context(), sqlite.Options{Path: sqlite.MemoryPath, Coalesce: "maybe"}); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Errorf("Coalesce maybe: %v", err)
	}

	b := openCoalesce(t, "off", "normal", nil)
	var sizes atomic.Int64
	sqlite.SetWriteHooksForTest(b, nil, func(context.Context, int) { sizes.Add(1) })
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			if _, err := b.CreateWorkflow(t.Context(), newWF("w"+strconv.Itoa(i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if st := sqlite.WriteStatsForTest(b); st != (coalesce.Stats{}) || sizes.Load() != 0 {
		t.Errorf("coalesce=off batched: %+v, %d flushes", st, sizes.Load())
	}
}
