package election

import (
	"context"
	"errors"
	"time"

	"github.com/durable-go/durable"
)

// PollInterval is how often [Observe] reads the lease on a backend without
// the contract.LeaseWatcher capability (or while its watch cannot be set
// up), and how long it waits before reading again after a failed read.
const PollInterval = 500 * time.Millisecond

// WatchedPollInterval is how often [Observe] reads the lease even when the
// backend signals changes: it covers changes a backend's watch cannot see
// (another process's, where the backend documents that) and nothing else.
const WatchedPollInterval = 5 * time.Second

// Leader is who leads an election, as [Observe] reports it. The zero Leader
// (Owner "") means no leader: nobody holds the lease, or its holder stopped
// renewing it and it expired more than the clock tolerance ago.
type Leader struct {
	Owner      string    // the leader's Config.Candidate
	Token      int64     // the term's fencing token: greater for every later term
	Value      string    // the leader's Config.Value
	AcquiredAt time.Time // when the term began (store clock)
	ExpiresAt  time.Time // when the lease expired unless renewed, as of the read that found this leader (renewals move it later and are not reported)
}

// IsZero reports whether l means no leader.
func (l Leader) IsZero() bool { return l.Owner == "" }

// sameTerm reports whether a and b are the same term (or both no leader).
// A token is issued once per election, so it names the term.
func sameTerm(a, b Leader) bool { return a.Owner == b.Owner && a.Token == b.Token }

// Observe reports who leads the election on (scope, name): the channel
// receives the current leader (the zero Leader for none) first, then the
// new state after each change of term — a new leader, or the leader gone
// (resigned, lost, or expired) — each state once, in order; a renewal is
// not a change. The tokens of the leaders it delivers increase.
//
// Observe reports states it reads, not every event: a change and what
// follows it between two reads (a resignation and the next grant, say)
// arrive as the later state only, and a reader that falls behind receives
// at most one outdated state (the one already offered) and then the
// latest, not a backlog. With the
// contract.LeaseWatcher capability the lease is read again as soon as the
// backend signals a grant or a release, and at least every
// [WatchedPollInterval]; without it every [PollInterval], so a change may
// be reported that much late. An expiry signals nothing: a leader that
// stopped renewing is reported gone when the local clock passes its
// ExpiresAt plus the Store's clock tolerance — the earliest moment another
// candidate can take over, if the local clock agrees with the store's
// within the tolerance (a store on a contract.ManualClock does not, and
// expiry is then judged on the local clock all the same). By then the old
// leader's fenced writes are rejected.
//
// The channel is closed when ctx ends, or at the next read after the Store
// is closed (within the poll interval); other read errors are retried every PollInterval, the last state standing
// meanwhile. The error is for invalid input (scope, name) or a ctx that has
// already ended; nothing is started then.
func Observe(ctx context.Context, store *durable.Store, scope durable.Scope, name string) (<-chan Leader, error) {
	if store == nil {
		return nil, errors.New("election: store must not be nil")
	}
	if ctx == nil {
		return nil, errors.New("election: context must not be nil")
	}
	// The watch is set up before the first read, so that no change after
	// that read goes unsignalled.
	watch, err := store.WatchLease(ctx, scope, name)
	watchable := true
	switch {
	case err == nil:
	case errors.Is(err, durable.ErrUnimplemented):
		watchable = false
	case errors.Is(err, durable.ErrInvalidArgument), errors.Is(err, durable.ErrClosed), ctx.Err() != nil:
		return nil, err
	}
	out := make(chan Leader)
	o := &observer{store: store, scope: scope, name: name, tol: store.ClockTolerance(), watch: watch, watchable: watchable}
	go o.run(ctx, out)
	return out, nil
}

// observer is one Observe's state; only its goroutine touches it.
type observer struct {
	store     *durable.Store
	scope     durable.Scope
	name      string
	tol       time.Duration
	watch     <-chan struct{} // nil while there is no watch
	watchable bool            // the backend has the capability: retry setting up the watch
}

func (o *observer) run(ctx context.Context, out chan<- Leader) {
	defer close(out)
	var (
		last Leader
		sent bool
	)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		if o.watch == nil && o.watchable {
			// A watch that could not be set up (a lost connection, say)
			// is tried again at every read.
			o.watch, _ = o.store.WatchLease(ctx, o.scope, o.name)
		}
		cur, err := o.read(ctx)
		wait := PollInterval
		switch {
		case ctx.Err() != nil, errors.Is(err, durable.ErrClosed):
			return
		case err != nil:
			// Retry after PollInterval; the last state stands.
		default:
			if !sent || !sameTerm(cur, last) {
				select {
				case out <- cur:
				case <-ctx.Done():
					return
				}
				last, sent = cur, true
			}
			if o.watch != nil {
				wait = WatchedPollInterval
			}
			if !cur.IsZero() {
				// Read again just after the moment the lease, unless
				// renewed, can be taken over.
				wait = min(wait, max(time.Until(cur.ExpiresAt.Add(o.tol))+time.Millisecond, time.Millisecond))
			}
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-o.watch: // nil: never
		case <-t.C:
		}
	}
}

// read returns the current leader: the zero Leader when there is no lease
// or it expired more than the tolerance ago by the local clock.
func (o *observer) read(ctx context.Context) (Leader, error) {
	l, err := o.store.GetLease(ctx, o.scope, o.name)
	switch {
	case errors.Is(err, durable.ErrNotFound):
		return Leader{}, nil
	case err != nil:
		return Leader{}, err
	case time.Now().After(l.ExpiresAt.Add(o.tol)):
		return Leader{}, nil
	}
	return Leader{Owner: l.Owner, Token: l.Token, Value: l.Value, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt}, nil
}
