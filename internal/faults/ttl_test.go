package faults

import (
	"context"
	"fmt"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// checkTTLTolerance: "A lease or claim TTL must exceed the backend's clock
// tolerance by a documented margin; shorter TTLs are ErrInvalidArgument,
// never granted dead on arrival." A TTL equal to the tolerance must be
// refused. (Run once per client library, without faults.)
func checkTTLTolerance(driver string, s *durable.Store) []violation {
	tol := s.ClockTolerance()
	ttl := max(tol, durable.TTLMargin)
	if ttl > tol {
		return nil // the tolerance is below the smallest TTL: nothing to check
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []violation
	bad := func(msg string) {
		out = append(out, violation{driver: driver, scenario: "ttl-probe", kind: "ttl-tolerance", msg: msg})
	}
	res := fmt.Sprintf("ttl-probe-%d", time.Now().UnixNano())
	l, err := s.AcquireLease(ctx, durable.LeaseRequest{Scope: scope, Resource: res, Owner: "probe", TTL: ttl})
	switch {
	case err == nil:
		_, rerr := s.RenewLease(ctx, l, time.Minute)
		bad(fmt.Sprintf("AcquireLease with TTL %v = the clock tolerance %v was granted (token %d) instead of ErrInvalidArgument; an immediate RenewLease returned %v", ttl, tol, l.Token, errText(rerr)))
	case durable.CodeOf(err) != contract.InvalidArgument:
		bad(fmt.Sprintf("AcquireLease with TTL %v = the clock tolerance: want ErrInvalidArgument, got %v", ttl, err))
	}
	c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Scope: scope, Key: res}, Fingerprint: "probe", TTL: ttl})
	switch {
	case err == nil:
		bad(fmt.Sprintf("ClaimKey with TTL %v = the clock tolerance %v was granted (%s) instead of ErrInvalidArgument", ttl, tol, c.Kind))
	case durable.CodeOf(err) != contract.InvalidArgument:
		bad(fmt.Sprintf("ClaimKey with TTL %v = the clock tolerance: want ErrInvalidArgument, got %v", ttl, err))
	}
	return out
}

func errText(err error) string {
	if err == nil {
		return "success"
	}
	return err.Error()
}
