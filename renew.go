package durable

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
)

// LeaseRenewal is the outcome of one lease of [Store.RenewLeases]: the
// renewed lease when Err is nil, otherwise why that lease was not renewed.
type LeaseRenewal = contract.LeaseRenewal

// MaxRenewBatch is the largest batch [Store.RenewLeases] accepts.
const MaxRenewBatch = contract.MaxRenewBatch

// RenewLeases renews many leases at once, for a worker that holds many:
// each is extended to now+ttl, keeping its token, exactly as RenewLease
// would, and gets its own outcome, in the order given. An outcome's Err is
// nil (renewed: its Lease is the renewed lease) or an ErrFenced for a
// lease that expired, was released or was taken over; the others are
// renewed all the same. A lease given twice gets the same outcome twice.
//
// The returned error is for the batch as a whole: invalid input (more than
// MaxRenewBatch leases, or any lease or the ttl RenewLease would reject:
// nothing reaches the backend), a closed Store, or a failure of the whole
// call (ErrUnavailable, ErrOutcomeUnknown, a context error), after which
// nothing about the batch may be assumed; a retry is safe. An empty batch
// returns an empty result and calls nothing. A zero ttl means the default
// lease TTL.
//
// A backend with the contract.LeaseRenewer capability renews the batch in
// one step (one statement on Postgres). On other backends, or when the
// capability declines with ErrUnimplemented, RenewLeases calls RenewLease
// once per lease (eight at a time); an outcome's Err may then also be that
// call's own error (ErrUnavailable …), unless ctx ended, which ends the
// batch with ctx's error.
func (s *Store) RenewLeases(ctx context.Context, leases []Lease, ttl time.Duration) ([]LeaseRenewal, error) {
	const op = "RenewLeases"
	v := validator{op: op}
	if ttl == 0 {
		ttl = s.cfg.leaseTTL
	}
	if len(leases) > MaxRenewBatch {
		v.fail("a batch must hold at most " + strconv.Itoa(MaxRenewBatch) + " leases")
	}
	for i, l := range leases {
		lv := validator{op: op}
		if lv.lease(l); lv.err != nil {
			v.fail("lease " + strconv.Itoa(i) + ": " + lv.err.Msg)
			break
		}
	}
	v.ttl(ttl, s.MinTTL())
	if err := s.begin(ctx, &v); err != nil {
		return nil, err
	}
	if len(leases) == 0 {
		return []LeaseRenewal{}, nil
	}
	if r, ok := s.b.(contract.LeaseRenewer); ok {
		out, err := bounded(s, ctx, op, func(ctx context.Context) ([]LeaseRenewal, error) {
			return r.RenewLeases(ctx, leases, ttl)
		})
		if CodeOf(err) != contract.Unimplemented {
			if err != nil {
				return nil, err
			}
			if out, err = checkRenewals(op, leases, out); err != nil {
				return nil, err
			}
			// The lease counter counts each lease's outcome, as one
			// RenewLease per lease would.
			o := s.obs()
			for _, r := range out {
				if r.Err == nil {
					o.lease(ctx, "renewed")
				} else {
					o.lease(ctx, "fenced")
				}
			}
			return out, nil
		}
	}
	return s.renewEach(ctx, op, leases, ttl)
}

// checkRenewals checks a backend's answer to RenewLeases: one outcome per
// lease, each renewed lease the one asked for, each error wrapped once.
func checkRenewals(op string, leases []Lease, out []LeaseRenewal) ([]LeaseRenewal, error) {
	if len(out) != len(leases) {
		return nil, &contract.Error{Code: contract.Unknown, Op: op,
			Msg: "backend returned " + strconv.Itoa(len(out)) + " outcomes for " + strconv.Itoa(len(leases)) + " leases"}
	}
	for i := range out {
		o, l := &out[i], leases[i]
		switch {
		case o.Err != nil:
			o.Err = wrapErr(op, o.Err)
			o.Lease = Lease{}
		case o.Lease.Scope != l.Scope || o.Lease.Resource != l.Resource || o.Lease.Owner != l.Owner || o.Lease.Token != l.Token:
			return nil, &contract.Error{Code: contract.Unknown, Op: op,
				Msg: "backend returned another lease at position " + strconv.Itoa(i)}
		}
	}
	return out, nil
}

