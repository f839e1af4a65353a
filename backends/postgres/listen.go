package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
)

// WaitKey polling floor: the first re-check after this long, doubling up to
// pollMax (a hub's pollMin and pollMax, which tests may lengthen). With
// LISTEN on, a notification wakes the waiter at once; the floor only
// bounds the delay after a lost notification.
const (
	pollMin = 50 * time.Millisecond
	pollMax = time.Second

	listenBackoffMin = 50 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// channelName is the NOTIFY channel of a schema: "durable_keys_" and the
// schema, or a hash of it when that would exceed PostgreSQL's 63 bytes.
func channelName(schema string) string {
	const prefix = "durable_keys_"
	if len(prefix)+len(schema) <= 63 {
		return prefix + schema
	}
	sum := sha256.Sum256([]byte(schema))
	return prefix + hex.EncodeToString(sum[:8])
}

// notifyPayload is the NOTIFY payload for a key: the hex SHA-256 of
// scope "/" key, as the statements compute it (payloadExpr). Scopes and
// keys cannot contain "/", so it is unambiguous; hashing keeps keys out of
// notifications that any role on the database could LISTEN to.
func notifyPayload(k contract.KeyRef) string {
	sum := sha256.Sum256([]byte(string(k.Scope) + "/" + k.Key))
	return hex.EncodeToString(sum[:])
}

// listener opens the LISTEN sessions of a hub: one implementation per
// client library (see pgclient.Listener).
type listener = pgclient.Listener

// hub owns the backend's one LISTEN connection and the in-process waiters
// it wakes.
type hub struct {
	b        *Backend
	l        listener // nil: poll only
	mu       sync.Mutex
	waiters  map[string]map[chan struct{}]struct{}
	started  bool
	closed   bool
	cancel   context.CancelFunc
	done     chan struct{}
	closeErr error         // set by run before done is closed
	pid      atomic.Uint32 // the listener's server process, 0 when down

	stop chan struct{} // closed by close: the lease watches end

	// The polling floor of WaitKey and of WatchLease, and WatchLease's
	// mark; fixed before the first WaitKey or WatchLease.
	pollMin, pollMax time.Duration
	markTTL          time.Duration
}

func newHub(b *Backend, l listener) *hub {
	return &hub{
		b: b, l: l, waiters: map[string]map[chan struct{}]struct{}{}, stop: make(chan struct{}),
		pollMin: pollMin, pollMax: pollMax, markTTL: markTTL,
	}
}

// add registers a waiter for payload. The channel has room for one wake-up.
func (h *hub) add(payload string) chan struct{} {
	ch := make(chan struct{}, 1)
	h.addChan(payload, ch)
	return ch
}

// addChan registers ch, a channel with room for one wake-up, for payload.
func (h *hub) addChan(payload string, ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.waiters[payload]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		h.waiters[payload] = set
	}
	set[ch] = struct{}{}
}

func (h *hub) remove(payload string, ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if set := h.waiters[payload]; set != nil {
		delete(set, ch)
		if len(set) == 0 {
			delete(h.waiters, payload)
		}
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (h *hub) wake(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.waiters[payload] {
		wake(ch)
	}
}

// wakeAll makes every waiter look again: after the listener (re)connects,
// notifications sent while it was down are lost.
func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.waiters {
		for ch := range set {
			wake(ch)
		}
	}
}

// start starts the listener once, on the first WaitKey or WatchLease.
func (h *hub) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started || h.closed || h.l == nil {
		return
	}
	h.started = true
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan struct{})
	go h.run(ctx)
}

// close stops the listener and returns the error of closing its
// connection, if any.
func (h *hub) close() error {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.stop)
	}
	cancel, done := h.cancel, h.done
	h.mu.Unlock()
	h.wakeAll() // waiters look again and see Closed
	if cancel == nil {
		return nil
	}
	cancel()
	<-done
	if h.closeErr != nil {
		return &contract.Error{Code: contract.Unknown, Msg: "closing the LISTEN connection failed", Err: h.closeErr}
	}
	return nil
}

