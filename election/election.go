// Package election elects one leader among candidates through a durable
// lease: [Campaign] blocks until the candidate holds the lease on a name,
// [Term] is its leadership (the lease, its fence, a context that ends with
// it), and [Observe] reports who leads, with each change.
//
// # What "leader" means
//
// A candidate leads while it holds the lease on (Scope, Name), a lease like
// any other: the Store's keep-alive renews it (see durable.Store.RunWithLease)
// and its fencing token is greater than every earlier leader's. A term's
// context ends as soon as its lease can no longer be proven valid, which is
// before another candidate can be granted the lease, so two terms'
// contexts do not overlap unless the tolerance rules are broken (clocks
// apart by more than the clock tolerance, see contract's implementer
// checklist) or a process stops (a GC pause, a frozen VM: the context is
// cancelled by a timer, which a stopped process runs late, after its code
// may already have resumed). What holds whatever the clocks and pauses do
// is fencing: a write that carries the term's fence (Term.Fence, in
// durable.Update.Fence, durable.StepOptions.Fence or a backend's FenceTx)
// is applied only while that lease is held, checked in the same atomic
// step, so a leader's fenced writes are rejected once it has lost, even if
// it has not noticed yet. Work that must not be done by two leaders at once
// goes through fenced writes; the context is for stopping early.
//
// A term ends when it is lost (a renewal rejected, or none succeeded within
// the TTL minus the clock tolerance: [ErrLost]), when the candidate
// resigns ([ErrResigned]) or when the context given to Campaign ends. It is
// never renewed past its end: campaign again to lead again (with a new
// token).
//
// # Observing
//
// Observe delivers the current leader (or none) and then every change. On a
// backend with the contract.LeaseWatcher capability a change is read as
// soon as the backend signals it; without it Observe reads the lease every
// [PollInterval], so it may report a change up to that late (plus a read).
// An expiry signals nothing: Observe reports a leader that stopped renewing
// as gone once the local clock passes its ExpiresAt plus the clock
// tolerance, when another candidate may take over.
package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/durable-go/durable"
)

// ErrResigned is [Term.Err] after [Term.Resign].
var ErrResigned = errors.New("election: resigned")

// ErrLost is matched (with errors.Is) by [Term.Err] when the lease was lost:
// a renewal was rejected (the lease expired, was deleted or taken over), or
// no renewal succeeded within the TTL minus the clock tolerance. The error
// also matches durable.ErrFenced and wraps the Store's reason.
var ErrLost = errors.New("election: leadership lost")

// Config says who campaigns for what.
type Config struct {
	// Scope is the tenant namespace of the lease ("" = unscoped).
	Scope durable.Scope
	// Name is what is led: the lease's resource, an identifier. Every
	// candidate and observer of one election uses the same Scope and Name.
	Name string
	// Candidate identifies the campaigner: the lease's owner, an
	// identifier, unique among the candidates (a process's instance id).
	// A candidate already leading Name waits like any other.
	Candidate string
	// Value is published with the leadership (a leader's address, say):
	// stored with the lease and returned to observers and by GetLease.
	// Any bytes, at most contract.MaxLeaseValueBytes (1024).
	Value string
	// TTL is the lease's TTL: 0 means the Store's default lease TTL (30 s);
	// any other must be at least Store.MinTTL(). After a leader dies
	// without resigning, the election stays without a leader until its
	// lease's ExpiresAt plus the clock tolerance (up to TTL plus the
	// tolerance), and then until a waiting candidate's next attempt.
	TTL time.Duration
	// RenewEvery is the renewal period, as durable.LeaseOptions.RenewEvery:
	// 0 means TTL/3.
	RenewEvery time.Duration
	// MaxBackoff caps the pause between attempts while another candidate
	// leads, as durable.LeaseOptions.MaxBackoff (0: the smaller of TTL/2
	// and 5 s); durable.LeaseOptions says what wakes a waiter earlier.
	MaxBackoff time.Duration
}

// Term is one leadership: from the grant of the lease to its loss or
// resignation. Its methods are safe for concurrent use.
type Term struct {
	store  *durable.Store
	lease  durable.Lease
	parent context.Context // Campaign's
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the lease is given up and nothing of the term runs

	mu       sync.Mutex // serializes Resign's release
	released bool
}

