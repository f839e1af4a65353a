package etcd

import (
	"context"
	"strings"
	"time"

	"github.com/durable-go/durable/contract"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var _ contract.LeaseWatcher = (*Backend)(nil)

// rewatchPause is how long a lease watch waits before it watches again
// after etcd ended its watch (no leader, compaction, a lost connection);
// it doubles while the watches keep ending, up to rewatchMaxPause.
const (
	rewatchPause    = 50 * time.Millisecond
	rewatchMaxPause = time.Second
)

// watchRange is one etcd watch of a lease watch: the keys [from, end) (end
// "" for the key from alone), the events that signal, and the revision to
// watch from next.
type watchRange struct {
	from, end string
	names     string                 // the prefix whose rest of a key is the lease's resource
	match     func(name string) bool // whether the event's resource is watched
	signals   func(*clientv3.Event) bool
	next      int64
	ch        clientv3.WatchChan
	cancel    context.CancelFunc
	failing   bool // ended, and not watching again yet (no response since)
}

// WatchLease implements contract.LeaseWatcher with etcd watches, so it sees
// every process's changes. It reads the cluster's revision once (one
// round trip) and watches, from the revision after it, two key ranges:
//
//   - the lease records (P/l/S/RES): a creation (a grant, also after a
//     takeover) or a deletion (ReleaseLease, DeleteRecord, Cleanup, the
//     first step of a takeover) signals; a renewal rewrites the record,
//     which signals nothing.
//   - the busy markers (P/lb/S/RES): a deletion signals (a release, a
//     deletion, or etcd's lease timer ending the marker: the moment a
//     takeover becomes possible, which the contract does not require to
//     signal but a waiter can use); a renewal writes it, which signals
//     nothing.
//
// For a plain resource each range covers the resource's key and its
// permits' keys (RES and RES#…: nothing else sorts between RES and RES$,
// as an identifier has no byte below "$"), filtered by name; for a permit's
// resource, its own keys alone. Every change committed after WatchLease
// returns is at a revision the watches start at or after, so none is
// missed even if etcd registers them later. A transaction seen by both
// watches (a release deletes the record and the busy marker) signals
// once. When etcd ends a watch (no leader: the watches require one; a
// compaction; a lost connection) it signals, once until a watch holds
// again, and watches again after a pause (50 ms, doubling to 1 s while
// the watches keep ending) from the revision after the last event seen,
// so nothing is missed — unless that revision was compacted away, which
// signals too, and the watch goes on from the compaction. It ends when ctx
// ends or the backend is closed.
func (b *Backend) WatchLease(ctx context.Context, scope contract.Scope, resource string) (<-chan struct{}, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	lk := b.leaseKeys(scope, resource)
	r, err := b.get(ctx, clientv3.OpGet(lk.rec, clientv3.WithCountOnly()))
	if err != nil {
		return nil, err
	}
	return b.startLeaseWatch(ctx, b.leaseWatchRanges(scope, resource, r.Header.Revision+1))
}

// leaseWatchRanges returns the watches of WatchLease, from revision start.
func (b *Backend) leaseWatchRanges(scope contract.Scope, resource string, start int64) []*watchRange {
	lk := b.leaseKeys(scope, resource)
	isCreateOrDelete := func(ev *clientv3.Event) bool { return ev.Type == mvccpb.DELETE || ev.IsCreate() }
	isDelete := func(ev *clientv3.Event) bool { return ev.Type == mvccpb.DELETE }
	ranges := []*watchRange{
		{from: lk.rec, names: b.scopePrefix(nsLease, scope), signals: isCreateOrDelete, next: start},
		{from: lk.busy, names: b.scopePrefix(nsLeaseBusy, scope), signals: isDelete, next: start},
	}
	if _, _, ok := contract.SplitPermit(resource); ok {
		for _, w := range ranges {
			w.match = func(name string) bool { return name == resource }
		}
	} else {
		for _, w := range ranges {
			w.end = w.from + "$" // "#" + 1
			w.match = func(name string) bool {
				base, _, ok := contract.SplitPermit(name)
				return name == resource || ok && base == resource
			}
		}
	}
	return ranges
}

// startLeaseWatch runs the watches in the background until ctx ends or the
// backend closes.
func (b *Backend) startLeaseWatch(ctx context.Context, ranges []*watchRange) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	b.bgMu.Lock()
	defer b.bgMu.Unlock()
	if b.closed.Load() {
		return nil, &contract.Error{Code: contract.Closed, Msg: "backend is closed"}
	}
	b.watches.Add(1)
	b.bg.Go(func() {
		defer b.watches.Add(-1)
		b.watchLease(ctx, ranges, ch)
	})
	return ch, nil
}

