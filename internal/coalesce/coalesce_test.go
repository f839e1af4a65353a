package coalesce

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type ctxKey struct{}

// double is a flush that answers each call with twice its item.
func double(_ context.Context, items []int) []Result[int] {
	out := make([]Result[int], len(items))
	for i, it := range items {
		out[i] = Result[int]{Val: 2 * it}
	}
	return out
}

func TestAloneIsFlushedAtOnceWithTheCallersContext(t *testing.T) {
	var got []context.Context
	var sizes []int
	b := New(func(ctx context.Context, items []int) []Result[int] {
		got = append(got, ctx)
		sizes = append(sizes, len(items))
		return double(ctx, items)
	}, Options{})
	ctx := context.WithValue(context.Background(), ctxKey{}, "mine")
	for i := range 3 {
		v, err := b.Do(ctx, i)
		if err != nil || v != 2*i {
			t.Fatalf("Do(%d) = %d, %v", i, v, err)
		}
		// Do returned with the flush done: no timer, no other goroutine.
		if len(got) != i+1 || got[i] != ctx || sizes[i] != 1 {
			t.Fatalf("call %d: flushes %d, sizes %v; the flush must run once per alone call, on the caller's own context", i, len(got), sizes)
		}
	}
	if s := b.Stats(); s != (Stats{Batches: 3, Calls: 3, Largest: 1}) {
		t.Fatalf("stats %+v", s)
	}
}

// gate is a flush whose first batch blocks until released, so that calls
// pile up behind it.
type gate struct {
	mu      sync.Mutex
	batches [][]int
	ctxs    []context.Context
	first   chan struct{} // closed when the first flush started
	release chan struct{}
	n       int
}

func newGate() *gate { return &gate{first: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) flush(ctx context.Context, items []int) []Result[int] {
	g.mu.Lock()
	g.n++
	n := g.n
	g.batches = append(g.batches, append([]int(nil), items...))
	g.ctxs = append(g.ctxs, ctx)
	g.mu.Unlock()
	if n == 1 {
		close(g.first)
		<-g.release
	}
	return double(ctx, items)
}

func TestCallsThatArriveDuringAFlushShareTheNext(t *testing.T) {
	g := newGate()
	b := New(g.flush, Options{})
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if v, err := b.Do(ctx, 100); v != 200 || err != nil {
			t.Errorf("first: %d, %v", v, err)
		}
	}()
	<-g.first
	const n = 10
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			v, err := b.Do(ctx, i)
			if err != nil || v != 2*i {
				t.Errorf("Do(%d) = %d, %v", i, v, err)
			}
		})
	}
	waitPending(t, b, n)
	close(g.release)
	wg.Wait()
	<-done
	if len(g.batches) != 2 || len(g.batches[1]) != n {
		t.Fatalf("batches %v, want the first alone and the other %d together", g.batches, n)
	}
}

func waitPending[T, R any](t *testing.T, b *Batcher[T, R], n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		b.mu.Lock()
		p := len(b.pending)
		b.mu.Unlock()
		if p == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls pending, want %d", p, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestACallWhoseContextEndsBeforeItsBatchIsNotSent(t *testing.T) {
	g := newGate()
	b := New(g.flush, Options{})
	go b.Do(context.Background(), 1)
	<-g.first
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := b.Do(ctx, 7); errc <- err }()
	waitPending(t, b, 1)
	cancel()
	err := <-errc
	var le *LeftError
	if !errors.As(err, &le) || le.Sent || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want a LeftError not sent wrapping context.Canceled", err)
	}
	waitPending(t, b, 0)
	close(g.release)
	// A later call flushes; 7 is in no batch.
	if v, err := b.Do(context.Background(), 3); v != 6 || err != nil {
		t.Fatalf("Do(3) = %d, %v", v, err)
	}
	for _, bt := range g.batches {
		for _, it := range bt {
			if it == 7 {
				t.Fatalf("a call that left before its batch was sent: batches %v", g.batches)
			}
		}
	}
}

func TestACallWhoseContextEndsInFlightIsUnknownAndTheBatchIsCanceledWhenAllLeft(t *testing.T) {
	started := make(chan context.Context, 4)
	g := make(chan struct{})
	b := New(func(ctx context.Context, items []int) []Result[int] {
		if len(items) == 1 && items[0] == -1 { // holds the slot until g closes
			<-g
			return double(ctx, items)
		}
		started <- ctx
		<-ctx.Done()
		out := make([]Result[int], len(items))
		for i := range out {
			out[i].Err = ctx.Err()
		}
		return out
	}, Options{})
	go b.Do(context.Background(), -1)
	waitInflight(t, b, 1)
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { _, err := b.Do(ctxA, 1); errs <- err }()
	go func() { _, err := b.Do(ctxB, 2); errs <- err }()
	waitPending(t, b, 2)
	close(g) // the two go out together
	bctx := <-started
	cancelA()
	err := <-errs
	var le *LeftError
	if !errors.As(err, &le) || !le.Sent {
		t.Fatalf("err %v, want a LeftError sent", err)
	}
	select {
	case <-bctx.Done():
		t.Fatal("the batch was canceled while a member still waited")
	case <-time.After(20 * time.Millisecond):
	}
	cancelB()
	if err := <-errs; !errors.As(err, &le) || !le.Sent {
		t.Fatalf("err %v, want a LeftError sent", err)
	}
	<-bctx.Done() // canceled once nobody waits; the test hangs otherwise
}