// Campaign blocks until c.Candidate leads c.Name, and returns its term. It
// acquires the lease on (c.Scope, c.Name) with c.Candidate as its owner and
// c.Value as its value, waiting while another candidate holds it (as
// durable.Store.RunWithLease with Wait does), and keeps it renewed in the
// background until the term ends.
//
// ctx bounds the whole campaign: while waiting, Campaign returns ctx's
// error when ctx ends (having stopped everything it started); once the
// term is won, ctx ending ends the term (the lease is released and
// [Term.Err] is ctx's cause). Other errors are the Store's: invalid input
// (ErrInvalidArgument), a closed Store, or a failure other than the
// retryable ones it waits through.
func Campaign(ctx context.Context, store *durable.Store, c Config) (*Term, error) {
	if store == nil {
		return nil, errors.New("election: store must not be nil")
	}
	if ctx == nil {
		return nil, errors.New("election: context must not be nil")
	}
	req := durable.LeaseRequest{Scope: c.Scope, Resource: c.Name, Owner: c.Candidate, TTL: c.TTL, Value: c.Value}
	opts := durable.LeaseOptions{Wait: true, RenewEvery: c.RenewEvery, MaxBackoff: c.MaxBackoff}
	won := make(chan *Term)
	finished := make(chan error, 1)
	var term *Term // set by fn before it is sent on won
	go func() {
		err := store.RunWithLease(ctx, req, opts, func(lctx context.Context, l durable.Lease) error {
			tctx, cancel := context.WithCancelCause(lctx)
			term = &Term{store: store, lease: l, parent: ctx, ctx: tctx, cancel: cancel, done: make(chan struct{})}
			select {
			case won <- term:
			case <-lctx.Done():
				// Ended before Campaign took the term (Campaign always
				// receives, so this is a race with ctx or a loss).
				cancel(nil)
				term = nil
				return nil
			}
			<-tctx.Done()
			return nil
		})
		if term != nil {
			// The term was handed out: RunWithLease has stopped the
			// renewals and released the lease (a release that fails is
			// logged by the Store; the lease then expires).
			close(term.done)
		}
		finished <- err
	}()
	select {
	case t := <-won:
		if err := ctx.Err(); err != nil {
			// Won and ended at once: the caller gets ctx's error, and
			// nothing is left running.
			<-t.done
			return nil, err
		}
		// The goroutine sends on finished once more, into its buffer.
		return t, nil
	case err := <-finished:
		if err == nil {
			// RunWithLease returned without the term reaching Campaign:
			// only when ctx (or the lease) ended during the hand-over.
			err = ctx.Err()
			if err == nil {
				err = fmt.Errorf("%w before the term began", ErrLost)
			}
		}
		return nil, err
	}
}

// Lease returns the lease as granted: owner, token, value, AcquiredAt and
// the first ExpiresAt (renewals move the stored ExpiresAt later; they do
// not change this copy).
func (t *Term) Lease() durable.Lease { return t.lease }

// Fence returns the term's fence, for fenced writes (durable.Update.Fence,
// durable.StepOptions.Fence, a backend's FenceTx): they are applied only
// while this term's lease is held.
func (t *Term) Fence() *durable.Fence { return t.lease.Fence() }

// Context returns a context, derived from Campaign's, that is cancelled as
// soon as the term ends: lost, resigned, or Campaign's context ended. Its
// cause is the reason; [Term.Err] says it in the package's terms.
func (t *Term) Context() context.Context { return t.ctx }

// Done returns a channel closed once the term has ended and been cleaned
// up: the renewals stopped and the lease released (or found lost). It
// closes after Context is cancelled, usually a round trip later.
func (t *Term) Done() <-chan struct{} { return t.done }

// Err returns nil while the term lasts and, once Context is cancelled, why
// it ended: [ErrResigned]; an error matching [ErrLost] and durable.ErrFenced
// when the lease was lost; or the cause of Campaign's context when that
// ended (context.Canceled or context.DeadlineExceeded unless it was
// cancelled with a cause). The first reason wins: a term lost and then
// resigned stays lost.
func (t *Term) Err() error {
	if t.ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(t.ctx)
	switch {
	case errors.Is(cause, ErrResigned):
		return ErrResigned
	case t.parent.Err() != nil && errors.Is(cause, context.Cause(t.parent)):
		return cause
	default:
		return fmt.Errorf("%w: %w", ErrLost, cause)
	}
}

// Resign ends the term and gives the lease up, so that the next candidate
// can be granted it without waiting for it to expire (how soon a waiting
// candidate notices: see durable.LeaseOptions.Wait). The term's context is cancelled first, before the
// lease is released, so the next term begins after this one's context has
// ended.
//
// Resign waits until the term is cleaned up (Done is closed) and returns
// nil once the lease is released or is no longer this term's (lost, or
// released because Campaign's context ended). It returns an error when ctx
// ends first (the cleanup then still finishes in the background, within
// the Store's bounds) or when the release failed (the lease then expires
// after its TTL); calling it again retries. It may be called at any time,
// more than once, and from several goroutines.
func (t *Term) Resign(ctx context.Context) error {
	t.cancel(ErrResigned) // no effect if the term has already ended
	select {
	case <-t.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.released || !errors.Is(t.Err(), ErrResigned) {
		return nil
	}
	// The term's goroutine has already released the lease on a detached
	// context, logging a failure; this call reports one. It answers false
	// when the lease is no longer this term's, which is also a success.
	if _, err := t.store.ReleaseLease(ctx, t.lease); err != nil {
		return err
	}
	t.released = true
	return nil
}
