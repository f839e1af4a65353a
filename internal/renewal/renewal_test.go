package renewal

import (
	"testing"
	"time"
)

func TestPeriod(t *testing.T) {
	for _, c := range []struct {
		ttl, every, tol, want time.Duration
		ok                    bool
	}{
		{ttl: 3 * time.Second, want: time.Second, ok: true},                             // default: ttl/3
		{ttl: 3 * time.Second, every: 2 * time.Second, want: 2 * time.Second, ok: true}, // explicit
		{ttl: 3 * time.Second, every: 2 * time.Second, tol: time.Second, ok: false},     // not shorter than ttl - tol
		{ttl: 3 * time.Second, every: 1999 * time.Millisecond, tol: time.Second, want: 1999 * time.Millisecond, ok: true},
		{ttl: 3 * time.Second, every: -time.Second, ok: false},  // negative
		{ttl: 2 * time.Second, tol: 2 * time.Second, ok: false}, // default within the tolerance
		{ttl: 2, ok: false}, // ttl/3 rounds to 0
	} {
		got, ok := Period(c.ttl, c.every, c.tol)
		if got != c.want || ok != c.ok {
			t.Errorf("Period(%v, %v, %v) = %v, %v; want %v, %v", c.ttl, c.every, c.tol, got, ok, c.want, c.ok)
		}
	}
}
