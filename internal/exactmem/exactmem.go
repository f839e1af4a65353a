// Package exactmem is a test aid: the memory backend with the contract of
// issue 27 done in a layer over it — caller-chosen claim tokens handed back
// to their caller, tombstones (two-tier retention, OutcomeExpired,
// CleanupResult.Outcomes) and a fake contract.TxCompleter whose
// transactions stage the caller's effects and the completion until Commit,
// with faults to inject. It is the reference the conformance suite's
// broken variants and the root and middleware tests run on while (and
// after) the memory backend learns these rules itself: the layer strips
// ClaimRequest.Token and Completion.Tombstone before calling memory, so it
// gives the same answers either way.
//
// It serializes every key operation of one Storage under one mutex (a
// reclaim never races a transaction's completion), and Bugs turns on the
// mistakes the conformance suite must catch.
package exactmem

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/claimrule"
)

// Bugs are the mistakes a broken variant makes.
type Bugs struct {
	TokenFold         bool // caller tokens compared case-insensitively
	HandBackReclaimed bool // a claim reclaimed by another caller is handed back to the old token
	HandBackCompleted bool // a completed key is handed back as held to the token that completed it
	ReplayAfterRetain bool // the outcome is still replayed (payload and all) after its retention
	ForgetAtExpires   bool // the tombstone is forgotten with the outcome (ForgetAt = ExpiresAt)
}

// Storage is one memory Storage with the layer's state, shared by its
// clients.
type Storage struct {
	Mem   *memory.Storage
	Bugs  Bugs
	clock contract.Clock

	// CommitFault, when set, decides each Commit: whether the
	// transaction applies, and the error Commit returns.
	CommitFault func() (apply bool, err error)
	// BeginErr, when set, is returned by BeginTx.
	BeginErr error
	// Commits and Rollbacks count the transactions that ended.
	Commits, Rollbacks atomic.Int64

	mu   sync.Mutex
	keys map[contract.KeyRef]*key
}

// key is what the layer knows of one key.
type key struct {
	real, vis   string   // the current claim's memory token and the caller's
	old         []string // earlier callers' tokens of reclaimed claims
	completedAt time.Time
	expiresAt   time.Time // CompletedAt + Retain
	forgetAt    time.Time // CompletedAt + max(Retain, Tombstone)
	dropped     bool      // Cleanup dropped the outcome
}

// NewStorage returns fresh storage; opts are memory's.
func NewStorage(opts memory.Options, bugs Bugs) *Storage {
	c := opts.Clock
	if c == nil {
		c = contract.SystemClock{}
	}
	return &Storage{Mem: memory.NewStorage(opts), Bugs: bugs, clock: c, keys: map[contract.KeyRef]*key{}}
}

// Backend returns a new client.
func (s *Storage) Backend() *Backend { return &Backend{Backend: s.Mem.Backend(), s: s} }

func (s *Storage) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

func (s *Storage) same(a, b string) bool {
	if s.Bugs.TokenFold {
		return strings.EqualFold(a, b)
	}
	return a == b
}

// Backend is a client: memory's, with the key operations of the layer.
type Backend struct {
	*memory.Backend
	s *Storage
}

var (
	_ contract.Backend     = (*Backend)(nil)
	_ contract.TxCompleter = (*Backend)(nil)
	_ contract.KeyWaiter   = (*Backend)(nil)
)

// Layer returns the layer's storage.
func (b *Backend) Layer() *Storage { return b.s }

// expired reports whether k's outcome's retention has ended.
func (s *Storage) expired(k *key, now time.Time) bool {
	return k != nil && !k.completedAt.IsZero() && !now.Before(k.expiresAt) && !s.Bugs.ReplayAfterRetain
}

