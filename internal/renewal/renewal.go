// Package renewal states the renewal rule of durable's Store.Do and
// Store.RunWithLease once, for them and for code that renews on their
// behalf on its own schedule (the idempotency middleware validates its
// period with it).
//
// A claim or lease granted (or renewed) by a request sent at local time t
// is proven live until t + TTL − tolerance: the store counts the TTL from
// a moment after t, and a renewal or fence needs more than the tolerance
// left. The holder renews every RenewEvery (default TTL/3, so that two
// renewals can fail before the proof runs out); a period of TTL − tolerance
// or more could never renew in time, and is rejected. A renewal that fails
// for a reason other than ErrFenced is retried after a quarter of the
// period.
package renewal

import "time"

const (
	// DefaultDivisor: RenewEvery 0 means TTL/DefaultDivisor.
	DefaultDivisor = 3
	// RetryDivisor: a failed renewal is retried after
	// RenewEvery/RetryDivisor (plus 1 ms, never more than RenewEvery).
	RetryDivisor = 4
)

// Period returns the renewal period for a claim or lease of ttl when asked
// to renew every every (0 for the default, ttl/DefaultDivisor), on a
// backend with clock tolerance tol. It reports false when every is
// negative or not shorter than ttl minus tol.
func Period(ttl, every, tol time.Duration) (time.Duration, bool) {
	if every == 0 {
		every = ttl / DefaultDivisor
	}
	if every <= 0 || every >= ttl-tol {
		return 0, false
	}
	return every, true
}
