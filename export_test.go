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

// WaitFallbacks reports how many times a waiter of s was woken by the
// fallback timer after s's own release, the watch's signal of it being
// late or lost.
func WaitFallbacks(s *Store) int {
	s.waits.mu.Lock()
	defer s.waits.mu.Unlock()
	return s.waits.fallbacks
}

// WaitWatchActive reports whether s's waiters on (scope, resource) have a
// registered backend watch.
func WaitWatchActive(s *Store, scope Scope, resource string) bool {
	s.waits.mu.Lock()
	defer s.waits.mu.Unlock()
	slot := s.waits.slots[slotKey{scope, resource}]
	return slot != nil && slot.state == watchActive
}