// view is rec as the contract has it: ExpiresAt and ForgetAt of the
// layer, a tombstone past the retention. s.mu must be held.
func (s *Storage) view(rec contract.KeyRecord, now time.Time) contract.KeyRecord {
	if rec.State != contract.KeyCompleted {
		return rec
	}
	k := s.keys[rec.KeyRef]
	if k == nil || !rec.CompletedAt.Equal(k.completedAt) {
		rec.ForgetAt = rec.ExpiresAt
		return rec
	}
	rec.ExpiresAt, rec.ForgetAt = k.expiresAt, k.forgetAt
	if s.expired(k, now) {
		rec.State = contract.KeyExpired
		code := 0
		if rec.Outcome != nil {
			code = rec.Outcome.Code
		}
		rec.Outcome = &contract.Outcome{Code: code}
	}
	return rec
}

// real translates a caller token to memory's. s.mu must be held.
func (s *Storage) real(ref contract.KeyRef, tok string) string {
	if k := s.keys[ref]; k != nil && tok == k.vis {
		return k.real
	}
	return tok
}

// ClaimKey implements contract.Backend.
func (b *Backend) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	k := s.keys[req.KeyRef]
	rec, err := b.Backend.GetKey(ctx, req.KeyRef)
	found := err == nil
	if err != nil && contract.CodeOf(err) != contract.NotFound {
		return contract.Claim{}, err
	}
	match := found && claimrule.SameRequest(rec.Fingerprint, rec.WorkflowID, req.Fingerprint, req.WorkflowID)
	completedHere := found && rec.State == contract.KeyCompleted && k != nil && rec.CompletedAt.Equal(k.completedAt)
	switch {
	case completedHere && s.expired(k, now) && !match:
		return contract.Claim{}, &contract.Error{Code: contract.KeyConflict, Msg: "key is bound to another request"}
	case completedHere && s.expired(k, now):
		return contract.Claim{}, &contract.Error{Code: contract.OutcomeExpired, Msg: "the outcome's retention has ended; only its tombstone is left"}
	case completedHere && match && s.Bugs.HandBackCompleted && req.Token != "" && s.same(k.vis, req.Token):
		return contract.Claim{Kind: contract.ClaimNew, Token: req.Token, Record: s.view(rec, now)}, nil // the bug
	case found && rec.State == contract.KeyClaimed && match && k != nil && req.Token != "" &&
		(s.same(k.vis, req.Token) || s.Bugs.HandBackReclaimed && containsToken(k.old, req.Token)):
		// The caller's own claim, whose reply it lost: hand it back.
		r2, err := b.Backend.RenewKey(ctx, req.KeyRef, k.real, req.TTL)
		if err != nil {
			return contract.Claim{}, err
		}
		k.vis = req.Token
		return contract.Claim{Kind: contract.ClaimNew, Token: req.Token, Record: r2}, nil
	}
	mreq := req
	mreq.Token = ""
	c, err := b.Backend.ClaimKey(ctx, mreq)
	if err != nil {
		return c, err
	}
	if c.Kind.Owned() {
		vis := req.Token
		if vis == "" {
			vis = c.Token
		}
		nk := &key{real: c.Token, vis: vis}
		if k != nil && c.Kind == contract.ClaimReclaimed {
			nk.old = append(append([]string(nil), k.old...), k.vis)
		}
		s.keys[req.KeyRef] = nk
		c.Token = vis
		return c, nil
	}
	c.Record = s.view(c.Record, now)
	return c, nil
}

func containsToken(toks []string, t string) bool {
	for _, x := range toks {
		if x == t {
			return true
		}
	}
	return false
}

// CompleteKey implements contract.Backend.
func (b *Backend) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return b.completeLocked(ctx, c)
}

func (b *Backend) completeLocked(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	s := b.s
	now := s.now()
	forget := c.Retain
	if c.Tombstone > forget && !s.Bugs.ForgetAtExpires {
		forget = c.Tombstone
	}
	mc := c
	mc.Token, mc.Retain, mc.Tombstone = s.real(c.KeyRef, c.Token), forget, 0
	rec, err := b.Backend.CompleteKey(ctx, mc)
	if err != nil {
		return rec, err
	}
	k := s.keys[c.KeyRef]
	if k == nil {
		k = &key{real: mc.Token, vis: c.Token}
		s.keys[c.KeyRef] = k
	}
	if !rec.CompletedAt.Equal(k.completedAt) {
		// The first completion (a retry returns the stored record).
		k.completedAt, k.dropped = rec.CompletedAt, false
		k.expiresAt, k.forgetAt = rec.CompletedAt.Add(c.Retain), rec.ExpiresAt
	}
	return s.view(rec, now), nil
}

