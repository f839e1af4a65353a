package redis

import (
	"context"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
	goredis "github.com/redis/go-redis/v9"
)

// subscriber is the backend's one pub/sub connection, shared by every
// WaitKey: each waited key's channel is subscribed while somebody waits on
// it, and a message on it wakes them all.
type subscriber struct {
	ps *goredis.PubSub

	mu    sync.Mutex
	chans map[string]*subChan
	end   chan struct{}
}

type subChan struct {
	refs      int
	ready     chan struct{} // closed when the server confirmed the subscription
	confirmed bool
	wake      chan struct{} // closed (and replaced) on every message
}

func (b *Backend) subscriber() *subscriber {
	b.subMu.Lock()
	defer b.subMu.Unlock()
	if b.sub == nil {
		s := &subscriber{ps: b.rdb.Subscribe(context.Background()), chans: map[string]*subChan{}, end: make(chan struct{})}
		go s.loop()
		b.sub = s
	}
	return b.sub
}

func (s *subscriber) loop() {
	defer close(s.end)
	for m := range s.ps.ChannelWithSubscriptions(goredis.WithChannelSize(1024)) {
		switch m := m.(type) {
		case *goredis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			s.mu.Lock()
			if c := s.chans[m.Channel]; c != nil && !c.confirmed {
				c.confirmed = true
				close(c.ready)
			}
			s.mu.Unlock()
		case *goredis.Message:
			s.mu.Lock()
			if c := s.chans[m.Channel]; c != nil {
				close(c.wake)
				c.wake = make(chan struct{})
			}
			s.mu.Unlock()
		}
	}
}

func (s *subscriber) close() error {
	err := s.ps.Close()
	<-s.end
	return err
}

// join subscribes to ch (once for all its waiters) and returns its state.
func (s *subscriber) join(ctx context.Context, ch string) (*subChan, error) {
	s.mu.Lock()
	c := s.chans[ch]
	first := c == nil
	if first {
		c = &subChan{ready: make(chan struct{}), wake: make(chan struct{})}
		s.chans[ch] = c
	}
	c.refs++
	s.mu.Unlock()
	if first {
		if err := s.ps.Subscribe(ctx, ch); err != nil {
			s.leave(ch)
			return nil, err
		}
	}
	return c, nil
}

func (s *subscriber) leave(ch string) {
	s.mu.Lock()
	c := s.chans[ch]
	c.refs--
	last := c.refs == 0
	if last {
		delete(s.chans, ch)
	}
	s.mu.Unlock()
	if last {
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