// run keeps a LISTEN session up until ctx ends, reconnecting with backoff.
func (h *hub) run(ctx context.Context) {
	defer close(h.done)
	backoff := listenBackoffMin
	lost := false // a session was lost and none established since
	failures := 0 // sessions that failed to establish in a row
	for ctx.Err() == nil {
		established, closeErr, err := h.l.Listen(ctx, h.b.channel,
			func(pid uint32) {
				// Logged before the pid is published: whoever sees the
				// listener up (tests, Doctor) sees the line too.
				log := h.b.tele.Load().log
				if lost || failures > 0 {
					log.Info("durable/postgres: LISTEN connection re-established", "pid", pid, "failed_attempts", failures)
				} else {
					log.Debug("durable/postgres: LISTEN connection established", "pid", pid)
				}
				lost, failures = false, 0
				h.pid.Store(pid)
				h.wakeAll()
			},
			h.wake)
		h.pid.Store(0)
		if ctx.Err() != nil {
			h.closeErr = closeErr
			return
		}
		if pgclient.PoolClosed(err) {
			return
		}
		tel := h.b.tele.Load()
		if established {
			backoff = listenBackoffMin
			lost = true
			tel.log.Warn("durable/postgres: LISTEN connection lost; WaitKey and WatchLease poll until it is re-established", "err", err, "retry_in", backoff)
			tel.disconnects.Add(context.Background(), 1)
		} else {
			failures++
			level := slog.LevelWarn
			if lost || failures > 1 {
				level = slog.LevelDebug // once per outage at Warn
			}
			tel.log.Log(context.Background(), level, "durable/postgres: LISTEN connection failed; retrying", "err", err, "attempt", failures, "retry_in", backoff)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

// listenerPID returns the server process of the LISTEN connection, or 0.
func (b *Backend) listenerPID() uint32 { return b.hub.pid.Load() }

// WaitKey implements contract.KeyWaiter. It registers for the key's
// notifications, then reads the key, and sleeps until a notification, the
// polling floor (50 ms doubling to 1 s) or ctx, and reads again. A lost
// notification (the LISTEN connection died, or listen=off) only delays the
// wake-up up to the polling floor.
//
// A completion (or a release, a cleanup, a delete) notifies only a key
// marked waited, so while the LISTEN connection is up each read is
// qWaitKey's, which marks the claim it finds (see there): LISTEN is then
// active before the mark, and the completion that locks the row after the
// mark notifies. While it is down the reads are GetKey's; when it comes up,
// every waiter reads again (hub.wakeAll), and marks.
func (b *Backend) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	if b.closed.Load() {
		return contract.KeyRecord{}, errClosed()
	}
	var wakeCh chan struct{}
	if b.listen {
		payload := notifyPayload(k)
		b.hub.start()
		wakeCh = b.hub.add(payload)
		defer b.hub.remove(payload, wakeCh)
	}
	delay, maxDelay := b.hub.pollMin, b.hub.pollMax
	for {
		var rec contract.KeyRecord
		var err error
		if wakeCh != nil && b.hub.pid.Load() != 0 {
			rec, err = b.waitRead(ctx, k)
		} else {
			rec, err = b.GetKey(ctx, k)
		}
		switch {
		case err == nil && (rec.State == contract.KeyCompleted || rec.State == contract.KeyExpired):
			return rec, nil
		case err != nil && !contract.Retryable(err):
			return contract.KeyRecord{}, err // NotFound, Canceled, Closed …
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return contract.KeyRecord{}, &contract.Error{Code: contract.Canceled, Err: ctx.Err()}
		case <-wakeCh:
			t.Stop()
		case <-t.C:
			delay = min(2*delay, maxDelay)
		}
	}
}

// waitRead reads the key for WaitKey while the LISTEN connection is up,
// marking a claim waited (qWaitKey). It reads again when the statement's
// snapshot shows an unmarked claim that its UPDATE could not mark: the row
// changed after the snapshot (completed, released or deleted), and the
// next snapshot shows how.
func (b *Backend) waitRead(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	p := b.getKeyParams(k)
	for attempt := 0; attempt < maxStaleRetries; attempt++ {
		p.Now = b.nowParam()
		var r waitKeyRow
		found, err := qWaitKey.one(ctx, b, p, &r)
		if err != nil {
			return contract.KeyRecord{}, err
		}
		if !found {
			return contract.KeyRecord{}, errKeyNotFound()
		}
		if r.marked || r.waited || r.state != string(contract.KeyClaimed) {
			return r.record()
		}
	}
	return contract.KeyRecord{}, errContention()
}
