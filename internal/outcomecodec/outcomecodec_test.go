package outcomecodec

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

var headers = []map[string][]string{
	nil,
	{},
	{"A": nil},
	{"A": {}},
	{"A": {""}},
	{"Content-Type": {"text/plain"}, "Set-Cookie": {"a=1", "", "b=2", "a=1"}},
	{"X-Odd": {"\xff\xfe obs-text \x80", "é 漢字", "\x00nul", `"q" \\ '`}, "x-odd": {"case kept"}},
}

// readBack is h as the contract's rule says it reads back: a nil list for
// every name with an empty one.
func readBack(h map[string][]string) map[string][]string {
	if h == nil {
		return nil
	}
	want := map[string][]string{}
	for k, vs := range h {
		if len(vs) == 0 {
			want[k] = nil
		} else {
			want[k] = vs
		}
	}
	return want
}

func TestHeaderRoundTrips(t *testing.T) {
	for _, h := range headers {
		for name, c := range map[string]struct {
			enc func(map[string][]string) []byte
			dec func([]byte) (map[string][]string, error)
		}{"plain": {EncodeHeader, DecodeHeader}, "tagged": {EncodeTaggedHeader, DecodeTaggedHeader}} {
			b := c.enc(h)
			if (b == nil) != (h == nil) {
				t.Errorf("%s: %q encoded as %x", name, h, b)
			}
			got, err := c.dec(b)
			if err != nil {
				t.Fatalf("%s: decode(encode(%q)): %v", name, h, err)
			}
			if !reflect.DeepEqual(got, readBack(h)) {
				t.Errorf("%s: decode(encode(%q)) = %#v", name, h, got)
			}
		}
	}
}

// TestVersion1IsThePostgresFormat pins the bytes: version 1 is what the
// Postgres backend has stored since its first release.
func TestVersion1IsThePostgresFormat(t *testing.T) {
	got := EncodeHeader(map[string][]string{"B": {"x", ""}, "A": nil})
	want := []byte{0x01, 0x02, 0x01, 'A', 0x00, 0x01, 'B', 0x02, 0x01, 'x', 0x00}
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodeHeader = %x, want %x", got, want)
	}
	if got := EncodeHeader(map[string][]string{}); !bytes.Equal(got, []byte{0x01, 0x00}) {
		t.Fatalf("EncodeHeader(empty) = %x, want 0100", got)
	}
}

// sqliteV0 is the SQLite backend's first, untagged encoding, as it wrote it.
func sqliteV0(h map[string][]string) []byte {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	buf := binary.AppendUvarint(nil, uint64(len(names)))
	for _, k := range names {
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		buf = append(buf, k...)
		vs := h[k]
		if vs == nil {
			buf = append(buf, 0)
			continue
		}
		buf = append(buf, 1)
		buf = binary.AppendUvarint(buf, uint64(len(vs)))
		for _, v := range vs {
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			buf = append(buf, v...)
		}
	}
	return buf
}

func TestTaggedHeaderReadsTheFirstSQLiteFormat(t *testing.T) {
	many := map[string][]string{}
	for i := range 200 { // a count of two uvarint bytes
		many[string(rune('!'+i%90))+string(rune('!'+i/90))] = []string{"v"}
	}
	for _, h := range append(slices.Clone(headers[1:]), many) {
		got, err := DecodeTaggedHeader(sqliteV0(h))
		if err != nil {
			t.Fatalf("decoding the first SQLite format of %q: %v", h, err)
		}
		if !reflect.DeepEqual(got, readBack(h)) {
			t.Errorf("the first SQLite format of %q decoded as %#v", h, got)
		}
	}
}

