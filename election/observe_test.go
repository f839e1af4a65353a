package election_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/election"
)

// hidden exposes a backend's core methods only, hiding every optional
// capability (contract.LeaseWatcher among them) but the clock tolerance;
// it counts GetLease calls.
type hidden struct {
	contract.Backend
	gets atomic.Int64
}

func (h *hidden) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	h.gets.Add(1)
	return h.Backend.GetLease(ctx, scope, resource)
}

func (h *hidden) ClockTolerance() time.Duration {
	return h.Backend.(contract.ToleranceReporter).ClockTolerance()
}

// watching is hidden plus the backend's LeaseWatcher.
type watching struct {
	*hidden
	w contract.LeaseWatcher
}

func (w watching) WatchLease(ctx context.Context, scope contract.Scope, resource string) (<-chan struct{}, error) {
	return w.w.WatchLease(ctx, scope, resource)
}

// observed receives the next state from ch within d.
func observed(t *testing.T, ch <-chan election.Leader, d time.Duration) election.Leader {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatal("Observe's channel closed")
		}
		return l
	case <-time.After(d):
		t.Fatalf("no change reported within %v", d)
	}
	panic("unreachable")
}

// quiet fails t if ch delivers anything within d.
func quiet(t *testing.T, ch <-chan election.Leader, d time.Duration) {
	t.Helper()
	select {
	case l := <-ch:
		t.Fatalf("unexpected report %+v", l)
	case <-time.After(d):
	}
}

// wantLeader fails t unless got is the leader of term l.
func wantLeader(t *testing.T, got election.Leader, l durable.Lease) {
	t.Helper()
	want := election.Leader{Owner: l.Owner, Token: l.Token, Value: l.Value, AcquiredAt: l.AcquiredAt}
	got.ExpiresAt = time.Time{}
	if !got.AcquiredAt.Equal(want.AcquiredAt) {
		t.Errorf("AcquiredAt %v, want %v", got.AcquiredAt, want.AcquiredAt)
	}
	got.AcquiredAt = want.AcquiredAt
	if got != want {
		t.Errorf("reported %+v, want %+v", got, want)
	}
}

// observeScenario checks what Observe reports on s through one election's
// life: nobody, a leader, its resignation, a leader renewing (no report),
// a leader whose campaign's context ends, a leader that crashed (stops
// renewing) and is reported gone only after its expiry plus the
// tolerance; then the channel closes with ctx.
//
// values says whether the backend stores lease values (every backend
// should; see contract.LeaseRequest.Value).
func observeScenario(t *testing.T, s *durable.Store) {
	t.Helper()
	bg := context.Background()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	ch, err := election.Observe(ctx, s, "elect", "leader")
	if err != nil {
		t.Fatal(err)
	}
	const within = 5 * time.Second
	if l := observed(t, ch, within); !l.IsZero() {
		t.Fatalf("first report %+v, want no leader", l)
	}

	a, err := election.Campaign(bg, s, cfgFor(s, "a"))
	if err != nil {
		t.Fatal(err)
	}
	wantLeader(t, observed(t, ch, within), a.Lease())
	if a.Lease().Value != "addr-of-a" {
		t.Errorf("a's value %q", a.Lease().Value)
	}
	if err := a.Resign(bg); err != nil {
		t.Fatal(err)
	}
	if l := observed(t, ch, within); !l.IsZero() {
		t.Fatalf("after a resigned: %+v, want no leader", l)
	}

	bctx, bcancel := context.WithCancel(bg)
	b, err := election.Campaign(bctx, s, cfgFor(s, "b"))
	if err != nil {
		t.Fatal(err)
	}
	wantLeader(t, observed(t, ch, within), b.Lease())
	// b renews every 100 ms, past its first ExpiresAt plus the tolerance:
	// not a change.
	quiet(t, ch, s.MinTTL()+s.ClockTolerance()+300*time.Millisecond)
	if b.Context().Err() != nil {
		t.Fatalf("b lost its term: %v", b.Err())
	}
	bcancel()
	if l := observed(t, ch, within); !l.IsZero() {
		t.Fatalf("after b's campaign ended: %+v, want no leader", l)
	}
	waitDone(t, b, within)

	// A leader that stops renewing: a plain grant nobody renews.
	c, err := s.AcquireLease(bg, durable.LeaseRequest{Scope: "elect", Resource: "leader", Owner: "c", Value: "addr-of-c", TTL: s.MinTTL()})
	if err != nil {
		t.Fatal(err)
	}
	wantLeader(t, observed(t, ch, within), c)
	if c.Value != "addr-of-c" {
		t.Errorf("c's value %q", c.Value)
	}
	if l := observed(t, ch, within); !l.IsZero() {
		t.Fatalf("after c expired: %+v, want no leader", l)
	}
	if now, gone := time.Now(), c.ExpiresAt.Add(s.ClockTolerance()); now.Before(gone) {
		t.Errorf("c reported gone at %v, before its expiry plus the tolerance (%v)", now, gone)
	}
	// The expired lease is still stored: it stays "no leader".
	quiet(t, ch, 2*election.PollInterval)

	cancel()
	select {
	case l, ok := <-ch:
		if ok {
			t.Fatalf("report %+v after ctx ended", l)
		}
	case <-time.After(within):
		t.Fatal("channel not closed after ctx ended")
	}
}