// RenewKey implements contract.Backend.
func (b *Backend) RenewKey(ctx context.Context, ref contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return b.Backend.RenewKey(ctx, ref, s.real(ref, token), ttl)
}

// ReleaseKey implements contract.Backend.
func (b *Backend) ReleaseKey(ctx context.Context, ref contract.KeyRef, token string) (bool, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return b.Backend.ReleaseKey(ctx, ref, s.real(ref, token))
}

// GetKey implements contract.Backend.
func (b *Backend) GetKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := b.Backend.GetKey(ctx, ref)
	if err != nil {
		return rec, err
	}
	return s.view(rec, s.now()), nil
}

// WaitKey implements contract.KeyWaiter.
func (b *Backend) WaitKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	rec, err := b.Backend.WaitKey(ctx, ref)
	if err != nil {
		return rec, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view(rec, s.now()), nil
}

// ListKeys implements contract.RecordLister.
func (b *Backend) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	recs, err := b.Backend.ListKeys(ctx, q)
	if err != nil {
		return recs, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := recs[:0]
	for _, r := range recs {
		r = s.view(r, now)
		if q.State == "" || r.State == q.State {
			out = append(out, r)
		}
	}
	return out, nil
}

// Cleanup implements contract.Backend: memory deletes what is past ForgetAt
// (and abandoned claims); the layer counts the outcomes dropped.
func (b *Backend) Cleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	return b.cleanup(ctx, req, true)
}

// CountCleanup implements contract.CleanupCounter.
func (b *Backend) CountCleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	return b.cleanup(ctx, req, false)
}

func (b *Backend) cleanup(ctx context.Context, req contract.CleanupRequest, del bool) (contract.CleanupResult, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var res contract.CleanupResult
	var err error
	if del {
		res, err = b.Backend.Cleanup(ctx, req)
	} else {
		res, err = b.Backend.CountCleanup(ctx, req)
	}
	if err != nil {
		return res, err
	}
	res.Outcomes = 0
	now := s.now()
	for ref, k := range s.keys {
		if k.completedAt.IsZero() || k.dropped || !s.expired(k, now) || !now.Before(k.forgetAt) {
			continue
		}
		if rec, err := b.Backend.GetKey(ctx, ref); err != nil || !rec.CompletedAt.Equal(k.completedAt) {
			continue
		}
		if res.Outcomes == req.Limit {
			res.More = true
			break
		}
		res.Outcomes++
		if del {
			k.dropped = true
		}
	}
	return res, nil
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
// and stages the completion until Commit.
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
	now := s.now()
	rec, err := b.Backend.GetKey(ctx, c.KeyRef)
	k := s.keys[c.KeyRef]
	tok := s.real(c.KeyRef, c.Token)
	switch {
	case err != nil && contract.CodeOf(err) != contract.NotFound:
		return contract.KeyRecord{}, err
	case err == nil && rec.State == contract.KeyCompleted && k != nil && k.real == tok:
		return s.view(rec, now), nil // a retry: the stored record
	case err != nil || rec.State != contract.KeyClaimed || k == nil || k.real != tok:
		return contract.KeyRecord{}, &contract.Error{Code: contract.Fenced, Msg: "claim token does not hold the key"}
	}
	cc := c
	t.completion = &cc
	forget := max(c.Retain, c.Tombstone)
	out := rec
	o := c.Outcome
	out.State, out.Outcome, out.LeaseUntil = contract.KeyCompleted, &o, time.Time{}
	out.CompletedAt, out.ExpiresAt, out.ForgetAt = now, now.Add(c.Retain), now.Add(forget)
	return out, nil
}

// Tx is a transaction of the layer. It is also its own Raw: Exec stages
// an effect that applies only if the transaction commits.
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

// Commit implements contract.Tx.
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
		if _, err := t.b.completeLocked(context.WithoutCancel(ctx), *c); err != nil {
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
