package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/contract"
	goredis "github.com/redis/go-redis/v9"
)

// subscriber is the backend's one pub/sub connection, shared by every
// WaitKey and WatchLease: each channel is subscribed while somebody waits
// on it or watches it, and a message on it wakes them all.
//
// A subscription counts as confirmed when the server has answered a PING
// sent after the SUBSCRIBE (PING replies come in order on the
// connection, after the SUBSCRIBE was processed; should go-redis have
// reconnected between the two, it subscribed the channel again on the
// new connection before sending the PING there). opMu keeps the commands
// in the order of the changes to chans, so that a channel left and
// joined again is never unsubscribed behind its new waiter's back.
//
// Messages published while the connection is down are lost: when a read
// or write on it fails (go-redis then reconnects and subscribes again),
// and again when the first reply arrives after a failed read, every
// waiter and watcher is woken, so that it reads what it may have missed
// (not on every attempt while the server stays unreachable).
type subscriber struct {
	ps *goredis.PubSub

	opMu sync.Mutex
	seq  uint64 // the number of the last PING sent (under opMu and mu)

	mu      sync.Mutex
	chans   map[string]*subChan
	closing atomic.Bool
	stop    chan struct{} // closed by close: ends the pinger
	end     chan struct{} // closed when loop has returned
}

type subChan struct {
	refs      int
	seq       uint64        // the PING sent after this channel's SUBSCRIBE
	ready     chan struct{} // closed when the server confirmed the subscription
	confirmed bool
	wake      chan struct{}              // closed (and replaced) on every message
	watchers  map[chan struct{}]struct{} // WatchLease channels: a signal each on every message
}

// pongPrefix marks the subscriber's own PINGs.
const pongPrefix = "durable-sub-"

// pingEvery is how often the subscriber pings its connection, to confirm
// subscriptions whose own PING failed and to find a dead connection when
// no message comes.
const pingEvery = 3 * time.Second

// subscriber returns the backend's subscriber, started on first use; nil
// once the backend is closed.
func (b *Backend) subscriber() *subscriber {
	b.subMu.Lock()
	defer b.subMu.Unlock()
	if b.closed.Load() {
		return nil
	}
	if b.sub == nil {
		s := &subscriber{ps: b.rdb.Subscribe(context.Background()), chans: map[string]*subChan{},
			stop: make(chan struct{}), end: make(chan struct{})}
		go s.loop()
		go s.pinger()
		b.sub = s
	}
	return b.sub
}

func (s *subscriber) loop() {
	defer close(s.end)
	failures := 0
	for {
		m, err := s.ps.Receive(context.Background())
		if err != nil {
			if s.closing.Load() || errors.Is(err, goredis.ErrClosed) {
				return
			}
			if failures == 0 {
				s.wakeAll() // the connection broke: messages may be lost
			}
			if failures > 0 {
				select {
				case <-time.After(100 * time.Millisecond):
				case <-s.stop:
					return
				}
			}
			failures++
			continue
		}
		if failures > 0 {
			// Connected again (go-redis subscribed every channel again
			// first): what was published meanwhile is lost.
			s.wakeAll()
			failures = 0
		}
		switch m := m.(type) {
		case *goredis.Message:
			s.signal(m.Channel)
		case *goredis.Pong:
			s.pong(m.Payload)
		}
	}
}

func (s *subscriber) pinger() {
	t := time.NewTicker(pingEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.opMu.Lock()
			s.mu.Lock()
			s.seq++
			n := s.seq
			s.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), pingEvery)
			err := s.ps.Ping(ctx, pongPrefix+strconv.FormatUint(n, 10))
			cancel()
			s.opMu.Unlock()
			if err != nil && !s.closing.Load() {
				s.wakeAll()
			}
		}
	}
}

// pong confirms every subscription whose PING is payload's or earlier.
func (s *subscriber) pong(payload string) {
	n, err := strconv.ParseUint(strings.TrimPrefix(payload, pongPrefix), 10, 64)
	if err != nil || !strings.HasPrefix(payload, pongPrefix) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.chans {
		if !c.confirmed && c.seq <= n {
			c.confirmed = true
			close(c.ready)
		}
	}
}

// signal wakes the waiters and watchers of ch; mu must not be held.
func (s *subscriber) signal(ch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.chans[ch]; c != nil {
		c.signal()
	}
}

