package memory

import (
	"context"
	"math/rand/v2"

	"github.com/durable-go/durable/contract"
)

var _ contract.LeaseWatcher = (*Backend)(nil)

// leaseWatch is one WatchLease: a channel with room for one signal.
type leaseWatch struct{ ch chan struct{} }

// WatchLease implements contract.LeaseWatcher in process: the watch is
// registered in the Storage, so a change made through any client of it
// signals. A new grant (takeover included) and every deletion (ReleaseLease,
// DeleteRecord, Cleanup) of the lease, or of any permit "resource#n" of a
// plain resource, signals; renewals do not. The watches on a lease are
// signalled one after the other, synchronously, in a random order at each
// change, so that no watcher (no Store) is systematically the first to
// hear of a release. The watch is dropped when ctx ends, by
// context.AfterFunc: no goroutine waits for it meanwhile.
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

// signalWatches signals the watches on k in a random order: the signals
// are sent one after the other, and the goroutine scheduler tends to run
// the receivers in an order that follows it, so a fixed order (a small
// map's iteration order mostly follows registration) would let one
// watcher, in one Store, hear of every release first and win every race
// that follows it.
func (s *Storage) signalWatches(k recKey) {
	ws := s.watches[k]
	if len(ws) == 0 {
		return
	}
	var buf [8]*leaseWatch
	for _, w := range shuffled(buf[:0], ws) {
		select {
		case w.ch <- struct{}{}:
		default: // a signal is pending: they coalesce
		}
	}
}

// shuffled appends the watches of ws to dst in a uniformly random order.
func shuffled(dst []*leaseWatch, ws map[*leaseWatch]struct{}) []*leaseWatch {
	for w := range ws {
		dst = append(dst, w)
	}
	rand.Shuffle(len(dst), func(i, j int) { dst[i], dst[j] = dst[j], dst[i] })
	return dst
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
