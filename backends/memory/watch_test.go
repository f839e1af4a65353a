package memory

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"go.uber.org/goleak"
)

// TestWatchIsDroppedWhenItsContextEnds: a watch leaves nothing behind once
// its context ends, neither a registration nor a goroutine, and later
// changes neither block nor close its channel.
func TestWatchIsDroppedWhenItsContextEnds(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := NewStorage(Options{})
	b, other := s.Backend(), s.Backend()
	ctx := context.Background()
	var chans []<-chan struct{}
	for _, r := range []string{"res", "res", "res#2", "other"} {
		wctx, cancel := context.WithCancel(ctx)
		ch, err := b.WatchLease(wctx, "", r)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
		cancel()
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.watchCount() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d watches still registered after their contexts ended", s.watchCount())
		}
		time.Sleep(time.Millisecond)
	}
	if len(s.watches) != 0 {
		t.Fatalf("the watch map keeps %d empty entries", len(s.watches))
	}
	for range 3 {
		l, err := other.AcquireLease(ctx, contract.LeaseRequest{Resource: "res", Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range chans {
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatal("a dropped watch's channel was closed")
			}
		default:
		}
	}
}

// TestWatchSignalsPermitsToTheirResource: a watch on "res" hears the
// permits "res#n", and one on a permit hears only its own.
func TestWatchSignalsPermitsToTheirResource(t *testing.T) {
	s := NewStorage(Options{})
	b := s.Backend()
	ctx := t.Context()
	base, _ := b.WatchLease(ctx, "", "res")
	two, _ := b.WatchLease(ctx, "", "res#2")
	unrelated, _ := b.WatchLease(ctx, "", "res2")
	l, err := b.AcquirePermit(ctx, contract.PermitRequest{Resource: "res", Owner: "o", TTL: time.Minute, Permits: 2, Value: "v"})
	if err != nil || l.Resource != "res#1" || l.Value != "v" {
		t.Fatalf("AcquirePermit = %+v, %v", l, err)
	}
	select {
	case <-base:
	default:
		t.Fatal("no signal on res for the grant of res#1")
	}
	for name, ch := range map[string]<-chan struct{}{"res#2": two, "res2": unrelated} {
		select {
		case <-ch:
			t.Errorf("a signal on %s for the grant of res#1", name)
		default:
		}
	}
}
