package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/contract"
)

// openShared opens n backends on one new database file, with one manual
// clock (returned) and a 1 s tolerance; they close with the test.
func openShared(t *testing.T, n int) ([]*sqlite.Backend, *contract.ManualClock, string) {
	t.Helper()
	clock := contract.NewManualClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "shared.db")
	var bs []*sqlite.Backend
	for range n {
		b, err := sqlite.NewBackend(t.Context(), sqlite.Options{Path: path, Clock: clock, Tolerance: time.Second, Synchronous: "normal"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		bs = append(bs, b)
	}
	return bs, clock, path
}

// leaseValues are values a lease must return byte for byte: NUL bytes,
// invalid UTF-8, every byte, the maximum size.
func leaseValues() []string {
	var all strings.Builder
	for c := range 256 {
		all.WriteByte(byte(c))
	}
	return []string{
		"",
		"10.0.0.7:8080",
		"\x00",
		"a\x00b\x00",
		"\xff\xfe\x80 not UTF-8 \xc3\x28",
		all.String(),
		strings.Repeat("\x00\xff", contract.MaxLeaseValueBytes/2),
	}
}

// TestLeaseValueRoundTrips: every read of a lease (Acquire, Get, List,
// Renew, RenewLeases, AcquirePermit, from this backend and another on the
// file) returns the value of its grant byte for byte; a renewal keeps the
// stored value whatever Value the Lease passed in carries; a takeover
// replaces it, also by an empty one.
func TestLeaseValueRoundTrips(t *testing.T) {
	ctx := t.Context()
	bs, clock, path := openShared(t, 2)
	a, other := bs[0], bs[1]
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	check := func(what string, l contract.Lease, want string) {
		t.Helper()
		if l.Value != want {
			t.Errorf("%s: Value %q, want %q", what, l.Value, want)
		}
	}
	for i, v := range leaseValues() {
		res := "r-" + string(rune('a'+i))
		l, err := a.AcquireLease(ctx, contract.LeaseRequest{Resource: res, Owner: "o", TTL: time.Minute, Value: v})
		if err != nil {
			t.Fatal(err)
		}
		check("AcquireLease", l, v)
		for _, b := range bs {
			g, err := b.GetLease(ctx, "", res)
			if err != nil {
				t.Fatal(err)
			}
			check("GetLease", g, v)
		}
		ls, err := other.ListLeases(ctx, contract.LeaseListQuery{After: res[:len(res)-1], Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, x := range ls {
			if x.Resource == res {
				found = true
				check("ListLeases", x, v)
			}
		}
		if !found {
			t.Fatalf("ListLeases lacks %s", res)
		}
		// The stored bytes themselves: a BLOB (NULL for the empty value).
		var typ string
		var stored []byte
		if err := db.QueryRowContext(ctx, `SELECT typeof(value), value FROM leases WHERE resource = ?`, res).Scan(&typ, &stored); err != nil {
			t.Fatal(err)
		}
		wantType := "blob"
		if v == "" {
			wantType = "null"
		}
		if typ != wantType || string(stored) != v {
			t.Errorf("stored %s %q, want %s %q", typ, stored, wantType, v)
		}
		// Renewal ignores the Value passed in.
		l.Value = "something else"
		r, err := a.RenewLease(ctx, l, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		check("RenewLease", r, v)
		r.Value = "\x00other"
		rs, err := other.RenewLeases(ctx, []contract.Lease{r, r}, 3*time.Minute)
		if err != nil || rs[0].Err != nil || rs[1].Err != nil {
			t.Fatalf("RenewLeases: %+v, %v", rs, err)
		}
		check("RenewLeases[0]", rs[0].Lease, v)
		check("RenewLeases[1]", rs[1].Lease, v)
		if g, _ := a.GetLease(ctx, "", res); g.Value != v {
			t.Errorf("GetLease after renewals: %q, want %q", g.Value, v)
		}
		p, err := other.AcquirePermit(ctx, contract.PermitRequest{Resource: res, Owner: "o", TTL: time.Minute, Value: v, Permits: 2})
		if err != nil {
			t.Fatal(err)
		}
		check("AcquirePermit", p, v)
		if g, _ := a.GetLease(ctx, "", p.Resource); g.Value != v {
			t.Errorf("GetLease of the permit: %q, want %q", g.Value, v)
		}
	}
	// A takeover stores the new grant's value, an empty one too.
	l, err := a.AcquireLease(ctx, contract.LeaseRequest{Resource: "t", Owner: "o1", TTL: 2 * time.Second, Value: "first\x00"})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"", "second\xff", ""} {
		clock.Advance(4 * time.Second)
		n, err := other.AcquireLease(ctx, contract.LeaseRequest{Resource: "t", Owner: "o2", TTL: 2 * time.Second, Value: v})
		if err != nil || n.Token <= l.Token {
			t.Fatalf("takeover: %+v, %v", n, err)
		}
		check("takeover", n, v)
		if g, _ := a.GetLease(ctx, "", "t"); g.Value != v {
			t.Errorf("GetLease after the takeover: %q, want %q", g.Value, v)
		}
		l = n
	}
	// A release and a new grant: the new value.
	if ok, err := a.ReleaseLease(ctx, l); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if n, err := a.AcquireLease(ctx, contract.LeaseRequest{Resource: "t", Owner: "o3", TTL: time.Minute, Value: "third"}); err != nil || n.Value != "third" {
		t.Fatalf("grant after release: %+v, %v", n, err)
	}
}