// wakeAll wakes every waiter and watcher: messages may have been lost.
func (s *subscriber) wakeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.chans {
		c.signal()
	}
}

func (c *subChan) signal() {
	close(c.wake)
	c.wake = make(chan struct{})
	for w := range c.watchers {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// close wakes every waiter and watcher (they then find the backend
// closed) and closes the connection.
func (s *subscriber) close() error {
	s.closing.Store(true)
	close(s.stop)
	s.wakeAll()
	err := s.ps.Close()
	<-s.end
	return err
}

// join subscribes to ch (once for all its waiters) and returns its state;
// its ready channel closes when the server has confirmed the subscription.
func (s *subscriber) join(ctx context.Context, ch string) (*subChan, error) {
	s.opMu.Lock()
	s.mu.Lock()
	if c := s.chans[ch]; c != nil {
		c.refs++
		s.mu.Unlock()
		s.opMu.Unlock()
		return c, nil
	}
	s.seq++
	c := &subChan{refs: 1, seq: s.seq, ready: make(chan struct{}), wake: make(chan struct{}), watchers: map[chan struct{}]struct{}{}}
	s.chans[ch] = c
	s.mu.Unlock()
	// Should SUBSCRIBE fail, go-redis still has ch in its list and
	// subscribes it on the connection it makes next: a later PING (the
	// pinger's) confirms it for the other waiters.
	err := s.ps.Subscribe(ctx, ch)
	if err == nil {
		err = s.ps.Ping(ctx, pongPrefix+strconv.FormatUint(c.seq, 10))
	}
	s.opMu.Unlock()
	if err != nil {
		s.wakeAll()
		s.leave(ch)
		return nil, err
	}
	return c, nil
}

func (s *subscriber) leave(ch string) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	c := s.chans[ch]
	c.refs--
	last := c.refs == 0
	if last {
		delete(s.chans, ch)
	}
	s.mu.Unlock()
	if last && !s.closing.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.ps.Unsubscribe(ctx, ch)
		cancel()
	}
}

func (s *subscriber) wakeChan(c *subChan) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return c.wake
}

func (s *subscriber) watch(c *subChan, w chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.watchers[w] = struct{}{}
}

func (s *subscriber) unwatch(c *subChan, w chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(c.watchers, w)
}

// WaitKey implements contract.KeyWaiter without polling: it subscribes
// to the key's channel on the backend's shared pub/sub connection (every
// script that completes, releases, deletes or cleans up the key publishes
// on it), waits for the server to confirm the subscription, and reads the
// key; then it reads again on every message, and at the latest every
// Options.PollFloor, so a message lost (a reconnect, a failover) costs at
// most the floor.
func (b *Backend) WaitKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	if b.closed.Load() {
		return contract.KeyRecord{}, errClosed()
	}
	s := b.subscriber()
	if s == nil {
		return contract.KeyRecord{}, errClosed()
	}
	ch := b.base(ref.Scope) + "c:" + ref.Key
	c, err := s.join(ctx, ch)
	if err != nil {
		return contract.KeyRecord{}, b.fail(ctx, err, false)
	}
	defer s.leave(ch)
	floor := time.NewTimer(b.opts.PollFloor)
	defer floor.Stop()
	select {
	case <-c.ready:
	case <-floor.C: // read anyway; the floor bounds a missed message
		floor.Reset(b.opts.PollFloor)
	case <-b.done:
		return contract.KeyRecord{}, errClosed()
	case <-ctx.Done():
		return contract.KeyRecord{}, &contract.Error{Code: contract.Canceled, Err: ctx.Err()}
	}
	for {
		wake := s.wakeChan(c)
		rec, err := b.GetKey(ctx, ref)
		if err != nil {
			return contract.KeyRecord{}, err
		}
		if rec.State != contract.KeyClaimed {
			return rec, nil
		}
		select {
		case <-wake:
		case <-floor.C:
		case <-b.done:
			return contract.KeyRecord{}, errClosed()
		case <-ctx.Done():
			return contract.KeyRecord{}, &contract.Error{Code: contract.Canceled, Err: ctx.Err()}
		}
		if !floor.Stop() {
			select {
			case <-floor.C:
			default:
			}
		}
		floor.Reset(b.opts.PollFloor)
	}
}
