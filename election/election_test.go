package election_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/election"
	"github.com/durable-go/durable/internal/pgtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// noLeaks fails t if goroutines started after this call are still running
// when t ends (after every cleanup registered later, such as closing the
// store).
func noLeaks(t *testing.T) {
	t.Helper()
	base := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, base) })
}

// memStore opens a Store on a fresh memory storage and closes it when t
// ends.
func memStore(t *testing.T, opts memory.Options) *durable.Store {
	t.Helper()
	s, err := memory.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// cfg is a fast election: the shortest TTL the memory backend accepts,
// frequent renewals, short pauses while waiting.
func cfg(candidate string) election.Config {
	return election.Config{Scope: "elect", Name: "leader", Candidate: candidate, Value: "addr-of-" + candidate,
		TTL: time.Second, RenewEvery: 100 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
}

// cfgFor is cfg with the shortest TTL s accepts.
func cfgFor(s *durable.Store, candidate string) election.Config {
	c := cfg(candidate)
	c.TTL = s.MinTTL()
	return c
}

// fencedAppend appends entry to the ledger workflow with a fenced
// compare-and-set write.
func fencedAppend(ctx context.Context, s *durable.Store, fence *durable.Fence, entry string) error {
	w, err := s.GetWorkflow(ctx, "elect", "ledger")
	if err != nil {
		return err
	}
	_, err = s.UpdateWorkflow(ctx, durable.Update{Scope: "elect", ID: "ledger", ExpectStatus: durable.StatusRunning,
		ExpectRevision: w.Revision, Fence: fence, Status: durable.StatusRunning, Snapshot: append(w.Snapshot, entry+";"...)})
	return err
}

func createLedger(t *testing.T, s *durable.Store) {
	t.Helper()
	if _, err := s.CreateWorkflow(context.Background(), durable.Workflow{Scope: "elect", ID: "ledger", Status: durable.StatusRunning}); err != nil {
		t.Fatal(err)
	}
}

func waitDone(t *testing.T, term *election.Term, within time.Duration) {
	t.Helper()
	select {
	case <-term.Done():
	case <-time.After(within):
		t.Fatalf("term of %s not done within %v (err %v)", term.Lease().Owner, within, term.Err())
	}
}

// TestOneLeaderAtATime runs 5 candidates, each campaigning twice: when a
// term begins every other term's context has ended; each term's fenced
// writes succeed while it leads and are rejected after it resigned; the
// ledger holds each term's writes as one block, in token order.
func TestOneLeaderAtATime(t *testing.T) {
	noLeaks(t)
	s := memStore(t, memory.Options{})
	createLedger(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const candidates, rounds, writes = 5, 2, 3
	var (
		mu    sync.Mutex
		terms []*election.Term
		wg    sync.WaitGroup
	)
	for i := 1; i <= candidates; i++ {
		wg.Go(func() {
			name := fmt.Sprintf("c%d", i)
			for range rounds {
				term, err := election.Campaign(ctx, s, cfg(name))
				if err != nil {
					t.Errorf("%s: Campaign: %v", name, err)
					return
				}
				l := term.Lease()
				if l.Owner != name || l.Resource != "leader" || l.Scope != "elect" || l.Token <= 0 {
					t.Errorf("%s: term's lease %+v", name, l)
				}
				mu.Lock()
				for _, o := range terms {
					if o.Context().Err() == nil {
						t.Errorf("%s (token %d) won while %s (token %d) still led", name, l.Token, o.Lease().Owner, o.Lease().Token)
					}
				}
				terms = append(terms, term)
				mu.Unlock()
				for j := range writes {
					if err := fencedAppend(ctx, s, term.Fence(), fmt.Sprintf("%s/%d/%d", name, l.Token, j)); err != nil {
						t.Errorf("%s: fenced write %d while leading: %v", name, j, err)
					}
					time.Sleep(10 * time.Millisecond)
				}
				if err := term.Resign(ctx); err != nil {
					t.Errorf("%s: Resign: %v", name, err)
				}
				if err := term.Err(); err != election.ErrResigned {
					t.Errorf("%s: Err after Resign = %v", name, err)
				}
				if err := fencedAppend(ctx, s, term.Fence(), name+"/stale"); !errors.Is(err, durable.ErrFenced) {
					t.Errorf("%s: fenced write after resigning: %v, want ErrFenced", name, err)
				}
			}
		})
	}
	wg.Wait()

	w, err := s.GetWorkflow(ctx, "elect", "ledger")
	if err != nil {
		t.Fatal(err)
	}
	entries := strings.Split(strings.TrimSuffix(string(w.Snapshot), ";"), ";")
	if len(entries) != candidates*rounds*writes {
		t.Fatalf("%d entries, want %d: %s", len(entries), candidates*rounds*writes, w.Snapshot)
	}
	var lastToken int64
	for i := 0; i < len(entries); i += writes {
		var owner string
		var token int64
		var n int
		for j := range writes {
			var o string
			var tok int64
			var k int
			if _, err := fmt.Sscanf(strings.ReplaceAll(entries[i+j], "/", " "), "%s %d %d", &o, &tok, &k); err != nil {
				t.Fatalf("entry %q: %v", entries[i+j], err)
			}
			if j == 0 {
				owner, token, n = o, tok, k
			}
			if o != owner || tok != token || k != n+j {
				t.Fatalf("term %s/%d's writes are interleaved with another's: %s", owner, token, w.Snapshot)
			}
		}
		if token <= lastToken {
			t.Fatalf("token %d after %d: %s", token, lastToken, w.Snapshot)
		}
		lastToken = token
	}
}

// TestResignHandsOver: a candidate waiting behind the leader is granted the
// lease once the leader resigns, with a greater token.
func TestResignHandsOver(t *testing.T) {
	noLeaks(t)
	s := memStore(t, memory.Options{})
	createLedger(t, s)
	ctx := context.Background()
	a, err := election.Campaign(ctx, s, cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *election.Term, 1)
	go func() {
		b, err := election.Campaign(ctx, s, cfg("b"))
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	select {
	case <-got:
		t.Fatal("b won while a led")
	case <-time.After(300 * time.Millisecond):
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var b *election.Term
	select {
	case b = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("b did not win after a resigned")
	}
	if b == nil {
		t.FailNow()
	}
	if b.Lease().Token <= a.Lease().Token {
		t.Errorf("b's token %d, a's %d", b.Lease().Token, a.Lease().Token)
	}
	if a.Err() != election.ErrResigned || b.Err() != nil {
		t.Errorf("a.Err() = %v, b.Err() = %v", a.Err(), b.Err())
	}
	if err := fencedAppend(ctx, s, a.Fence(), "a-late"); !errors.Is(err, durable.ErrFenced) {
		t.Errorf("a's write after resigning: %v", err)
	}
	if err := fencedAppend(ctx, s, b.Fence(), "b"); err != nil {
		t.Errorf("b's write: %v", err)
	}
	l, err := s.GetLease(ctx, "elect", "leader")
	if err != nil || l.Owner != "b" || l.Token != b.Lease().Token || l.Value != "addr-of-b" {
		t.Errorf("stored lease %+v, %v", l, err)
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLease(ctx, "elect", "leader"); !errors.Is(err, durable.ErrNotFound) {
		t.Errorf("lease after the last resignation: %v", err)
	}
	// Resign again: nothing more to do.
	if err := b.Resign(ctx); err != nil {
		t.Errorf("second Resign: %v", err)
	}
}

// TestLostLeaseDeleted: an operator deletes the leader's lease and another
// candidate is granted it at once. The old leader's next renewal is
// rejected: its context ends with ErrLost, its fenced writes are rejected,
// and its Resign leaves the new leader's lease alone.
func TestLostLeaseDeleted(t *testing.T) {
	noLeaks(t)
	s := memStore(t, memory.Options{})
	createLedger(t, s)
	ctx := context.Background()
	a, err := election.Campaign(ctx, s, cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *election.Term, 1)
	go func() {
		b, err := election.Campaign(ctx, s, cfg("b"))
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	if ok, err := s.DeleteRecord(ctx, durable.KindLease, "elect", "leader"); !ok || err != nil {
		t.Fatalf("DeleteRecord: %v %v", ok, err)
	}
	select {
	case <-a.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a's context not cancelled after its lease was deleted")
	}
	if err := a.Err(); !errors.Is(err, election.ErrLost) || !errors.Is(err, durable.ErrFenced) {
		t.Errorf("a.Err() = %v, want ErrLost and ErrFenced", err)
	}
	waitDone(t, a, 5*time.Second)
	if err := fencedAppend(ctx, s, a.Fence(), "a-late"); !errors.Is(err, durable.ErrFenced) {
		t.Errorf("a's write after losing: %v", err)
	}
	b := <-got
	if b == nil {
		t.FailNow()
	}
	if err := a.Resign(ctx); err != nil {
		t.Errorf("a.Resign after the loss: %v", err)
	}
	if !errors.Is(a.Err(), election.ErrLost) {
		t.Errorf("Resign changed Err to %v", a.Err())
	}
	if l, err := s.GetLease(ctx, "elect", "leader"); err != nil || l.Owner != "b" || b.Context().Err() != nil {
		t.Errorf("b's lease after a resigned: %+v %v (b %v)", l, err, b.Err())
	}
	if err := fencedAppend(ctx, s, b.Fence(), "b"); err != nil {
		t.Errorf("b's write: %v", err)
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLostLeaseClockAdvance: the store's clock passes the lease's expiry
// (a leader paused past its TTL, as the store sees it): the next renewal is
// rejected and the term ends as lost.
func TestLostLeaseClockAdvance(t *testing.T) {
	noLeaks(t)
	clock := contract.NewManualClock(time.Now())
	s := memStore(t, memory.Options{Clock: clock})
	ctx := context.Background()
	a, err := election.Campaign(ctx, s, cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Context().Done():
		t.Fatal("term ended without cause")
	case <-time.After(300 * time.Millisecond): // renewed a few times
	}
	clock.Advance(2 * time.Second)
	select {
	case <-a.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a's context not cancelled after its lease expired")
	}
	if err := a.Err(); !errors.Is(err, election.ErrLost) || !errors.Is(err, durable.ErrFenced) {
		t.Errorf("a.Err() = %v", err)
	}
	waitDone(t, a, 5*time.Second)
	if err := a.Resign(ctx); err != nil {
		t.Error(err)
	}
}

// TestCampaignContextEndsWhileWaiting: Campaign returns ctx's error when
// ctx ends before the candidate wins, with nothing left running; the
// leader is unaffected.
func TestCampaignContextEndsWhileWaiting(t *testing.T) {
	s := memStore(t, memory.Options{})
	ctx := context.Background()
	a, err := election.Campaign(ctx, s, cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Resign(ctx)
	base := goleak.IgnoreCurrent()
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	b, err := election.Campaign(wctx, s, cfg("b"))
	if b != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign = %v, %v; want nil and DeadlineExceeded", b, err)
	}
	if err := goleak.Find(base); err != nil {
		t.Errorf("Campaign left goroutines behind: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if b, err := election.Campaign(cctx, s, cfg("b")); b != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Campaign on an ended context = %v, %v", b, err)
	}
	if a.Context().Err() != nil {
		t.Errorf("the leader's term ended: %v", a.Err())
	}
}

// TestTermEndsWithCampaignContext: once won, the term lasts as long as
// Campaign's context; when it ends the term ends with its cause and the
// lease is released.
func TestTermEndsWithCampaignContext(t *testing.T) {
	noLeaks(t)
	s := memStore(t, memory.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	a, err := election.Campaign(ctx, s, cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	waitDone(t, a, 5*time.Second)
	if err := a.Err(); err != context.Canceled {
		t.Errorf("a.Err() = %v, want context.Canceled", err)
	}
	if _, err := s.GetLease(context.Background(), "elect", "leader"); !errors.Is(err, durable.ErrNotFound) {
		t.Errorf("lease after the term's context ended: %v", err)
	}
	if err := a.Resign(context.Background()); err != nil {
		t.Error(err)
	}
	if a.Err() != context.Canceled {
		t.Errorf("Resign changed Err to %v", a.Err())
	}
}

// TestResignContextEnds: Resign on an ended context returns its error, and
// the term still ends.
func TestResignContextEnds(t *testing.T) {
	noLeaks(t)
	s := memStore(t, memory.Options{})
	a, err := election.Campaign(context.Background(), s, cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Resign(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Resign on an ended context: %v", err)
	}
	if a.Context().Err() == nil || a.Err() != election.ErrResigned {
		t.Errorf("term after Resign: %v", a.Err())
	}
	waitDone(t, a, 5*time.Second)
	if err := a.Resign(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestCampaignInvalid(t *testing.T) {
	s := memStore(t, memory.Options{})
	ctx := context.Background()
	for name, c := range map[string]election.Config{
		"name":      {Name: "bad name", Candidate: "a"},
		"permit":    {Name: "leader#1", Candidate: "a"},
		"candidate": {Name: "leader", Candidate: ""},
		"value":     {Name: "leader", Candidate: "a", Value: strings.Repeat("v", contract.MaxLeaseValueBytes+1)},
		"ttl":       {Name: "leader", Candidate: "a", TTL: time.Millisecond},
	} {
		if term, err := election.Campaign(ctx, s, c); term != nil || !errors.Is(err, durable.ErrInvalidArgument) {
			t.Errorf("%s: Campaign = %v, %v", name, term, err)
		}
	}
	if _, err := election.Campaign(ctx, nil, cfg("a")); err == nil {
		t.Error("nil store accepted")
	}
}

func errorsIsFenced(err error) bool { return errors.Is(err, durable.ErrFenced) }
