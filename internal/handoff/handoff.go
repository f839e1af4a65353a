// Package handoff measures how a lease changes hands through
// [durable.Store.WaitLease]: the hand-off latency (from the moment holder A
// calls ReleaseLease to the moment waiter B's WaitLease returns the lease),
// and the fairness of grants among waiters that cycle on one lease. It is a
// measurement aid for benchmarks, on any backend: [Benchmark] and
// [BenchmarkFairness] take a factory of Stores and can be called from a
// backend's own benchmark file.
//
// [Hide] gives a view of a backend without contract.LeaseWatcher, so that
// the same measurement shows the polling floor alone (how waiting worked
// before the watch) beside the watch.
package handoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// Hide returns a view of b that does not implement contract.LeaseWatcher
// (nor KeyWaiter or any capability but ToleranceReporter, InProcess,
// PermitAcquirer and RecordDeleter, which it passes on), so that a Store
// over it waits for leases by polling alone. Closing the view does not
// close b: b's owner does.
func Hide(b contract.Backend) contract.Backend { return hidden{b} }

type hidden struct{ contract.Backend }

func (h hidden) Close() error { return nil }

func (h hidden) ClockTolerance() time.Duration {
	if r, ok := h.Backend.(contract.ToleranceReporter); ok {
		return r.ClockTolerance()
	}
	return 0
}

func (h hidden) InProcess() bool {
	ip, ok := h.Backend.(contract.InProcess)
	return ok && ip.InProcess()
}

func (h hidden) AcquirePermit(ctx context.Context, req contract.PermitRequest) (contract.Lease, error) {
	if pa, ok := h.Backend.(contract.PermitAcquirer); ok {
		return pa.AcquirePermit(ctx, req)
	}
	return contract.Lease{}, &contract.Error{Code: contract.Unimplemented, Msg: "no PermitAcquirer"}
}

func (h hidden) DeleteRecord(ctx context.Context, kind contract.RecordKind, scope contract.Scope, id string) (bool, error) {
	if d, ok := h.Backend.(contract.RecordDeleter); ok {
		return d.DeleteRecord(ctx, kind, scope, id)
	}
	return false, &contract.Error{Code: contract.Unimplemented, Msg: "no RecordDeleter"}
}

// Hidden returns a new Store over s's backend without its LeaseWatcher
// (see [Hide]), with opts. Close it before s.
func Hidden(s *durable.Store, opts ...durable.Option) (*durable.Store, error) {
	var b contract.Backend
	if !s.As(&b) {
		return nil, errors.New("handoff: the store's backend is not reachable with As")
	}
	return durable.New(Hide(b), opts...)
}

// Options of [Measure].
type Options struct {
	Scope    durable.Scope
	Resource string        // "" means "handoff"
	Handoffs int           // how many hand-offs; 0 means 100
	Hold     time.Duration // how long A keeps the lease once B waits; 0 means 5 ms
	TTL      time.Duration // the lease's TTL; 0 means 30 s
}

func (o *Options) defaults() {
	if o.Resource == "" {
		o.Resource = "handoff"
	}
	if o.Handoffs <= 0 {
		o.Handoffs = 100
	}
	if o.Hold <= 0 {
		o.Hold = 5 * time.Millisecond
	}
	if o.TTL <= 0 {
		o.TTL = 30 * time.Second
	}
}

