package contract_test

import (
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

func TestManualClock(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)
	c := contract.NewManualClock(start)
	var _ contract.Clock = c
	if !c.Now().Equal(start) {
		t.Fatalf("Now() = %v, want %v", c.Now(), start)
	}
	c.Advance(1500 * time.Millisecond)
	if got := c.Now().Sub(start); got != 1500*time.Millisecond {
		t.Fatalf("after Advance(1.5s) the clock moved %v", got)
	}
	later := start.Add(time.Hour)
	c.Set(later)
	if !c.Now().Equal(later) {
		t.Fatalf("after Set, Now() = %v, want %v", c.Now(), later)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Microsecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got := c.Now().Sub(later); got != 400*time.Microsecond {
		t.Fatalf("400 concurrent Advance(1µs) moved the clock %v", got)
	}
}

func TestSystemClock(t *testing.T) {
	before := time.Now()
	got := contract.SystemClock{}.Now()
	if got.Before(before) || got.After(time.Now()) {
		t.Fatalf("SystemClock.Now() = %v, not between the readings around it", got)
	}
}
