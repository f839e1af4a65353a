package sqlite

import (
	"context"
	"math/rand/v2"
	"os"
	"sync"

	"github.com/durable-go/durable/contract"
)

// hub wakes the waiters of every backend of this process on one database
// file (or of one memory backend): the WaitKey callers of a key and the
// lease watches (WatchLease). Every write that changes what they wait for
// notifies the hub after its transaction committed.
//
// The file is identified by os.SameFile (device and inode), not by its
// path: backends that open one file by different paths (a relative and an
// absolute path, a symbolic or a hard link) share its hub.
type hub struct {
	fi   os.FileInfo // the database file (nil for a memory backend)
	refs int         // backends using the hub; guarded by hubsMu

	mu      sync.Mutex
	waiters map[contract.KeyRef]map[chan struct{}]struct{}
	watches map[leaseRef]map[*leaseWatch]struct{}
}

// leaseRef names a lease, or the semaphore whose permits a watch covers.
type leaseRef struct {
	scope    contract.Scope
	resource string
}

// leaseWatch is one WatchLease: its channel, with room for one signal,
// receives a signal for every change of the lease ref (and of ref's
// permits) until the watch is dropped.
type leaseWatch struct {
	ref  leaseRef
	ch   chan struct{}
	stop func() bool // stops the context.AfterFunc that drops the watch
}

func newHub() *hub {
	return &hub{waiters: map[contract.KeyRef]map[chan struct{}]struct{}{}, watches: map[leaseRef]map[*leaseWatch]struct{}{}}
}

var (
	hubsMu sync.Mutex
	hubs   []*hub // the hubs of the files that backends of this process have open
)

// acquireHub returns the hub of the database file fi, creating it for the
// first backend on the file.
func acquireHub(fi os.FileInfo) *hub {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	for _, h := range hubs {
		if os.SameFile(h.fi, fi) {
			h.refs++
			return h
		}
	}
	h := newHub()
	h.fi, h.refs = fi, 1
	hubs = append(hubs, h)
	return h
}

// releaseHub forgets h once the last backend on its file has closed.
func releaseHub(h *hub) {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	if h.refs--; h.refs > 0 {
		return
	}
	for i, x := range hubs {
		if x == h {
			hubs = append(hubs[:i], hubs[i+1:]...)
			return
		}
	}
}

// --- WaitKey ---

func (h *hub) subscribe(k contract.KeyRef) chan struct{} {
	ch := make(chan struct{})
	h.mu.Lock()
	m := h.waiters[k]
	if m == nil {
		m = map[chan struct{}]struct{}{}
		h.waiters[k] = m
	}
	m[ch] = struct{}{}
	h.mu.Unlock()
	return ch
}

func (h *hub) unsubscribe(k contract.KeyRef, ch chan struct{}) {
	h.mu.Lock()
	if m := h.waiters[k]; m != nil {
		delete(m, ch)
		if len(m) == 0 {
			delete(h.waiters, k)
		}
	}
	h.mu.Unlock()
}

func (h *hub) notify(k contract.KeyRef) {
	h.mu.Lock()
	m := h.waiters[k]
	delete(h.waiters, k)
	h.mu.Unlock()
	for ch := range m {
		close(ch)
	}
}

// --- WatchLease ---

func (h *hub) addWatch(w *leaseWatch) {
	h.mu.Lock()
	m := h.watches[w.ref]
	if m == nil {
		m = map[*leaseWatch]struct{}{}
		h.watches[w.ref] = m
	}
	m[w] = struct{}{}
	h.mu.Unlock()
}

func (h *hub) removeWatch(w *leaseWatch) {
	h.mu.Lock()
	if m := h.watches[w.ref]; m != nil {
		delete(m, w)
		if len(m) == 0 {
			delete(h.watches, w.ref)
		}
	}
	h.mu.Unlock()
}

// notifyLease signals the watches of the lease (scope, resource) and, for
// a permit's lease, those of its semaphore's resource. A signal that finds
// one pending coalesces with it.
func (h *hub) notifyLease(scope contract.Scope, resource string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.watches) == 0 {
		return
	}
	// Signal in a random order: a map's iteration mostly follows insertion,
	// which would let the watch registered first (one Store) hear of every
	// release first and win the race for the lease (see Store.WaitLease's
	// note on fairness across Stores).
	var ws []*leaseWatch
	for w := range h.watches[leaseRef{scope, resource}] {
		ws = append(ws, w)
	}
	if base, _, ok := contract.SplitPermit(resource); ok {
		for w := range h.watches[leaseRef{scope, base}] {
			ws = append(ws, w)
		}
	}
	rand.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
	for _, w := range ws {
		w.signal()
	}
}

func (w *leaseWatch) signal() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

var _ contract.LeaseWatcher = (*Backend)(nil)

// WatchLease implements contract.LeaseWatcher within this process: every
// grant (AcquireLease, AcquirePermit, a takeover), release (ReleaseLease)
// and deletion (DeleteRecord, Cleanup) of the lease made through any
// backend of this process on the same database file signals the watch
// once its transaction has committed (or failed to commit with an
// unknown outcome); when resource is not a permit's, so does every change
// of the resource's permits. The watch is registered when WatchLease
// returns and dropped when ctx ends or when b (the backend it was made
// through) closes, which leaves a last signal so that a waiter looks again
// and meets ErrClosed. Changes made by other processes on the file signal
// nothing: see the package documentation.
func (b *Backend) WatchLease(ctx context.Context, scope contract.Scope, resource string) (<-chan struct{}, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	w := &leaseWatch{ref: leaseRef{scope, resource}, ch: make(chan struct{}, 1)}
	b.watchMu.Lock()
	if b.closed.Load() {
		b.watchMu.Unlock()
		return nil, errClosed()
	}
	if b.watches == nil {
		b.watches = map[*leaseWatch]struct{}{}
	}
	b.watches[w] = struct{}{}
	b.hub.addWatch(w)
	// Set under watchMu, so that dropWatch (which takes it) sees stop.
	w.stop = context.AfterFunc(ctx, func() { b.dropWatch(w) })
	b.watchMu.Unlock()
	return w.ch, nil
}

// dropWatch ends the watch w when its context ends.
func (b *Backend) dropWatch(w *leaseWatch) {
	b.watchMu.Lock()
	_, ok := b.watches[w]
	delete(b.watches, w)
	b.watchMu.Unlock()
	if ok {
		b.hub.removeWatch(w)
	}
}

// dropWatches ends every watch made through b (when it closes), with a
// last signal.
func (b *Backend) dropWatches() {
	b.watchMu.Lock()
	ws := b.watches
	b.watches = nil
	b.watchMu.Unlock()
	for w := range ws {
		w.stop()
		b.hub.removeWatch(w)
		w.signal()
	}
}

// signalLease tells the watches of the lease (scope, resource) that a
// write changed it, once the write is over: err is the write's result.
// A write that failed changed nothing, except one whose COMMIT failed with
// an unknown outcome (it may have been applied): that signals too, as a
// spurious signal costs a waiter one read and a missed one its wake-up.
func (b *Backend) signalLease(err error, scope contract.Scope, resource string) {
	if err == nil || contract.CodeOf(err) == contract.OutcomeUnknown {
		b.hub.notifyLease(scope, resource)
	}
}
