package conformance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// Values on leases (LeaseRequest.Value, Lease.Value): any bytes up to
// contract.MaxLeaseValueBytes, stored by a grant and returned by every
// read byte for byte; a renewal keeps the stored value.
func leaseValueScenarios() []scenario {
	return []scenario{
		{"ValuesRoundTripByteForByte", 0, testLeaseValuesRoundTrip},
		{"RenewalKeepsTheStoredValue", 0, testRenewalKeepsTheStoredValue},
		{"NewGrantStoresItsOwnValue", needClock, testNewGrantStoresItsOwnValue},
		{"PermitsCarryTheirValues", 0, testPermitsCarryTheirValues},
		{"OversizeValueIsInvalidArgument", 0, testOversizeLeaseValue},
	}
}

// leaseValues are values that break naive storage, by name: empty, NUL
// bytes, invalid UTF-8, quoting, and exactly MaxLeaseValueBytes of binary
// data.
func leaseValues() map[string]string {
	full := string(binaryData("lease value"))
	full = (full + strings.Repeat("\x00", contract.MaxLeaseValueBytes))[:contract.MaxLeaseValueBytes]
	return map[string]string{
		"empty":        "",
		"nul":          "\x00",
		"nuls":         "a\x00b\x00\x00",
		"invalid-utf8": "\xff\xfe\xc3\x28\xed\xa0\x80 \xf8\x88\x80\x80\x80",
		"quoting":      `\x00 \\ '; DROP TABLE leases; -- " %s {}`,
		"text":         "http://10.0.0.7:8080/leader é 漢字",
		"trailing-nul": "value\x00",
		"full":         full,
	}
}

// checkListed lists the leases of the scope of s and compares each one
// named in want with it; it skips (returning false) when the backend has
// no RecordLister.
func checkListed(t *testing.T, e *env, s *durable.Store, what string, want map[string]contract.Lease) bool {
	t.Helper()
	got, err := s.ListLeases(e.ctx, contract.LeaseListQuery{Limit: 1000})
	if contract.CodeOf(err) == contract.Unimplemented {
		t.Logf("%s: ListLeases not checked: the backend has no contract.RecordLister", what)
		return false
	}
	noErr(t, err, what+": ListLeases")
	seen := map[string]bool{}
	for _, l := range got {
		w, ok := want[l.Resource]
		if !ok {
			continue
		}
		seen[l.Resource] = true
		if d := diffLease(l, w); d != "" {
			t.Errorf("%s: ListLeases: lease %s: %s", what, l.Resource, d)
		}
	}
	for r := range want {
		if !seen[r] {
			t.Errorf("%s: ListLeases did not list %s", what, r)
		}
	}
	return true
}

func testLeaseValuesRoundTrip(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	values := leaseValues()
	held := map[string]contract.Lease{}
	for name, v := range values {
		req := e.leaseReq("res-"+name, "owner-1")
		req.Value = v
		l := mustAcquire(t, e.ctx, s, req)
		if l.Value != v {
			t.Errorf("AcquireLease with the %s value returned a Value of %d bytes %s, want %d bytes %s", name, len(l.Value), shortValue(l.Value), len(v), shortValue(v))
		}
		checkStoredLease(t, e.ctx, other, contract.Lease{Resource: l.Resource, Owner: l.Owner, Token: l.Token, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt, Value: v})
		held[l.Resource] = l
	}
	checkListed(t, e, other, "after the grants", held)
	renewed := map[string]contract.Lease{}
	for res, l := range held {
		r, err := s.RenewLease(e.ctx, l, 2*e.ttl)
		noErr(t, err, "RenewLease of "+res)
		if r.Value != l.Value {
			t.Errorf("RenewLease of %s returned a Value of %d bytes %s, want %d bytes %s", res, len(r.Value), shortValue(r.Value), len(l.Value), shortValue(l.Value))
		}
		checkStoredLease(t, e.ctx, other, r)
		renewed[res] = r
	}
	checkListed(t, e, other, "after the renewals", renewed)
}

func testRenewalKeepsTheStoredValue(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	req := e.leaseReq("res-1", "owner-1")
	req.Value = "stored\x00value"
	l := mustAcquire(t, e.ctx, s, req)

	// A Lease passed back with another Value: the stored one stays.
	for i, v := range []string{"another value", "", strings.Repeat("x", contract.MaxLeaseValueBytes)} {
		in := l
		in.Value = v
		r, err := s.RenewLease(e.ctx, in, e.ttl+time.Duration(i)*time.Second)
		noErr(t, err, "RenewLease")
		if r.Value != req.Value {
			t.Errorf("RenewLease of a Lease carrying the Value %s returned %s, want the stored %s", shortValue(v), shortValue(r.Value), shortValue(req.Value))
		}
		l = r
		checkStoredLease(t, e.ctx, other, l)
	}
	// The batched renewal too (the LeaseRenewer, or the Store's fallback).
	in := l
	in.Value = "batch value"
	rs, err := s.RenewLeases(e.ctx, []contract.Lease{in}, e.ttl)
	noErr(t, err, "RenewLeases")
	if len(rs) != 1 || rs[0].Err != nil {
		t.Fatalf("RenewLeases = %+v, want one renewal", rs)
	}
	if rs[0].Lease.Value != req.Value {
		t.Errorf("RenewLeases of a Lease carrying another Value returned %s, want the stored %s", shortValue(rs[0].Lease.Value), shortValue(req.Value))
	}
	l = rs[0].Lease
	checkStoredLease(t, e.ctx, other, l)
	checkListed(t, e, other, "after the renewals", map[string]contract.Lease{l.Resource: l})

	// Releasing with another Value still releases: the Value is not
	// part of what identifies the grant.
	in = l
	in.Value = "release value"
	ok, err := s.ReleaseLease(e.ctx, in)
	noErr(t, err, "ReleaseLease")
	if !ok {
		t.Errorf("ReleaseLease of the holder's Lease carrying another Value = false, want true")
	}
	checkNoLease(t, e.ctx, other, "", "res-1")
}

