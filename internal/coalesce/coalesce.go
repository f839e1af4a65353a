// Package coalesce gathers the writes that callers of one backend send at
// the same time into batches, so that a backend can apply each batch in one
// statement or one transaction and commit once.
//
// The rules, which every backend that coalesces inherits from here:
//
//   - A batch is what accumulated while earlier batches were in flight;
//     nothing ever waits on a timer. A call that finds a free flush slot
//     is flushed at once, by its own goroutine and with its own context,
//     exactly as if there were no batcher.
//   - Every call gets its own result: the flush function returns one per
//     call.
//   - A call whose context ended before its batch was taken is not sent;
//     it gets a *LeftError with Sent false. A call whose context ends while
//     its batch is in flight gets a *LeftError with Sent true: its outcome
//     is unknown to it (the batch goes on; when every member of a batch has
//     left, the batch's context is canceled).
//
// What a failed batch means for its members (unknown when the commit's
// outcome is unknown, the honest error when it certainly failed) is the
// flush function's to say, per call.
package coalesce

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Result is the outcome of one call.
type Result[R any] struct {
	Val R
	Err error
}

// Flush applies a batch. It returns exactly one Result per call, in the
// order of calls. ctx is the only caller's own context when the batch is
// one call from a caller that found nothing in flight; otherwise it is a
// context detached from the members' cancellation, carrying the values of
// the first member's, with the latest of the members' deadlines when every
// member has one, and canceled when every member has left.
type Flush[T, R any] func(ctx context.Context, calls []T) []Result[R]

// LeftError is the error of a call whose context ended before its result
// was known.
type LeftError struct {
	// Sent is whether the call was handed to a flush: if so, it may have
	// been applied.
	Sent bool
	// Err is the context's error.
	Err error
}

func (e *LeftError) Error() string {
	if e.Sent {
		return "context ended while the write was in flight in a batch: " + e.Err.Error()
	}
	return "context ended before the write was sent: " + e.Err.Error()
}

func (e *LeftError) Unwrap() error { return e.Err }

// Options tune a Batcher. The zero value is usable.
type Options struct {
	// MaxInFlight is how many batches may be in flight at once (default 1).
	// More overlap round trips, fewer make larger batches.
	MaxInFlight int
	// MaxBatch caps the calls of one batch (default 64).
	MaxBatch int
}

// Batcher coalesces the calls of its callers. Its zero value is not
// usable; make one with New.
type Batcher[T, R any] struct {
	flush    Flush[T, R]
	max      int
	maxBatch int

	mu       sync.Mutex
	pending  []*call[T, R]
	inflight int

	batches, calls, largest atomic.Int64
}

type state uint8

const (
	waiting state = iota // in pending
	taken                // handed to a flush
	left                 // its caller gave up before it was taken
)

type call[T, R any] struct {
	item  T
	ctx   context.Context
	done  chan struct{}
	res   Result[R]
	state state // guarded by Batcher.mu
	batch *batch
}

// batch is what the members of one multi-call flush share: how many are
// still waiting for it, to cancel it when none are.
type batch struct {
	waiting atomic.Int64
	cancel  context.CancelFunc
}

// New returns a Batcher that applies batches with flush.
func New[T, R any](flush Flush[T, R], o Options) *Batcher[T, R] {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 1
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 64
	}
	return &Batcher[T, R]{flush: flush, max: o.MaxInFlight, maxBatch: o.MaxBatch}
}

// Stats says how many batches were flushed, how many calls they held and
// the largest batch so far.
type Stats struct{ Batches, Calls, Largest int64 }

// Stats returns the batcher's counts so far.
func (b *Batcher[T, R]) Stats() Stats {
	return Stats{b.batches.Load(), b.calls.Load(), b.largest.Load()}
}