// Result is a latency distribution.
type Result struct {
	Samples []time.Duration // sorted
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of the samples, nearest rank.
func (r Result) Quantile(q float64) time.Duration {
	if len(r.Samples) == 0 {
		return 0
	}
	i := int(q*float64(len(r.Samples))+0.5) - 1
	return r.Samples[min(max(i, 0), len(r.Samples)-1)]
}

// Median is the 0.5-quantile.
func (r Result) Median() time.Duration { return r.Quantile(0.5) }

// P99 is the 0.99-quantile.
func (r Result) P99() time.Duration { return r.Quantile(0.99) }

func (r Result) String() string {
	return fmt.Sprintf("%d hand-offs: median %v, p99 %v, max %v", len(r.Samples), r.Median(), r.P99(), r.Quantile(1))
}

// Measure hands the lease from holder to waiter o.Handoffs times and
// returns the latencies. Each hand-off: holder acquires the lease (it must
// be free), waiter starts WaitLease, holder keeps the lease for o.Hold
// (so that the waiter is waiting, as it would be behind real work) and
// releases it; the latency runs from just before holder's ReleaseLease
// call to the return of waiter's WaitLease. The waiter then releases the
// lease. holder and waiter may be the same Store (the Store's own wake) or
// two Stores on one storage (the backend's watch, or polling behind
// [Hide]).
func Measure(ctx context.Context, holder, waiter *durable.Store, o Options) (Result, error) {
	o.defaults()
	out := make([]time.Duration, 0, o.Handoffs)
	for range o.Handoffs {
		d, err := handOff(ctx, holder, waiter, o)
		if err != nil {
			return Result{}, err
		}
		out = append(out, d)
	}
	slices.Sort(out)
	return Result{Samples: out}, nil
}

// handOff measures one hand-off.
func handOff(ctx context.Context, holder, waiter *durable.Store, o Options) (time.Duration, error) {
	req := durable.LeaseRequest{Scope: o.Scope, Resource: o.Resource, Owner: "holder", TTL: o.TTL}
	held, err := holder.AcquireLease(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("holder: %w", err)
	}
	type got struct {
		l   durable.Lease
		at  time.Time
		err error
	}
	done := make(chan got, 1)
	go func() {
		wreq := req
		wreq.Owner = "waiter"
		l, err := waiter.WaitLease(ctx, wreq)
		done <- got{l, time.Now(), err}
	}()
	time.Sleep(o.Hold)
	start := time.Now()
	if _, err := holder.ReleaseLease(ctx, held); err != nil {
		<-done
		return 0, fmt.Errorf("holder release: %w", err)
	}
	g := <-done
	if g.err != nil {
		return 0, fmt.Errorf("waiter: %w", g.err)
	}
	if _, err := waiter.ReleaseLease(ctx, g.l); err != nil {
		return 0, fmt.Errorf("waiter release: %w", err)
	}
	return g.at.Sub(start), nil
}

// FairnessOptions of [Fairness].
type FairnessOptions struct {
	Scope    durable.Scope
	Resource string        // "" means "fairness"
	Workers  int           // 0 means 8, spread over the Stores in turn
	Grants   int           // total grants; 0 means 1000
	Hold     time.Duration // how long each holder keeps the lease; 0 means none
	TTL      time.Duration // 0 means 30 s
}

// FairnessResult says how the grants were spread.
type FairnessResult struct {
	Grants    int
	PerWorker []int // grants per worker
	PerStore  []int // grants per Store
	// InOrder counts the grants that went to the worker whose WaitLease
	// call began earliest among those waiting then (arrival order, as the
	// caller saw it: the time the call began, not the Store's queue).
	InOrder int
	// MaxGap is the most grants other workers received in a row while
	// one worker waited: between two of its grants, or after its last
	// (7 for 8 workers served round-robin). The wait before a worker's
	// first grant is not counted; PerWorker shows a worker that never
	// got one. The gap includes the time a worker spends outside
	// WaitLease between a release and its next call (a goroutine the
	// scheduler leaves waiting is passed over without having asked).
	MaxGap int
}

func (r FairnessResult) String() string {
	return fmt.Sprintf("%d grants: %d in arrival order (%.1f %%), max gap %d, per worker %v, per store %v",
		r.Grants, r.InOrder, 100*float64(r.InOrder)/float64(max(r.Grants, 1)), r.MaxGap, r.PerWorker, r.PerStore)
}

// Fairness runs o.Workers workers on the Stores (worker i on
// stores[i%len(stores)]), each looping WaitLease, hold, ReleaseLease, until
// o.Grants grants were made, and reports how they were spread.
func Fairness(ctx context.Context, stores []*durable.Store, o FairnessOptions) (FairnessResult, error) {
	if o.Resource == "" {
		o.Resource = "fairness"
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if o.Grants <= 0 {
		o.Grants = 1000
	}
	if o.TTL <= 0 {
		o.TTL = 30 * time.Second
	}
	var (
		mu       sync.Mutex
		seq      int64
		arrival  = make([]int64, o.Workers) // the seq of the worker's current WaitLease call; 0 when not waiting
		res      = FairnessResult{PerWorker: make([]int, o.Workers), PerStore: make([]int, len(stores))}
		lastSeen = make([]int, o.Workers) // index of the worker's previous grant, -1 before the first
		firstErr error
	)
	for i := range lastSeen {
		lastSeen[i] = -1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg, started sync.WaitGroup
	begin := make(chan struct{})
	started.Add(o.Workers)
	for w := range o.Workers {
		s := stores[w%len(stores)]
		wg.Go(func() {
			req := durable.LeaseRequest{Scope: o.Scope, Resource: o.Resource, Owner: fmt.Sprintf("worker-%d", w), TTL: o.TTL}
			started.Done()
			<-begin // all start together
			for {
				mu.Lock()
				if res.Grants >= o.Grants {
					mu.Unlock()
					return
				}
				seq++
				arrival[w] = seq
				mu.Unlock()
				l, err := s.WaitLease(ctx, req)
				if err != nil {
					mu.Lock()
					if firstErr == nil && ctx.Err() == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				mu.Lock()
				if res.Grants < o.Grants {
					earliest := true
					for v, a := range arrival {
						if v != w && a != 0 && a < arrival[w] {
							earliest = false
						}
					}
					if earliest {
						res.InOrder++
					}
					if lastSeen[w] >= 0 {
						res.MaxGap = max(res.MaxGap, res.Grants-lastSeen[w]-1)
					}
					lastSeen[w] = res.Grants
					res.Grants++
					res.PerWorker[w]++
					res.PerStore[w%len(stores)]++
				}
				arrival[w] = 0
				mu.Unlock()
				if o.Hold > 0 {
					time.Sleep(o.Hold)
				}
				if _, err := s.ReleaseLease(context.WithoutCancel(ctx), l); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		})
	}
	started.Wait()
	close(begin)
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	for _, at := range lastSeen { // the gaps after each worker's last grant
		if at >= 0 {
			res.MaxGap = max(res.MaxGap, res.Grants-at-1)
		}
	}
	return res, nil
}
