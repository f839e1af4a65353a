package postgres

import (
	"reflect"
	"testing"
)

func TestHeaderEncodingRoundTripsBytes(t *testing.T) {
	for _, h := range []map[string][]string{
		nil,
		{},
		{"A": nil},
		{"A": {""}},
		{"Content-Type": {"text/plain"}, "Set-Cookie": {"a=1", "", "b=2"}},
		{"X-Odd": {"\xff\xfe obs-text \x80", "é 漢字", "\x00nul", `"q" \\ '`}},
	} {
		b := encodeHeader(h)
		got, err := decodeHeader(b)
		if err != nil {
			t.Fatalf("decode(encode(%q)): %v", h, err)
		}
		if h == nil {
			if got != nil || b != nil {
				t.Errorf("nil header encoded as %x, decoded as %#v", b, got)
			}
			continue
		}
		want := map[string][]string{}
		for k, vs := range h {
			if len(vs) == 0 {
				want[k] = nil
			} else {
				want[k] = vs
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decode(encode(%q)) = %q", h, got)
		}
	}
}

func TestHeaderDecodingRejectsCorruptData(t *testing.T) {
	good := encodeHeader(map[string][]string{"A": {"bc"}})
	for _, b := range [][]byte{
		{},
		{0x02, 0x00},
		good[:len(good)-1],
		append(append([]byte{}, good...), 0x00),
		{0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		{0x01, 0x01, 0x05, 'a'},
	} {
		if _, err := decodeHeader(b); err == nil {
			t.Errorf("decodeHeader(%x) succeeded, want an error", b)
		}
	}
}
