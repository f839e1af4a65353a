package etcd

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// TestLeaseValues stores values of every shape (empty, NUL bytes, invalid
// UTF-8, the largest allowed) and checks that every read returns them byte
// for byte — AcquireLease, GetLease, ListLeases, RenewLease, RenewLeases —
// that a renewal keeps the stored value whatever Value the Lease passed to
// it carries (none, another, a prefix or an extension of the stored one,
// with or without a stale AcquiredAt), and that a record without a value
// keeps the backend's first format, which older versions read.
func TestLeaseValues(t *testing.T) {
	c := startCluster(t, 1)
	ctx := t.Context()
	cli := c.client(t)
	be, err := NewBackend(cli, Options{Prefix: "values"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := durable.New(be)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := bytes.Repeat([]byte{0, 0xff, 'a', 0x80}, contract.MaxLeaseValueBytes/4)
	values := []string{
		"", "a", "\x00", "a\x00b", "\x00\x00\x00\x00\x00\x00\x00\x00\x00", "\xff\xfe\xfd", "\xc3\x28 invalid UTF-8",
		"\x01", "\x7f", "\x80\x01", "10.0.0.1:8080", string(big), strings.Repeat("\x00", contract.MaxLeaseValueBytes),
	}
	const ttl = 30 * time.Second
	for i, v := range values {
		res := "res-" + string(rune('a'+i))
		l, err := s.AcquireLease(ctx, contract.LeaseRequest{Resource: res, Owner: "o", TTL: ttl, Value: v})
		if err != nil {
			t.Fatalf("value %d: AcquireLease: %v", i, err)
		}
		check := func(what string, got contract.Lease) {
			t.Helper()
			if got.Value != v {
				t.Errorf("value %d: %s returned Value %s, want %s", i, what, short(got.Value), short(v))
			}
			if got.Token != l.Token || got.Owner != "o" || !got.AcquiredAt.Equal(l.AcquiredAt) {
				t.Errorf("value %d: %s = %+v, want the grant %+v", i, what, got, l)
			}
		}
		check("AcquireLease", l)
		g, err := s.GetLease(ctx, "", res)
		if err != nil {
			t.Fatalf("value %d: GetLease: %v", i, err)
		}
		check("GetLease", g)
		q := contract.LeaseListQuery{Limit: 1} // the leases before res were released
		if i > 0 {
			q.After = "res-" + string(rune('a'+i-1))
		}
		ls, err := s.ListLeases(ctx, q)
		if err != nil || len(ls) != 1 {
			t.Fatalf("value %d: ListLeases = %v, %v", i, ls, err)
		}
		check("ListLeases", ls[0])
		// Renewals passing the right value, none, another, a prefix and an
		// extension of it, and a stale AcquiredAt with another value.
		passes := []string{v, "", "other", v + "\x00", v + "x"}
		if len(v) > 0 {
			passes = append(passes, v[:len(v)-1])
		}
		for j, pv := range passes {
			in := l
			in.Value = pv
			if j == len(passes)-1 {
				in.AcquiredAt = in.AcquiredAt.Add(-time.Second)
			}
			r, err := s.RenewLease(ctx, in, ttl)
			if err != nil {
				t.Fatalf("value %d: RenewLease passing %s: %v", i, short(pv), err)
			}
			check("RenewLease", r)
			g, err := s.GetLease(ctx, "", res)
			if err != nil {
				t.Fatal(err)
			}
			check("GetLease after RenewLease", g)
		}
		in := l
		in.Value = "stale"
		rs, err := s.RenewLeases(ctx, []contract.Lease{in}, ttl)
		if err != nil || len(rs) != 1 || rs[0].Err != nil {
			t.Fatalf("value %d: RenewLeases = %+v, %v", i, rs, err)
		}
		check("RenewLeases", rs[0].Lease)
		// The stored record: the first format without a value.
		kv, err := cli.Get(ctx, be.key(nsLease, "", res))
		if err != nil || len(kv.Kvs) != 1 {
			t.Fatal(err)
		}
		if raw := kv.Kvs[0].Value; v == "" && len(raw) != len("o")+1+16 {
			t.Errorf("a record without a value is %d bytes, want the first format's %d", len(raw), len("o")+17)
		}
		if ok, err := s.ReleaseLease(ctx, in); err != nil || !ok {
			t.Fatalf("value %d: ReleaseLease = %v, %v", i, ok, err)
		}
	}

	// A record written by an older version (owner \0 acquiredAt expiresAt)
	// reads with no value.
	acq, exp := time.UnixMicro(1700000000000000).UTC(), time.UnixMicro(1700000030000000).UTC()
	old := append(append([]byte("o\x00"), putTime(nil, acq)...), putTime(nil, exp)...)
	if _, err := cli.Put(ctx, be.key(nsLease, "", "old"), string(old)); err != nil {
		t.Fatal(err)
	}
	g, err := s.GetLease(ctx, "", "old")
	if err != nil || g.Value != "" || g.Owner != "o" || !g.AcquiredAt.Equal(acq) || !g.ExpiresAt.Equal(exp) {
		t.Errorf("an older record reads as %+v, %v; want owner o, no value, its times", g, err)
	}
	// A value record whose length does not match is Corrupt.
	for _, bad := range []string{"\x05ab", "\x00", "\x80"} {
		rec := append(append(append([]byte("o\x00"), putTime(nil, acq)...), bad...), putTime(nil, exp)...)
		if _, err := cli.Put(ctx, be.key(nsLease, "", "bad"), string(rec)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetLease(ctx, "", "bad"); contract.CodeOf(err) != contract.Corrupt {
			t.Errorf("a record with value bytes %q reads as %v, want Corrupt", bad, err)
		}
	}
}

// short shows a value in a test's message: its length and its first bytes.
func short(v string) string {
	if len(v) <= 16 {
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("%q… (%d bytes)", v[:16], len(v))
}