// Do sends item in the next batch and returns its result. See the package
// documentation for what happens when ctx ends.
func (b *Batcher[T, R]) Do(ctx context.Context, item T) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, &LeftError{Err: err}
	}
	b.mu.Lock()
	if b.inflight < b.max && len(b.pending) == 0 {
		b.inflight++
		b.mu.Unlock()
		res := b.alone(ctx, item)
		return res.Val, res.Err
	}
	c := &call[T, R]{item: item, ctx: ctx, done: make(chan struct{})}
	b.pending = append(b.pending, c)
	if b.inflight < b.max {
		b.inflight++
		calls := b.take()
		if len(calls) == 1 && calls[0] == c {
			// Alone after all: the others pending had left.
			b.mu.Unlock()
			c.res = b.alone(ctx, item)
			close(c.done)
			return c.res.Val, c.res.Err
		}
		bctx, cancel := bind(calls)
		b.mu.Unlock()
		go b.run(bctx, cancel, calls)
	} else {
		b.mu.Unlock()
	}
	select {
	case <-c.done:
		return c.res.Val, c.res.Err
	case <-ctx.Done():
	}
	b.mu.Lock()
	switch c.state {
	case waiting:
		for i, p := range b.pending {
			if p == c {
				b.pending = append(b.pending[:i], b.pending[i+1:]...)
				break
			}
		}
		c.state = left
		b.mu.Unlock()
		return zero, &LeftError{Err: ctx.Err()}
	case left:
		b.mu.Unlock()
		return zero, &LeftError{Err: ctx.Err()}
	}
	bt := c.batch
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.res.Val, c.res.Err
	default:
	}
	if bt != nil && bt.waiting.Add(-1) == 0 {
		bt.cancel()
	}
	return zero, &LeftError{Sent: true, Err: ctx.Err()}
}

// alone flushes item by itself, here, with the caller's context, as if
// there were no batcher, in the flight slot the caller has taken.
func (b *Batcher[T, R]) alone(ctx context.Context, item T) Result[R] {
	b.count(1)
	res := b.flush(ctx, []T{item})[0]
	b.finished()
	return res
}

// take removes up to maxBatch calls from pending, in arrival order, and
// marks them taken; calls whose context has ended are marked left and
// released instead. b.mu must be held.
func (b *Batcher[T, R]) take() []*call[T, R] {
	var out []*call[T, R]
	n := 0
	for n < len(b.pending) && len(out) < b.maxBatch {
		c := b.pending[n]
		n++
		if err := c.ctx.Err(); err != nil {
			c.state = left
			c.res.Err = &LeftError{Err: err}
			close(c.done)
			continue
		}
		c.state = taken
		out = append(out, c)
	}
	rest := copy(b.pending, b.pending[n:])
	clear(b.pending[rest:])
	b.pending = b.pending[:rest]
	return out
}

// bind gives calls their shared batch and returns the batch's context.
// b.mu must be held: a member that leaves reads its batch under it.
func bind[T, R any](calls []*call[T, R]) (context.Context, context.CancelFunc) {
	if len(calls) == 0 {
		return nil, func() {}
	}
	ctx, cancel := batchContext(calls)
	bt := &batch{cancel: cancel}
	bt.waiting.Store(int64(len(calls)))
	for _, c := range calls {
		c.batch = bt
	}
	return ctx, cancel
}

// run flushes calls (taken, so no longer in pending) on ctx, their batch's
// context, and delivers each result.
func (b *Batcher[T, R]) run(ctx context.Context, cancel context.CancelFunc, calls []*call[T, R]) {
	if len(calls) > 0 {
		items := make([]T, len(calls))
		for i, c := range calls {
			items[i] = c.item
		}
		b.count(len(calls))
		res := b.flush(ctx, items)
		cancel()
		for i, c := range calls {
			c.res = res[i]
			close(c.done)
		}
	}
	b.finished()
}

// finished ends a flush: the next batch, if calls are waiting, starts in a
// new goroutine, so that the goroutine that flushed can return.
func (b *Batcher[T, R]) finished() {
	b.mu.Lock()
	b.inflight--
	if len(b.pending) == 0 || b.inflight >= b.max {
		b.mu.Unlock()
		return
	}
	b.inflight++
	calls := b.take()
	ctx, cancel := bind(calls)
	b.mu.Unlock()
	go b.run(ctx, cancel, calls)
}

func (b *Batcher[T, R]) count(n int) {
	b.batches.Add(1)
	b.calls.Add(int64(n))
	for {
		l := b.largest.Load()
		if int64(n) <= l || b.largest.CompareAndSwap(l, int64(n)) {
			return
		}
	}
}

// batchContext is the context of a multi-call flush: the first member's
// values without its cancellation, the latest member deadline when every
// member has one.
func batchContext[T, R any](calls []*call[T, R]) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(calls[0].ctx)
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithCancel(ctx)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}
