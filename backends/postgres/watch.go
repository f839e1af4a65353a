package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

var _ contract.LeaseWatcher = (*Backend)(nil)

const (
	// markTTL is how far ahead (on the database's clock) a watch marks
	// the rows it watches; the watch renews the mark every third of it
	// while it lasts, so a mark whose watcher ended or died lapses within
	// markTTL (a hub's markTTL, which tests may shorten).
	markTTL = 5 * time.Minute
	// listenGrace is how long a watch lets the LISTEN connection be down
	// (not yet up, or lost) before it polls the lease's rows itself.
	listenGrace = time.Second
)

// leaseNotifyPayload is the NOTIFY payload of a lease, as the statements
// compute it (leasePayload): the hex SHA-256 of scope "/" the part of
// resource before its first "#" (the semaphore's resource for a permit)
// "#". Hashing keeps resources out of notifications that any role on the
// database could LISTEN to.
func leaseNotifyPayload(scope contract.Scope, resource string) string {
	base, _, _ := strings.Cut(resource, contract.PermitSeparator)
	sum := sha256.Sum256([]byte(string(scope) + "/" + base + "#"))
	return hex.EncodeToString(sum[:])
}

// watchRange returns the last resource (in byte order) that a watch on
// resource covers besides resource itself: for a plain resource, its
// permits ("resource#1" … "resource#1000" all sort before "resource#:",
// ":" following the digits); for a permit, none (itself).
func watchRange(resource string) string {
	if _, _, ok := contract.SplitPermit(resource); ok {
		return resource
	}
	return resource + contract.PermitSeparator + ":"
}

// leaseWatch is one WatchLease.
type leaseWatch struct {
	b                *Backend
	scope            contract.Scope
	resource, last   string
	payload          string
	ch               chan struct{}
	markTTL          time.Duration
	pollMin, pollMax time.Duration
}

// WatchLease implements contract.LeaseWatcher.
//
// With LISTEN (listen=on, the default), the watch registers with the
// backend's LISTEN connection (the one WaitKey uses) for the lease's
// payload, then marks the lease's row until a few minutes ahead on the
// database's clock (qWatchLease: leases.watched_until, migration 6),
// inserting a released row that holds only the mark when the lease has
// none; for a plain resource it then marks, in a second statement once the
// first has committed, every permit row of the resource that exists
// (qWatchPermits). Every statement that grants, releases or deletes a
// lease (AcquireLease, AcquirePermit, ReleaseLease, DeleteRecord, Cleanup;
// a takeover is a grant) sends a NOTIFY when its row's own mark is live,
// read on the row it locked (its latest version), or, for a permit's row,
// when its semaphore's row's mark is live in the statement's snapshot. The
// payload is the semaphore resource's, which wakes the watches of the
// resource and of all its permits (a watch of one permit is woken by its
// siblings too: a spurious signal).
//
// So a change that commits after WatchLease returned is signaled: one
// whose statement began after the first mark committed reads it (the
// lease's own row, or the semaphore's row for a permit); one already in
// flight on the marked row, or on a permit row that existed when the
// second statement began, holds a row lock that the watch's statement
// waits for (the change then commits before WatchLease returns) or takes
// after it (the change then reads the row's new mark); and a permit row
// that did not exist then was inserted by a statement that committed after
// the first mark, so every later change of it began after that mark too.
// The one exception is that insertion itself: a grant of a permit whose
// row did not exist, in flight while the watch marks, may go unsignaled
// (the release that follows is signaled). A deletion (DeleteRecord,
// Cleanup) of a row with a live mark puts a released row holding the mark
// back in the same statement, so the mark outlives it.
//
// The watch renews its marks every third of their time while it lasts and
// stops when ctx ends; nobody removes a mark, which lapses by itself (5
// minutes after the last renewal), so a lease that nobody watches any more
// notifies for at most that long. Cleanup deletes a row that holds only a
// lapsed mark. Renewals of a lease do not notify.
//
// While the LISTEN connection is down for longer than a second (or never
// came up), the watch polls the state of the lease's rows (qLeaseState:
// every row's token and released flag) from 50 ms doubling to 1 s, and
// signals once when it starts polling and on every change it sees; when
// the connection is back, the backend wakes every watch once.
//
// Without LISTEN (listen=off, pooler=transaction, a *sql.DB that cannot
// listen), the watch polls that way for as long as it lasts, and sets no
// mark: every change still leaves a signal, up to 1 s later (a grant
// changes the row's token, a release its flag, a deletion the set of
// rows).
func (b *Backend) WatchLease(ctx context.Context, scope contract.Scope, resource string) (<-chan struct{}, error) {
	if b.closed.Load() {
		return nil, errClosed()
	}
	if err := ctx.Err(); err != nil {
		return nil, &contract.Error{Code: contract.Canceled, Err: err}
	}
	w := &leaseWatch{
		b: b, scope: scope, resource: resource, last: watchRange(resource),
		payload: leaseNotifyPayload(scope, resource), ch: make(chan struct{}, 1),
		markTTL: b.hub.markTTL, pollMin: b.hub.pollMin, pollMax: b.hub.pollMax,
	}
	if !b.listen {
		state, err := w.state(ctx)
		if err != nil {
			return nil, err
		}
		go w.poll(ctx, state)
		return w.ch, nil
	}
	b.hub.start()
	b.hub.addChan(w.payload, w.ch)
	if err := w.mark(ctx); err != nil {
		b.hub.remove(w.payload, w.ch)
		return nil, err
	}
	go w.listen(ctx)
	return w.ch, nil
}