func TestHeaderDecodingRejectsCorruptData(t *testing.T) {
	good := EncodeHeader(map[string][]string{"A": {"bc"}})
	for _, b := range [][]byte{
		{},
		{0x02, 0x00},
		good[:len(good)-1],
		append(slices.Clone(good), 0x00),
		{0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		{0x01, 0x01, 0x05, 'a'},
	} {
		if _, err := DecodeHeader(b); err != ErrCorrupt {
			t.Errorf("DecodeHeader(%x) = %v, want ErrCorrupt", b, err)
		}
	}
	for _, b := range [][]byte{
		{},
		{0xff},
		{0x00, 0x02, 0x00},
		append([]byte{0x00}, good[:len(good)-1]...),
		{0x01, 0x01, 'A'},                   // no values flag
		{0x01, 0x01, 'A', 0x01, 0x02, 0x01}, // a value missing
		{0x01, 0x01, 'A', 0x00, 0x00},       // trailing byte
	} {
		if _, err := DecodeTaggedHeader(b); err != ErrCorrupt {
			t.Errorf("DecodeTaggedHeader(%x) = %v, want ErrCorrupt", b, err)
		}
	}
}

func TestOutcomeRoundTrips(t *testing.T) {
	for _, h := range headers {
		for _, body := range [][]byte{nil, {}, []byte("body \x00\xff")} {
			o := &contract.Outcome{Code: 201, Ref: "ref/1", Header: h, Body: body}
			b := AppendOutcome([]byte("prefix"), o)
			if len(b)-len("prefix") > OutcomeLen(o) {
				t.Errorf("%d bytes, more than OutcomeLen %d", len(b)-len("prefix"), OutcomeLen(o))
			}
			b = append(b, "rest"...)
			got, rest, err := DecodeOutcome(b[len("prefix"):])
			if err != nil {
				t.Fatalf("DecodeOutcome: %v", err)
			}
			if string(rest) != "rest" {
				t.Errorf("rest = %q", rest)
			}
			want := &contract.Outcome{Code: 201, Ref: "ref/1", Header: readBack(h)}
			if len(body) > 0 {
				want.Body = body
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("DecodeOutcome = %#v, want %#v", got, want)
			}
			if len(got.Body) > 0 {
				b[len(b)-len("rest")-1] = 'X' // the body's own memory
				if !bytes.Equal(got.Body, body) {
					t.Errorf("the decoded body shares the encoding's memory")
				}
			}
		}
	}
	good := AppendOutcome(nil, &contract.Outcome{Code: 200, Header: map[string][]string{"A": {"b"}}, Body: []byte("x")})
	for _, b := range [][]byte{nil, {0x00}, good[:len(good)-1], {0x01, 0xe8, 0x07, 0x00, 0x00, 0x00}, {0x01, 0x00, 0x00, 0x00, 0x02, 0x01}, {0x01, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00}} {
		if _, _, err := DecodeOutcome(b); err != ErrCorrupt {
			t.Errorf("DecodeOutcome(%x) = %v, want ErrCorrupt", b, err)
		}
	}
}

// etcdV0 is the etcd backend's first outcome format, as it wrote it.
func etcdV0(completed, expires time.Time, o *contract.Outcome) []byte {
	put := func(buf []byte, t time.Time) []byte {
		var v int64
		if !t.IsZero() {
			v = t.UnixMicro()
		}
		return binary.BigEndian.AppendUint64(buf, uint64(v))
	}
	bs := func(buf, b []byte) []byte { return append(binary.AppendUvarint(buf, uint64(len(b))), b...) }
	buf := put(put(nil, completed), expires)
	buf = binary.AppendUvarint(buf, uint64(o.Code))
	buf = bs(buf, []byte(o.Ref))
	buf = bs(buf, o.Body)
	buf = binary.AppendUvarint(buf, uint64(len(o.Header)))
	for k, vs := range o.Header {
		buf = bs(buf, []byte(k))
		buf = binary.AppendUvarint(buf, uint64(len(vs)))
		for _, v := range vs {
			buf = bs(buf, []byte(v))
		}
	}
	return buf
}

func TestLegacyEtcdOutcome(t *testing.T) {
	completed := time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)
	expires := completed.Add(time.Hour)
	for _, h := range headers {
		o := &contract.Outcome{Code: 299, Ref: "r", Header: h, Body: []byte("b")}
		v := etcdV0(completed, expires, o)
		if v[0] == Version1 {
			t.Fatalf("the first etcd format starts with the version byte")
		}
		c, e, got, err := DecodeLegacyEtcdOutcome(v)
		if err != nil {
			t.Fatalf("DecodeLegacyEtcdOutcome: %v", err)
		}
		want := &contract.Outcome{Code: 299, Ref: "r", Body: []byte("b")}
		if len(h) > 0 {
			want.Header = readBack(h)
		}
		if !c.Equal(completed) || !e.Equal(expires) || !reflect.DeepEqual(got, want) {
			t.Errorf("DecodeLegacyEtcdOutcome = %v %v %#v, want %#v", c, e, got, want)
		}
		if _, _, _, err := DecodeLegacyEtcdOutcome(v[:len(v)-1]); err != ErrCorrupt && len(h) > 0 {
			t.Errorf("a truncated record decoded: %v", err)
		}
	}
	if _, _, _, err := DecodeLegacyEtcdOutcome([]byte("Junk9Bytes")); err != ErrCorrupt {
		t.Errorf("junk decoded: %v", err)
	}
}

func TestClone(t *testing.T) {
	o := &contract.Outcome{Code: 1, Header: map[string][]string{"A": {}, "B": {"x"}, "C": nil}, Body: []byte("b")}
	c := Clone(o)
	if !reflect.DeepEqual(c.Header, map[string][]string{"A": nil, "B": {"x"}, "C": nil}) || string(c.Body) != "b" {
		t.Fatalf("Clone = %#v", c)
	}
	c.Header["B"][0] = "changed"
	c.Body[0] = 'X'
	if o.Header["B"][0] != "x" || o.Body[0] != 'b' {
		t.Fatalf("Clone shares memory with the original")
	}
	if Clone(nil) != nil || CloneHeader(nil) != nil || CloneHeader(map[string][]string{}) == nil {
		t.Fatalf("nil and empty are not kept apart")
	}
}