func testNewGrantStoresItsOwnValue(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	req := e.leaseReq("res-1", "owner-1")
	req.Value = "first"
	l := mustAcquire(t, e.ctx, s, req)
	release(t, e, s, l)

	req.Value = "second"
	l = mustAcquire(t, e.ctx, other, req)
	if l.Value != "second" {
		t.Errorf("a grant after a release returned the Value %s, want %q", shortValue(l.Value), "second")
	}
	checkStoredLease(t, e.ctx, s, l)

	// A takeover stores its own value, the empty one included.
	for _, v := range []string{"third", ""} {
		e.advance(e.pastTakeover())
		req := e.leaseReq("res-1", "owner-"+v)
		if v == "" {
			req.Owner = "owner-empty"
		}
		req.Value = v
		next := mustAcquire(t, e.ctx, s, req)
		if next.Value != v {
			t.Errorf("a takeover of a lease with the Value %s returned %s, want %s", shortValue(l.Value), shortValue(next.Value), shortValue(v))
		}
		checkStoredLease(t, e.ctx, other, next)
		checkListed(t, e, other, fmt.Sprintf("after the takeover with %s", shortValue(v)), map[string]contract.Lease{next.Resource: next})
		l = next
	}
}

func testPermitsCarryTheirValues(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	values := []string{"holder one\x00", "", "\xff\xfe three"}
	held := map[string]contract.Lease{}
	for i, v := range values {
		req := e.permitReq("sem", fmt.Sprintf("owner-%d", i), 3)
		req.Value = v
		l := mustPermit(t, e, s, req)
		if l.Value != v {
			t.Errorf("AcquirePermit with the Value %s returned %s", shortValue(v), shortValue(l.Value))
		}
		checkStoredLease(t, e.ctx, other, l)
		held[l.Resource] = l
	}
	checkListed(t, e, other, "after the grants", held)
	for r, l := range held {
		in := l
		in.Value = "another"
		got, err := s.RenewLease(e.ctx, in, 2*e.ttl)
		noErr(t, err, "RenewLease of "+r)
		if got.Value != l.Value {
			t.Errorf("RenewLease of permit %s returned the Value %s, want the stored %s", r, shortValue(got.Value), shortValue(l.Value))
		}
		checkStoredLease(t, e.ctx, other, got)
		held[r] = got
	}
	checkListed(t, e, other, "after the renewals", held)
	// A permit granted again after a release stores its own value.
	release(t, e, s, held[contract.PermitResource("sem", 2)])
	req := e.permitReq("sem", "owner-9", 3)
	req.Value = "newcomer"
	l := mustPermit(t, e, other, req)
	if l.Resource != contract.PermitResource("sem", 2) || l.Value != "newcomer" {
		t.Errorf("AcquirePermit after the release of permit 2 = %s with the Value %s, want sem#2 with %q", l.Resource, shortValue(l.Value), "newcomer")
	}
	checkStoredLease(t, e.ctx, s, l)
}

func testOversizeLeaseValue(t *testing.T, e *env) {
	s := e.open()
	big := strings.Repeat("v", contract.MaxLeaseValueBytes+1)
	req := e.leaseReq("res-1", "owner-1")
	req.Value = big
	_, err := s.AcquireLease(e.ctx, req)
	if !checkCode(t, err, contract.InvalidArgument) {
		t.Logf("  (AcquireLease with a value of %d bytes)", len(big))
	}
	checkNoLease(t, e.ctx, s, "", "res-1")
	preq := e.permitReq("sem", "owner-1", 2)
	preq.Value = big
	_, err = s.AcquirePermit(e.ctx, preq)
	if !checkCode(t, err, contract.InvalidArgument) {
		t.Logf("  (AcquirePermit with a value of %d bytes)", len(big))
	}
	checkNoLease(t, e.ctx, s, "", contract.PermitResource("sem", 1))
	// At the limit it is accepted.
	req.Value = big[:contract.MaxLeaseValueBytes]
	l := mustAcquire(t, e.ctx, s, req)
	if l.Value != req.Value {
		t.Errorf("AcquireLease with a value of %d bytes returned %d bytes", len(req.Value), len(l.Value))
	}
}
