package redis

import (
	"context"
	"strconv"
	"time"

	"github.com/durable-go/durable/contract"
	goredis "github.com/redis/go-redis/v9"
)

// DefaultWatchMarkTTL is how long a watch mark P:{sS}:m:TR outlives the
// last backend that refreshed it (see WatchLease).
const DefaultWatchMarkTTL = time.Minute

// watchConfirmTimeout bounds how long WatchLease waits for the server to
// confirm its subscription.
const watchConfirmTimeout = 10 * time.Second

// markRef counts a backend's watches of one token resource.
type markRef struct {
	n  int
	ch string // the token resource's channel
}

// WatchLease implements contract.LeaseWatcher over the backend's shared
// pub/sub connection. The channel is per scope and token resource
// (contract.TokenResource): P:{sS}:h:TR, so a watch of "R" (or of one of
// its permits "R#n") hears every grant, release and deletion of R and of
// all its permits; a watch of a permit hears its siblings too (spurious
// signals, which the contract allows).
//
// Scripts publish only while somebody watches: WatchLease sets the mark
// P:{sS}:m:TR (a string with a TTL of a minute) and the backend refreshes
// it every quarter of that while any of its watches of TR lasts; the
// grant, release, DeleteRecord and Cleanup scripts PUBLISH when the mark
// exists. A lock nobody watches pays one EXISTS per grant and release, no
// PUBLISH (which on a cluster every node would receive). A mark outlives
// its last watcher by up to a minute (publishing to nobody meanwhile), or
// a crashed process's watches likewise.
//
// WatchLease returns once the server has confirmed the subscription and
// the mark is set: every grant, release or deletion that runs after it
// returns publishes, and the message reaches this backend (on a cluster,
// a classic PUBLISH reaches every node's subscribers). Where a message
// may have been lost — the pub/sub connection failed and was made again,
// or a refresh found the mark gone or failed — every watch concerned gets
// a signal: a watcher reads again, and misses nothing for long. The watch
// ends when ctx does; the channel is then left (not closed). Close
// signals every watch once, so that its owner finds the backend closed.
func (b *Backend) WatchLease(ctx context.Context, scope contract.Scope, resource string) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, &contract.Error{Code: contract.Canceled, Msg: "context ended", Err: err}
	}
	s := b.subscriber()
	if s == nil {
		return nil, errClosed()
	}
	tr := contract.TokenResource(resource)
	base := b.base(scope)
	ch, mark := base+"h:"+tr, base+"m:"+tr
	c, err := s.join(ctx, ch)
	if err != nil {
		return nil, b.fail(ctx, err, false)
	}
	out := make(chan struct{}, 1)
	s.watch(c, out)
	ok := false
	defer func() {
		if !ok {
			s.unwatch(c, out)
			s.leave(ch)
		}
	}()
	timer := time.NewTimer(watchConfirmTimeout)
	defer timer.Stop()
	select {
	case <-c.ready:
	case <-timer.C:
		return nil, &contract.Error{Code: contract.Unavailable, Msg: "redis did not confirm the subscription in time"}
	case <-b.done:
		return nil, errClosed()
	case <-ctx.Done():
		return nil, &contract.Error{Code: contract.Canceled, Msg: "context ended", Err: ctx.Err()}
	}
	if err := b.addMark(ctx, mark, ch); err != nil {
		return nil, err
	}
	ok = true
	context.AfterFunc(ctx, func() {
		s.unwatch(c, out)
		s.leave(ch)
		b.dropMark(mark)
	})
	return out, nil
}

// addMark sets mark (one more watch of its token resource by this
// backend) and keeps it alive until dropMark.
func (b *Backend) addMark(ctx context.Context, mark, ch string) error {
	b.markMu.Lock()
	m := b.marks[mark]
	if m == nil {
		if b.marks == nil {
			b.marks = map[string]*markRef{}
		}
		m = &markRef{ch: ch}
		b.marks[mark] = m
	}
	m.n++
	if !b.marking {
		b.marking = true
		go b.refreshMarks()
	}
	b.markMu.Unlock()
	if err := b.rdb.Set(ctx, mark, "1", b.markTTL()).Err(); err != nil {
		b.dropMark(mark)
		return b.fail(ctx, err, false)
	}
	return nil
}

func (b *Backend) dropMark(mark string) {
	b.markMu.Lock()
	defer b.markMu.Unlock()
	if m := b.marks[mark]; m != nil {
		m.n--
		if m.n == 0 {
			delete(b.marks, mark)
		}
	}
}

func (b *Backend) markTTL() time.Duration {
	if b.watchMarkTTL > 0 {
		return b.watchMarkTTL
	}
	return DefaultWatchMarkTTL
}

// refreshMarks sets every mark of the backend's watches again, every
// quarter of the marks' TTL, until none is left or the backend closes. A
// mark that was gone (expired, deleted) or could not be set signals its
// watchers: a grant or release may have run without publishing.
func (b *Backend) refreshMarks() {
	ttl := b.markTTL()
	t := time.NewTicker(ttl / 4)
	defer t.Stop()
	px := strconv.FormatInt(ttl.Milliseconds(), 10)
	for {
		select {
		case <-b.done:
			return
		case <-t.C:
		}
		b.markMu.Lock()
		if len(b.marks) == 0 {
			b.marking = false
			b.markMu.Unlock()
			return
		}
		marks := make([]string, 0, len(b.marks))
		chans := make([]string, 0, len(b.marks))
		for k, m := range b.marks {
			marks = append(marks, k)
			chans = append(chans, m.ch)
		}
		b.markMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), ttl/4)
		cmds, _ := b.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, k := range marks {
				p.Do(ctx, "SET", k, "1", "PX", px, "GET")
			}
			return nil
		})
		cancel()
		s := b.subscriber()
		if s == nil {
			return
		}
		for i, ch := range chans {
			if i >= len(cmds) || cmds[i].Err() != nil {
				// goredis.Nil: the mark was gone; any other error: it may
				// lapse before the next refresh.
				s.signal(ch)
			}
		}
	}
}