// mark runs qWatchLease and then, for a watch of a semaphore's resource,
// qWatchPermits (two statements, one after the other: see WatchLease),
// bounded by the default operation timeout.
func (w *leaseWatch) mark(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, durable.DefaultOperationTimeout)
	defer cancel()
	var r countRow
	if _, err := qWatchLease.one(ctx, w.b, watchLeaseParams{Scope: w.scope, Resource: w.resource, MarkTTL: w.markTTL}, &r); err != nil {
		return err
	}
	if w.last == w.resource {
		return nil // a permit's watch
	}
	_, err := qWatchPermits.one(ctx, w.b, watchPermitsParams{Scope: w.scope, Resource: w.resource, Last: w.last, MarkTTL: w.markTTL}, &r)
	return err
}

// state runs qLeaseState, bounded by the default operation timeout.
func (w *leaseWatch) state(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, durable.DefaultOperationTimeout)
	defer cancel()
	var r stateRow
	_, err := qLeaseState.one(ctx, w.b, leaseStateParams{Scope: w.scope, Resource: w.resource, Last: w.last}, &r)
	return r.state, err
}

// sleep waits d, and reports false when the watch ends (ctx, or the
// backend closed) first.
func (w *leaseWatch) sleep(ctx context.Context, t *time.Timer, d time.Duration) bool {
	t.Reset(d)
	select {
	case <-ctx.Done():
		return false
	case <-w.b.hub.stop:
		return false
	case <-t.C:
		return true
	}
}

// poll signals every change of the state of the watched rows from state
// on, polling from pollMin doubling to pollMax, until the watch ends.
func (w *leaseWatch) poll(ctx context.Context, state string) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	delay := w.pollMin
	for w.sleep(ctx, t, delay) {
		state, delay = w.pollOnce(ctx, state, delay)
	}
}

// pollOnce reads the state of the watched rows and signals when it
// differs from state; it returns the state and the next delay (pollMin
// after a change, else doubled up to pollMax).
func (w *leaseWatch) pollOnce(ctx context.Context, state string, delay time.Duration) (string, time.Duration) {
	s, err := w.state(ctx)
	if err == nil && s != state {
		wake(w.ch)
		return s, w.pollMin
	}
	return state, min(2*delay, w.pollMax)
}

// listen keeps a watch that LISTEN serves: it renews the marks every third
// of markTTL (sooner after a failure), and while the LISTEN connection is
// down for longer than listenGrace it also polls (with a signal when it
// starts: the notifications since the connection went down are lost),
// until the connection is up again, which wakes every waiter. It
// unregisters when the watch ends.
func (w *leaseWatch) listen(ctx context.Context) {
	h := w.b.hub
	defer h.remove(w.payload, w.ch)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	renewEvery := w.markTTL / 3
	nextMark := time.Now().Add(renewEvery)
	var downSince time.Time
	polling, state, delay := false, "", w.pollMin
	for {
		wait := listenGrace
		if polling {
			wait = delay
		}
		if !w.sleep(ctx, t, min(wait, time.Until(nextMark))) {
			return
		}
		if !time.Now().Before(nextMark) {
			if err := w.mark(ctx); err != nil {
				nextMark = time.Now().Add(w.pollMax)
			} else {
				nextMark = time.Now().Add(renewEvery)
			}
		}
		switch {
		case h.pid.Load() != 0:
			downSince, polling = time.Time{}, false
		case polling:
			state, delay = w.pollOnce(ctx, state, delay)
		case downSince.IsZero():
			downSince = time.Now()
		case time.Since(downSince) >= listenGrace:
			s, err := w.state(ctx)
			if err == nil {
				state, polling, delay = s, true, w.pollMin
				wake(w.ch)
			}
		}
	}
}
