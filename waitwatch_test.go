package durable_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
)

// watchHub is an in-process contract.LeaseWatcher shared by the clients of
// one memory Storage (a test aid: a grant, release or deletion made through
// any watchingBackend on the hub signals every watch on the lease, and on
// its semaphore for a permit). It counts registrations and live watches.
type watchHub struct {
	mu         sync.Mutex
	regs       map[watchKey]map[chan struct{}]struct{}
	registered atomic.Int64 // WatchLease calls
	live       atomic.Int64 // watches whose ctx has not ended
}

type watchKey struct {
	scope    contract.Scope
	resource string
}

func (h *watchHub) watch(ctx context.Context, scope contract.Scope, resource string) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	k := watchKey{scope, resource}
	h.mu.Lock()
	if h.regs == nil {
		h.regs = map[watchKey]map[chan struct{}]struct{}{}
	}
	if h.regs[k] == nil {
		h.regs[k] = map[chan struct{}]struct{}{}
	}
	h.regs[k][ch] = struct{}{}
	h.mu.Unlock()
	h.registered.Add(1)
	h.live.Add(1)
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		delete(h.regs[k], ch)
		h.mu.Unlock()
		h.live.Add(-1)
	})
	return ch, nil
}

func (h *watchHub) signal(scope contract.Scope, resource string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	send := func(k watchKey) {
		for ch := range h.regs[k] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	send(watchKey{scope, resource})
	if base, _, ok := contract.SplitPermit(resource); ok {
		send(watchKey{scope, base})
	}
}

func (h *watchHub) signalAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.regs {
		for ch := range m {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// watchingBackend is a memory client that signals its hub and watches
// through it.
type watchingBackend struct {
	*memory.Backend
	hub       *watchHub
	attempts  atomic.Int64 // AcquireLease calls
	failWatch atomic.Int64 // WatchLease calls left to fail with Unavailable
}

var _ contract.LeaseWatcher = (*watchingBackend)(nil)

func (w *watchingBackend) WatchLease(ctx context.Context, scope contract.Scope, resource string) (<-chan struct{}, error) {
	if w.failWatch.Add(-1) >= 0 {
		w.hub.registered.Add(1)
		return nil, &contract.Error{Code: contract.Unavailable, Msg: "watch down"}
	}
	return w.hub.watch(ctx, scope, resource)
}

func (w *watchingBackend) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	w.attempts.Add(1)
	l, err := w.Backend.AcquireLease(ctx, req)
	if err == nil {
		w.hub.signal(req.Scope, req.Resource)
	}
	return l, err
}

func (w *watchingBackend) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	ok, err := w.Backend.ReleaseLease(ctx, l)
	if ok || err != nil {
		w.hub.signal(l.Scope, l.Resource)
	}
	return ok, err
}

func (w *watchingBackend) DeleteRecord(ctx context.Context, kind contract.RecordKind, scope contract.Scope, id string) (bool, error) {
	ok, err := w.Backend.DeleteRecord(ctx, kind, scope, id)
	if kind == contract.KindLease && (ok || err != nil) {
		w.hub.signal(scope, id)
	}
	return ok, err
}

func (w *watchingBackend) Cleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	res, err := w.Backend.Cleanup(ctx, req)
	if res.Leases > 0 || err != nil {
		w.hub.signalAll()
	}
	return res, err
}

// watchingStores returns n Stores, each on its own watching client of one
// memory Storage, sharing one hub, and their backends.
func watchingStores(t testing.TB, opts memory.Options, n int) ([]*durable.Store, []*watchingBackend, *watchHub, *memory.Storage) {
	t.Helper()
	st := memory.NewStorage(opts)
	hub := &watchHub{}
	var stores []*durable.Store
	var backends []*watchingBackend
	for range n {
		b := &watchingBackend{Backend: st.Backend(), hub: hub}
		s, err := durable.New(b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
		backends = append(backends, b)
	}
	return stores, backends, hub, st
}
