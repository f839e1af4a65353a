package contract

import (
	"sync"
	"time"
)

// Clock tells a backend what time it is: the store clock, on which expiry
// is judged (see the implementer checklist). A backend takes one in its
// options so that tests can move time; nil there means [SystemClock]. A
// database backend passes Now as a statement parameter in place of the
// database's own clock, as in coalesce($1, now()).
type Clock interface {
	Now() time.Time
}

// SystemClock is the Clock of the machine: time.Now.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told: for tests, and for the
// conformance suite's harnesses, which give one to the backend and move it
// with Advance. It is safe for concurrent use. The zero value is not
// usable; create one with [NewManualClock].
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock stopped at start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (backward for a negative d).
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// ClockFunc adapts a function to a Clock, as http.HandlerFunc adapts one
// to a Handler.
type ClockFunc func() time.Time

// Now returns f().
func (f ClockFunc) Now() time.Time { return f() }