// fallbackParallel is how many RenewLease calls RenewLeases's fallback
// runs at a time, so that a large batch on a backend without the
// capability takes a fraction of its leases' round trips one after the
// other (RunWithLease's keep-alive measures validity from the start of the
// batch).
const fallbackParallel = 8

// renewEach is RenewLeases on a backend without the capability: one
// RenewLease per lease, fallbackParallel at a time. When ctx ends before
// every lease has its outcome, the batch ends with ctx's error.
func (s *Store) renewEach(ctx context.Context, op string, leases []Lease, ttl time.Duration) ([]LeaseRenewal, error) {
	out := make([]LeaseRenewal, len(leases))
	ran := make([]bool, len(leases))
	sem := make(chan struct{}, fallbackParallel)
	var wg sync.WaitGroup
	for i, l := range leases {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			nl, err := s.RenewLease(ctx, l, ttl)
			out[i] = LeaseRenewal{Lease: nl, Err: err}
			ran[i] = err == nil || errors.Is(err, ErrFenced) || ctx.Err() == nil
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil && slices.Contains(ran, false) {
		return nil, &contract.Error{Code: contract.Canceled, Op: op, Err: err}
	}
	return out, nil
}

// --- RunWithLease's shared keep-alive ---

// leaseRenewals keeps alive every lease that RunWithLease holds through one
// Store, with one timer and, per round, one RenewLeases call per lease TTL
// (a worker running 1,000 leases renews them with one statement instead of
// 1,000). Each lease keeps the renewal rule of keeper.go: it is due every
// RenewEvery after its last success (a quarter of that after a failure),
// and its keeper's deadline ends fn's context when no renewal has succeeded
// by TTL − tolerance after the last successful one was sent. A round
// renews every lease that is due, and also those due within half their
// period, early: renewing early is always safe, and it aligns the leases
// of one worker on one schedule, so that later rounds carry them all.
//
// Lock order: leaseRenewals.mu before keeper.mu.
type leaseRenewals struct {
	mu    sync.Mutex
	held  map[*heldLease]struct{}
	timer *time.Timer // fires the next round; nil until the first lease
	busy  bool        // a round is running; it re-arms the timer when done
}

// heldLease is one lease RunWithLease keeps alive.
type heldLease struct {
	k     *keeper
	lease Lease
	due   time.Time // local time of its next renewal; guarded by leaseRenewals.mu
}

// live reports whether h still wants renewals. r.mu must be held.
func (h *heldLease) live() bool {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	return !h.k.stopped && h.k.lost == nil
}

// keepLease starts keeping l alive with k's rules (k.key and k.token are
// not used). The lease was requested at local time sent.
func (s *Store) keepLease(k *keeper, l Lease, sent time.Time) *heldLease {
	h := &heldLease{k: k, lease: l, due: time.Now().Add(k.every)}
	k.mu.Lock()
	k.deadline = time.AfterFunc(k.validity(sent), func() {
		k.fail("no successful renewal before expiry", nil)
	})
	k.mu.Unlock()
	r := &s.renewals
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held == nil {
		r.held = map[*heldLease]struct{}{}
	}
	r.held[h] = struct{}{}
	s.armLocked()
	return h
}

// unkeep stops keeping h alive, waits for a round renewing it, and reports
// the loss error if the lease was lost. Call it once.
func (s *Store) unkeep(h *heldLease) error {
	r := &s.renewals
	r.mu.Lock()
	delete(r.held, h)
	h.k.mu.Lock()
	h.k.stopped = true
	h.k.mu.Unlock()
	if len(r.held) == 0 && r.timer != nil && !r.busy {
		r.timer.Stop()
	}
	r.mu.Unlock()
	h.k.inflight.Wait()
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	h.k.deadline.Stop()
	return h.k.lost
}

// armLocked sets the timer for the next round: when the first live lease
// is due. A running round re-arms it when it ends. r.mu must be held.
func (s *Store) armLocked() {
	r := &s.renewals
	if r.busy {
		return
	}
	var first time.Time
	for h := range r.held {
		if h.live() && (first.IsZero() || h.due.Before(first)) {
			first = h.due
		}
	}
	if first.IsZero() {
		if r.timer != nil {
			r.timer.Stop()
		}
		return
	}
	d := max(time.Until(first), 0)
	if r.timer == nil {
		r.timer = time.AfterFunc(d, s.renewRound)
	} else {
		r.timer.Reset(d)
	}
}

// renewRound renews the leases that are due (and those due within half
// their period), one RenewLeases call per TTL, each call at most
// MaxRenewBatch leases (the most urgent first; the rest go in the next
// round, at once).
func (s *Store) renewRound() {
	r := &s.renewals
	r.mu.Lock()
	if r.busy {
		r.mu.Unlock()
		return
	}
	now := time.Now()
	var due []*heldLease
	for h := range r.held {
		if h.live() && !h.due.After(now.Add(h.k.every/2)) {
			due = append(due, h)
		}
	}
	slices.SortFunc(due, func(a, b *heldLease) int { return a.due.Compare(b.due) })
	var batches [][]*heldLease
	byTTL := map[time.Duration]int{} // TTL → index of its open batch
	for _, h := range due {
		i, ok := byTTL[h.k.ttl]
		if !ok || len(batches[i]) == MaxRenewBatch {
			i = len(batches)
			byTTL[h.k.ttl] = i
			batches = append(batches, nil)
		}
		batches[i] = append(batches[i], h)
		h.k.inflight.Add(1)
	}
	if len(batches) == 0 {
		s.armLocked()
		r.mu.Unlock()
		return
	}
	r.busy = true
	r.mu.Unlock()

	results := make([]roundResult, len(batches))
	var wg sync.WaitGroup
	for i, b := range batches {
		wg.Go(func() { results[i] = s.renewBatch(b) })
	}
	wg.Wait()

	r.mu.Lock()
	defer r.mu.Unlock()
	done := time.Now()
	failed := 0
	var lastErr error
	for i, b := range batches {
		res := results[i]
		for j, h := range b {
			err := res.err
			if err == nil {
				err = res.out[j].Err
			}
			k := h.k
			switch {
			case err == nil:
				k.mu.Lock()
				if k.lost == nil {
					k.deadline.Reset(k.validity(res.sent))
				}
				k.mu.Unlock()
				h.due = done.Add(k.every)
			case res.err == nil && errors.Is(err, ErrFenced):
				k.fail("renewal rejected", err)
			default:
				// Unavailable, outcome unknown, timeout: try again soon;
				// the deadline timer ends fn's context if this never
				// succeeds.
				failed++
				lastErr = err
				h.due = done.Add(min(k.every/renewRetryDivisor+time.Millisecond, k.every))
			}
			k.inflight.Done()
		}
	}
	if failed > 0 {
		s.cfg.logger.Warn("durable: renewal failed; retrying", "op", "RunWithLease", "what", "lease", "leases", failed, "err", lastErr)
	}
	r.busy = false
	s.armLocked()
}

// roundResult is the answer to one RenewLeases call of a round.
type roundResult struct {
	sent time.Time // when the request left
	out  []LeaseRenewal
	err  error
}

// renewBatch renews b (leases of one TTL) with one RenewLeases call,
// bounded by the longest proven validity among them: no renewal is useful
// after that.
func (s *Store) renewBatch(b []*heldLease) roundResult {
	leases := make([]Lease, len(b))
	for i, h := range b {
		leases[i] = h.lease
	}
	sent := time.Now()
	valid := time.Duration(0)
	for _, h := range b {
		valid = max(valid, h.k.validity(sent))
	}
	ctx, cancel := detach(context.Background(), max(valid, time.Millisecond))
	defer cancel()
	out, err := s.RenewLeases(ctx, leases, b[0].k.ttl)
	return roundResult{sent: sent, out: out, err: err}
}
