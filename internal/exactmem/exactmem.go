// Package exactmem is a test aid: the memory backend with a fake
// contract.TxCompleter, whose transactions stage the caller's effects and
// the completion until Commit, with faults to inject (CommitFault,
// BeginErr) and counters of the transactions that ended. The key rules
// (caller tokens, tombstones) are memory's own; the root and middleware
// tests and the conformance suite's broken variants run on it.
//
// ClaimKey and a Commit's completion and effects are serialized under one
// mutex of the Storage: a reclaim never runs between a transaction's
// completion and its effects.
package exactmem

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
)

// Storage is one memory Storage with the fake transactions' faults and
// counters, shared by its clients.
type Storage struct {
	Mem   *memory.Storage
	clock contract.Clock

	// CommitFault, when set, decides each Commit: whether the
	// transaction applies, and the error Commit returns.
	CommitFault func() (apply bool, err error)
	// BeginErr, when set, is returned by BeginTx.
	BeginErr error
	// Commits and Rollbacks count the transactions that ended.
	Commits, Rollbacks atomic.Int64

	mu sync.Mutex // ClaimKey against a Commit
}

// NewStorage returns fresh storage; opts are memory's.
func NewStorage(opts memory.Options) *Storage {
	c := opts.Clock
	if c == nil {
		c = contract.SystemClock{}
	}
	return &Storage{Mem: memory.NewStorage(opts), clock: c}
}

// Backend returns a new client.
func (s *Storage) Backend() *Backend { return &Backend{Backend: s.Mem.Backend(), s: s} }

// Backend is a memory client that also implements contract.TxCompleter.
type Backend struct {
	*memory.Backend
	s *Storage
}

var (
	_ contract.Backend     = (*Backend)(nil)
	_ contract.TxCompleter = (*Backend)(nil)
	_ contract.KeyWaiter   = (*Backend)(nil)
)

// ClaimKey implements contract.Backend: memory's, never between a
// Commit's completion and its effects.
func (b *Backend) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.Backend.ClaimKey(ctx, req)
}

// BeginTx implements contract.TxCompleter.
func (b *Backend) BeginTx(ctx context.Context) (contract.Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, &contract.Error{Code: contract.Canceled, Err: err}
	}
	if err := b.s.BeginErr; err != nil {
		return nil, err
	}
	return &Tx{b: b}, nil
}

// CompleteKeyTx implements contract.TxCompleter: it checks the token now
// and stages the completion until Commit. A retry on the key the token
// completed returns the stored record, as CompleteKey does.
func (b *Backend) CompleteKeyTx(ctx context.Context, tx any, c contract.Completion) (contract.KeyRecord, error) {
	t, ok := tx.(*Tx)
	if !ok || t.b.s != b.s {
		return contract.KeyRecord{}, &contract.Error{Code: contract.InvalidArgument, Msg: "not a transaction of this storage"}
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return contract.KeyRecord{}, &contract.Error{Code: contract.InvalidArgument, Msg: "transaction has ended"}
	}
	rec, err := b.Backend.GetKey(ctx, c.KeyRef)
	switch {
	case contract.CodeOf(err) == contract.NotFound:
		return contract.KeyRecord{}, &contract.Error{Code: contract.Fenced, Msg: "claim token does not hold the key"}
	case err != nil:
		return contract.KeyRecord{}, err
	case rec.State != contract.KeyClaimed:
		// Completed: memory answers a retry with the stored record and
		// any other token with Fenced, and changes nothing.
		return b.Backend.CompleteKey(ctx, c)
	}
	// The token check: a renewal to the lease the claim already has
	// (memory fences a token that does not hold the claim). On a system
	// clock the lease moves by the microseconds since now was read.
	now := s.clock.Now().UTC().Truncate(time.Microsecond)
	if _, err := b.Backend.RenewKey(ctx, c.KeyRef, c.Token, rec.LeaseUntil.Sub(now)); err != nil {
		return contract.KeyRecord{}, err
	}
	cc := c
	t.completion = &cc
	o := c.Outcome
	rec.State, rec.Outcome, rec.LeaseUntil = contract.KeyCompleted, &o, time.Time{}
	rec.CompletedAt, rec.ExpiresAt, rec.ForgetAt = now, now.Add(c.Retain), now.Add(max(c.Retain, c.Tombstone))
	return rec, nil
}

// Tx is a fake transaction. It is also its own Raw: Exec stages an effect
// that applies only if the transaction commits.
type Tx struct {
	b          *Backend
	mu         sync.Mutex
	done       bool
	effects    []func()
	completion *contract.Completion
}

// Raw returns t.
func (t *Tx) Raw() any { return t }

// Exec stages an effect, run by a Commit that applies.
func (t *Tx) Exec(effect func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.effects = append(t.effects, effect)
}

// Commit implements contract.Tx: memory's CompleteKey, then the effects.
func (t *Tx) Commit(ctx context.Context) error {
	s := t.b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return &contract.Error{Code: contract.InvalidArgument, Msg: "transaction has ended"}
	}
	t.done = true
	s.Commits.Add(1)
	apply, ferr := true, error(nil)
	if f := s.CommitFault; f != nil {
		apply, ferr = f()
	}
	if !apply {
		return ferr
	}
	if c := t.completion; c != nil {
		if _, err := t.b.Backend.CompleteKey(context.WithoutCancel(ctx), *c); err != nil {
			return err // the row lock a database holds makes this impossible there
		}
	}
	for _, e := range t.effects {
		e()
	}
	return ferr
}

// Rollback implements contract.Tx.
func (t *Tx) Rollback(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil
	}
	t.done = true
	t.b.s.Rollbacks.Add(1)
	return nil
}