// TestObserve runs the scenario on the memory backend as it is (with its
// LeaseWatcher when it has one) and with a tolerance.
func TestObserve(t *testing.T) {
	noLeaks(t)
	observeScenario(t, memStore(t, memory.Options{Tolerance: 200 * time.Millisecond}))
}

// TestObservePolling runs the scenario on a backend without the
// LeaseWatcher capability: Observe polls.
func TestObservePolling(t *testing.T) {
	noLeaks(t)
	h := &hidden{Backend: memory.NewStorage(memory.Options{Tolerance: 200 * time.Millisecond}).Backend()}
	s, err := durable.New(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.WatchLease(context.Background(), "elect", "leader"); !errors.Is(err, durable.ErrUnimplemented) {
		t.Fatalf("the wrapper does not hide the watcher: %v", err)
	}
	observeScenario(t, s)
}

// TestObserveReadsOnSignals: with a watcher an idle observer does not
// poll, and a grant is reported at once; without one it reads every
// PollInterval.
func TestObserveReadsOnSignals(t *testing.T) {
	noLeaks(t)
	raw := memory.NewStorage(memory.Options{}).Backend()
	lw, ok := any(raw).(contract.LeaseWatcher)
	if !ok {
		t.Fatal("the memory backend has no LeaseWatcher")
	}
	h := &hidden{Backend: raw}
	s, err := durable.New(watching{hidden: h, w: lw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := election.Observe(ctx, s, "elect", "leader")
	if err != nil {
		t.Fatal(err)
	}
	observed(t, ch, 5*time.Second)
	quiet(t, ch, 4*election.PollInterval)
	if n := h.gets.Load(); n != 1 {
		t.Errorf("an idle observer with a watcher read the lease %d times in %v, want 1", n, 4*election.PollInterval)
	}
	l, err := s.AcquireLease(ctx, durable.LeaseRequest{Scope: "elect", Resource: "leader", Owner: "a", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Reported well before the next poll would have seen it.
	wantLeader(t, observed(t, ch, election.PollInterval/2), l)
}

// TestObservePollsWithoutWatcher: without a watcher an idle observer reads
// the lease every PollInterval.
func TestObservePollsWithoutWatcher(t *testing.T) {
	noLeaks(t)
	h := &hidden{Backend: memory.NewStorage(memory.Options{}).Backend()}
	s, err := durable.New(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := election.Observe(ctx, s, "elect", "leader")
	if err != nil {
		t.Fatal(err)
	}
	observed(t, ch, 5*time.Second)
	quiet(t, ch, 4*election.PollInterval+election.PollInterval/2)
	if n := h.gets.Load(); n < 3 {
		t.Errorf("an idle observer without a watcher read the lease %d times in 4.5 poll intervals", n)
	}
}

func TestObserveInvalid(t *testing.T) {
	s := memStore(t, memory.Options{})
	ctx := context.Background()
	if _, err := election.Observe(ctx, s, "elect", "bad name"); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Errorf("invalid name: %v", err)
	}
	if _, err := election.Observe(ctx, s, "bad scope!", "leader"); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Errorf("invalid scope: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := election.Observe(cctx, s, "elect", "leader"); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: %v", err)
	}
}

// TestObserveStoreClosed: the channel closes when the Store is closed.
func TestObserveStoreClosed(t *testing.T) {
	noLeaks(t)
	s, err := memory.Open(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := election.Observe(context.Background(), s, "elect", "leader")
	if err != nil {
		t.Fatal(err)
	}
	observed(t, ch, 5*time.Second)
	s.Close()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("report after Close")
		}
	case <-time.After(election.WatchedPollInterval + 5*time.Second):
		t.Fatal("channel not closed after the store was closed")
	}
}

// TestObserveSlowReader: a reader that stops reading while the leadership
// changes several times gets the state it was offered and then the latest,
// not every change.
func TestObserveSlowReader(t *testing.T) {
	noLeaks(t)
	s := memStore(t, memory.Options{})
	bg := context.Background()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	ch, err := election.Observe(ctx, s, "elect", "leader")
	if err != nil {
		t.Fatal(err)
	}
	if l := observed(t, ch, 5*time.Second); !l.IsZero() {
		t.Fatalf("first report %+v", l)
	}
	a, err := election.Campaign(bg, s, cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * election.PollInterval) // the observer offers a
	if err := a.Resign(bg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * election.PollInterval) // no leader: not offered while a is
	b, err := election.Campaign(bg, s, cfg("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Resign(bg)
	wantLeader(t, observed(t, ch, 5*time.Second), a.Lease())
	wantLeader(t, observed(t, ch, 5*time.Second), b.Lease())
	quiet(t, ch, 2*election.PollInterval)
}