func waitInflight[T, R any](t *testing.T, b *Batcher[T, R], n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		b.mu.Lock()
		p := b.inflight
		b.mu.Unlock()
		if p == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d in flight, want %d", p, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTheBatchContextHasTheLatestDeadlineAndTheFirstValues(t *testing.T) {
	g := newGate()
	b := New(g.flush, Options{})
	go b.Do(context.Background(), 0)
	<-g.first
	base := context.WithValue(context.Background(), ctxKey{}, "first")
	d1, d2 := time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	c1, cancel1 := context.WithDeadline(base, d1)
	defer cancel1()
	c2, cancel2 := context.WithDeadline(context.Background(), d2)
	defer cancel2()
	var wg sync.WaitGroup
	wg.Go(func() { b.Do(c1, 1) })
	waitPending(t, b, 1)
	wg.Go(func() { b.Do(c2, 2) })
	waitPending(t, b, 2)
	close(g.release)
	wg.Wait()
	ctx := g.ctxs[1]
	if d, ok := ctx.Deadline(); !ok || !d.Equal(d2) {
		t.Fatalf("deadline %v %v, want %v", d, ok, d2)
	}
	if ctx.Value(ctxKey{}) != "first" {
		t.Fatal("the batch's context lost the first member's values")
	}
	// Without a deadline on every member, none.
	g2 := newGate()
	b = New(g2.flush, Options{})
	go b.Do(context.Background(), 0)
	<-g2.first
	wg.Go(func() { b.Do(c1, 1) })
	waitPending(t, b, 1)
	wg.Go(func() { b.Do(context.Background(), 2) })
	waitPending(t, b, 2)
	close(g2.release)
	wg.Wait()
	if _, ok := g2.ctxs[1].Deadline(); ok {
		t.Fatal("a batch with a member without a deadline has one")
	}
}

func TestLimits(t *testing.T) {
	var cur, peak atomic.Int64
	var mu sync.Mutex
	largest := 0
	b := New(func(ctx context.Context, items []int) []Result[int] {
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		mu.Lock()
		largest = max(largest, len(items))
		mu.Unlock()
		time.Sleep(time.Millisecond)
		cur.Add(-1)
		return double(ctx, items)
	}, Options{MaxInFlight: 3, MaxBatch: 5})
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Go(func() {
			if v, err := b.Do(context.Background(), i); v != 2*i || err != nil {
				t.Errorf("Do(%d) = %d, %v", i, v, err)
			}
		})
	}
	wg.Wait()
	if peak.Load() > 3 || largest > 5 {
		t.Fatalf("peak in flight %d (max 3), largest batch %d (max 5)", peak.Load(), largest)
	}
	if s := b.Stats(); s.Calls != 400 || s.Largest != int64(largest) {
		t.Fatalf("stats %+v", s)
	}
}

// Many callers, random cancellations: every call ends exactly one way, a
// call never sent is in no batch, and each item is flushed at most once.
func TestEveryCallEndsOnce(t *testing.T) {
	var mu sync.Mutex
	flushed := map[int]int{}
	b := New(func(ctx context.Context, items []int) []Result[int] {
		mu.Lock()
		for _, it := range items {
			flushed[it]++
		}
		mu.Unlock()
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		return double(ctx, items)
	}, Options{MaxInFlight: 2, MaxBatch: 8})
	const n = 3000
	notSent := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(400))*time.Microsecond)
			defer cancel()
			v, err := b.Do(ctx, i)
			var le *LeftError
			switch {
			case err == nil:
				if v != 2*i {
					t.Errorf("Do(%d) = %d", i, v)
				}
			case errors.As(err, &le):
				notSent[i] = !le.Sent
			default:
				t.Errorf("Do(%d): %v", i, err)
			}
		})
	}
	wg.Wait()
	// Batches whose members all left may still be in flight.
	waitInflight(t, b, 0)
	waitPending(t, b, 0)
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if flushed[i] > 1 || (notSent[i] && flushed[i] != 0) {
			t.Fatalf("item %d flushed %d times, not sent %v", i, flushed[i], notSent[i])
		}
	}
}