// watchLease runs a lease watch until ctx ends or the backend closes.
func (b *Backend) watchLease(ctx context.Context, ranges []*watchRange, ch chan<- struct{}) {
	signal := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	// One change (a transaction: a revision) that both watches see, such
	// as a release deleting the record and the busy marker, signals once:
	// the revisions that signalled last are remembered.
	var recent [16]int64
	var nrecent int
	signalAt := func(rev int64) {
		for _, r := range recent {
			if r == rev {
				return
			}
		}
		recent[nrecent%len(recent)] = rev
		nrecent++
		signal()
	}
	start := func(w *watchRange) {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		opts := []clientv3.OpOption{clientv3.WithRev(w.next), clientv3.WithCreatedNotify()}
		if w.end != "" {
			opts = append(opts, clientv3.WithRange(w.end))
		}
		w.ch, w.cancel = b.cli.Watch(wctx, w.from, opts...), cancel
	}
	defer func() {
		for _, w := range ranges {
			if w.cancel != nil {
				w.cancel()
			}
		}
	}()
	for _, w := range ranges {
		start(w)
	}
	pause := time.NewTimer(rewatchPause)
	pause.Stop()
	defer pause.Stop()
	var pauseC <-chan time.Time // pause.C while a watch waits to start again
	backoff := rewatchPause
	for {
		var resp clientv3.WatchResponse
		var ok bool
		var w *watchRange
		select {
		case <-ctx.Done():
			return
		case <-b.done:
			return
		case <-pauseC:
			pauseC = nil
			for _, w := range ranges {
				if w.ch == nil {
					start(w)
				}
			}
			continue
		// Two ranges, one select; a nil channel (waiting to start again)
		// blocks.
		case resp, ok = <-ranges[0].ch:
			w = ranges[0]
		case resp, ok = <-ranges[1].ch:
			w = ranges[1]
		}
		for _, ev := range resp.Events {
			w.next = max(w.next, ev.Kv.ModRevision+1)
			if w.signals(ev) && w.match(strings.TrimPrefix(string(ev.Kv.Key), w.names)) {
				signalAt(ev.Kv.ModRevision)
			}
		}
		if resp.CompactRevision != 0 {
			// Events before the compaction are gone: some may have been
			// ours.
			w.next = max(w.next, resp.CompactRevision)
			signal()
		}
		if ok && resp.Err() == nil {
			// Watching (the creation's notice, events, progress).
			w.failing = false
			if !ranges[0].failing && !ranges[1].failing {
				backoff = rewatchPause
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		// etcd ended this watch. It starts again from the revision after
		// the last event seen, so nothing is missed (a compaction aside,
		// which signalled above), but the waiter hears of it once, in
		// case it wants to look: a spurious signal. Watch again after a
		// pause (a nil channel blocks meanwhile), longer while the
		// watches keep ending.
		if !w.failing {
			w.failing = true
			signal()
		}
		w.cancel()
		w.ch, w.cancel = nil, nil
		if pauseC == nil {
			pause.Reset(backoff)
			pauseC = pause.C
			backoff = min(2*backoff, rewatchMaxPause)
		}
	}
}
