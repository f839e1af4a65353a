package durable

import "time"

// SetWaitFloor replaces the poll floor of s's WaitLease, WaitPermit and
// waiting RunWithLease/RunWithPermit with exactly d (no jitter, no
// doubling). Tests set it very long, so that only a wake-up can deliver a
// release.
func SetWaitFloor(s *Store, d time.Duration) {
	s.waits.mu.Lock()
	defer s.waits.mu.Unlock()
	s.waits.floor = &backoff{first: d, max: d}
}

// OnWaitEnqueue sets a hook called, under the queue's lock, as each waiter
// of s enters its queue: the resource, whether it waits for a permit, the
// request's owner and the waiter's position (0 = head).
func OnWaitEnqueue(s *Store, f func(resource string, permit bool, owner string, pos int)) {
	s.waits.mu.Lock()
	defer s.waits.mu.Unlock()
	s.waits.onEnqueue = func(sp waitSpec, pos int) { f(sp.key.resource, sp.kind == waitForPermit, sp.owner, pos) }
}

// WaitSlots reports how many (scope, resource) slots s holds (each with
// one shared watch at most).
func WaitSlots(s *Store) int {
	s.waits.mu.Lock()
	defer s.waits.mu.Unlock()
	return len(s.waits.slots)
}
