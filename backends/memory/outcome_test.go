package memory

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/durable-go/durable/contract"
)

func TestPackedOutcomeRoundTrip(t *testing.T) {
	for _, o := range []*contract.Outcome{
		{},
		{Code: 201, Body: []byte(`{"id":"pay_1"}`), Ref: "pay_1",
			Header: map[string][]string{"Content-Type": {"application/json"}, "Location": {"/payments/pay_1"}}},
		{Code: -1, Body: []byte{}, Header: map[string][]string{}},          // empty, not nil
		{Code: math.MaxInt64, Header: map[string][]string{"X-Empty": nil}}, // a name without values
		{Code: math.MinInt64, Header: map[string][]string{"Set-Cookie": {"a=1", "", "b=2"}, "X-Ü": {"wert ✓"}}},
		{Code: 200, Body: []byte(strings.Repeat("b", 70000)), Ref: strings.Repeat("r", 1024),
			Header: map[string][]string{"X-Big": {strings.Repeat("h", 300), strings.Repeat("i", 200)}}},
		{Body: []byte{0, 0x80, 0xff}}, // bytes that look like varint continuations
	} {
		p := packOutcome(o)
		if len(p) != packedLen(o) {
			t.Errorf("packedLen(%+v) = %d, packed %d bytes", o, packedLen(o), len(p))
		}
		got := p.unpack()
		if !reflect.DeepEqual(got, o) {
			t.Errorf("unpack(pack(%+v)) = %+v", o, got)
		}
		if (got.Header == nil) != (o.Header == nil) || (got.Body == nil) != (o.Body == nil) {
			t.Errorf("nil-ness changed: %+v -> %+v", o, got)
		}
	}
	if p := packOutcome(nil); p != "" || p.unpack() != nil {
		t.Errorf("nil outcome packs to %q", p)
	}
}

// Each unpack is a private copy: changing one (appending to a header's
// values included) changes neither the packed outcome nor another copy.
func TestPackedOutcomeCopiesArePrivate(t *testing.T) {
	o := &contract.Outcome{Code: 200, Body: []byte("body"),
		Header: map[string][]string{"A": {"1"}, "B": {"2", "3"}, "C": {"4"}}}
	p := packOutcome(o)
	a := p.unpack()
	a.Body[0] = 'X'
	a.Header["A"] = append(a.Header["A"], "appended")
	a.Header["B"][0] = "changed"
	delete(a.Header, "C")
	if b := p.unpack(); !reflect.DeepEqual(b, o) {
		t.Fatalf("a second unpack sees the first one's changes: %+v", b)
	}
	if !reflect.DeepEqual(a.Header["B"], []string{"changed", "3"}) {
		t.Fatalf("an append to one header's values wrote into another's: %v", a.Header)
	}
	// The packed copy does not share the caller's memory either.
	o.Body[0], o.Header["A"][0] = 'Y', "caller"
	if b := p.unpack(); string(b.Body) != "body" || b.Header["A"][0] != "1" {
		t.Fatalf("the packed outcome follows the caller's changes: %+v", b)
	}
}

func FuzzPackedOutcome(f *testing.F) {
	f.Add(201, "application/json", "/payments/1", []byte(`{}`), "ref", true, true)
	f.Add(-5, "", "", []byte(nil), "", false, false)
	f.Fuzz(func(t *testing.T, code int, v1, v2 string, body []byte, ref string, hasHeader, hasBody bool) {
		o := &contract.Outcome{Code: code, Ref: ref}
		if hasHeader {
			o.Header = map[string][]string{"V1": {v1}, "V2": {v1, v2}, "E": nil}
		}
		if hasBody {
			o.Body = append([]byte{}, body...)
		}
		p := packOutcome(o)
		if len(p) != packedLen(o) {
			t.Fatalf("packedLen(%+v) = %d, packed %d bytes", o, packedLen(o), len(p))
		}
		if got := p.unpack(); !reflect.DeepEqual(got, o) {
			t.Fatalf("unpack(pack(%+v)) = %+v", o, got)
		}
	})
}
