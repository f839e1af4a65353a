package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/jackc/puddle/v2"
)

// WaitKey polling floor: the first re-check after this long, doubling up to
// pollMax. With LISTEN on, a notification wakes the waiter at once; the
// floor only bounds the delay after a lost notification.
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

// hub owns the backend's one LISTEN connection and the in-process waiters
// it wakes.
type hub struct {
	b       *Backend
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
	pid     atomic.Uint32 // the listener's server process, 0 when down
}

func newHub(b *Backend) *hub {
	return &hub{b: b, waiters: map[string]map[chan struct{}]struct{}{}}
}

// add registers a waiter for payload. The channel has room for one wake-up.
func (h *hub) add(payload string) chan struct{} {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.waiters[payload]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		h.waiters[payload] = set
	}
	set[ch] = struct{}{}
	return ch
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

// start starts the listener once, on the first WaitKey.
func (h *hub) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started || h.closed {
		return
	}
	h.started = true
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan struct{})
	go h.run(ctx)
}

func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	cancel, done := h.cancel, h.done
	h.mu.Unlock()
	h.wakeAll() // waiters look again and see Closed
	if cancel != nil {
		cancel()
		<-done
	}
}

// run keeps a LISTEN session up until ctx ends, reconnecting with backoff.
func (h *hub) run(ctx context.Context) {
	defer close(h.done)
	backoff := listenBackoffMin
	for ctx.Err() == nil {
		established, err := h.session(ctx)
		if ctx.Err() != nil || errors.Is(err, puddle.ErrClosedPool) {
			return
		}
		if established {
			backoff = listenBackoffMin
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

// session takes a connection out of the pool, listens on the schema's
// channel and dispatches notifications until the connection fails.
func (h *hub) session(ctx context.Context) (established bool, err error) {
	pc, err := h.b.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	conn := pc.Hijack()
	defer func() {
		h.pid.Store(0)
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+quoteIdent(h.b.channel)); err != nil {
		return false, err
	}
	h.pid.Store(conn.PgConn().PID())
	h.wakeAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		h.wake(n.Payload)
	}
}

// listenerPID returns the server process of the LISTEN connection, or 0.
func (b *Backend) listenerPID() uint32 { return b.hub.pid.Load() }

// WaitKey implements contract.KeyWaiter. It registers for the key's
// notifications, then reads the key, and sleeps until a notification, the
// polling floor (50 ms doubling to 1 s) or ctx, and reads again. A lost
// notification (the LISTEN connection died, or listen=off) only delays the
// wake-up up to the polling floor.
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
	delay := pollMin
	for {
		rec, err := b.GetKey(ctx, k)
		switch {
		case err == nil && rec.State == contract.KeyCompleted:
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
			delay = min(2*delay, pollMax)
		}
	}
}
