package memory

import (
	"context"

	"github.com/durable-go/durable/contract"
)

var _ contract.LeaseWatcher = (*Backend)(nil)

// leaseWatch is one WatchLease: a channel with room for one signal.
type leaseWatch struct{ ch chan struct{} }

// WatchLease implements contract.LeaseWatcher in process: the watch is
// registered in the Storage, so a change made through any client of it
// signals. A new grant (takeover included) and every deletion (ReleaseLease,
// DeleteRecord, Cleanup) of the lease, or of any permit "resource#n" of a
// plain resource, signals; renewals do not. The watch is dropped when ctx
// ends, by context.AfterFunc: no goroutine waits for it meanwhile.
func (b *Backend) WatchLease(ctx context.Context, scope contract.Scope, resource string) (<-chan struct{}, error) {
	k, err := b.lock(ctx, scope, resource)
	if err != nil {
		return nil, err
	}
	w := &leaseWatch{ch: make(chan struct{}, 1)}
	if b.s.watches[k] == nil {
		b.s.watches[k] = map[*leaseWatch]struct{}{}
	}
	b.s.watches[k][w] = struct{}{}
	b.s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		b.s.mu.Lock()
		defer b.s.mu.Unlock()
		delete(b.s.watches[k], w)
		if len(b.s.watches[k]) == 0 {
			delete(b.s.watches, k)
		}
	})
	return w.ch, nil
}

// signalLease signals the watches of the lease on k, and, when k names a
// permit, those of its semaphore's resource. s.mu must be held.
func (s *Storage) signalLease(k recKey) {
	if len(s.watches) == 0 {
		return // the usual case: no lookup
	}
	s.signalWatches(k)
	if base, _, ok := contract.SplitPermit(k.id); ok {
		s.signalWatches(recKey{k.scope, base})
	}
}

func (s *Storage) signalWatches(k recKey) {
	for w := range s.watches[k] {
		select {
		case w.ch <- struct{}{}:
		default: // a signal is pending: they coalesce
		}
	}
}

// watchCount is the number of watches registered, for tests.
func (s *Storage) watchCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ws := range s.watches {
		n += len(ws)
	}
	return n
}
