// Package outcomecodec is the one stored form of an idempotency key's
// outcome, shared by the backends that persist it: the Postgres and SQLite
// backends keep the headers in a column of their own (EncodeHeader), the
// etcd backend keeps the whole outcome as one value (AppendOutcome). The
// memory backend keeps an in-process packed form of its own and follows
// the same rules.
//
// # Header encoding, version 1
//
// Byte-exact for any name and value (JSON cannot hold invalid UTF-8, and
// HTTP header values may contain obs-text):
//
//	0x01                          format version
//	uvarint n                     number of names, then n times, by name:
//	  uvarint len, name bytes
//	  uvarint m                   number of values, then m times:
//	    uvarint len, value bytes
//
// A nil Header encodes to nil (a NULL column). This is the encoding the
// Postgres backend has always written.
//
// # Outcome encoding, version 1
//
//	0x01                          format version
//	uvarint code
//	uvarint len, ref bytes
//	uvarint len, body bytes
//	uvarint len, header bytes     the header encoding; length 0 for a nil Header
//
// # What reads back (the contract's rule, see contract.Outcome)
//
// Names, values, their order and duplicates read back as written. A name
// with a nil or empty value list reads back with a nil list. A nil Header
// reads back as nil; an empty, non-nil Header reads back with no names
// (empty here; nil from records of the etcd backend's first format, which
// could not tell the two apart). A zero-length Body reads back as nil from
// the outcome encoding.
package outcomecodec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"

	"github.com/durable-go/durable/contract"
)

// Version1 is the version byte of the header and outcome encodings.
const Version1 = 0x01

// ErrCorrupt is the cause of every decoding failure. Callers report it as
// contract.Corrupt; it carries none of the stored bytes.
var ErrCorrupt = errors.New("outcomecodec: corrupt outcome encoding")

// EncodeHeader returns the version-1 encoding of h, nil for a nil h.
func EncodeHeader(h map[string][]string) []byte {
	if h == nil {
		return nil
	}
	return AppendHeader(make([]byte, 0, headerLen(h)), h)
}

func headerLen(h map[string][]string) int {
	size := 1 + binary.MaxVarintLen64
	for k, vs := range h {
		size += 2*binary.MaxVarintLen64 + len(k)
		for _, v := range vs {
			size += binary.MaxVarintLen64 + len(v)
		}
	}
	return size
}

// AppendHeader appends the version-1 encoding of h (for a nil h, that of
// an empty one) to dst, names in byte order.
func AppendHeader(dst []byte, h map[string][]string) []byte {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	dst = append(dst, Version1)
	dst = binary.AppendUvarint(dst, uint64(len(names)))
	for _, k := range names {
		dst = appendString(dst, k)
		vs := h[k]
		dst = binary.AppendUvarint(dst, uint64(len(vs)))
		for _, v := range vs {
			dst = appendString(dst, v)
		}
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// DecodeHeader decodes EncodeHeader's bytes: nil for nil. Anything else
// that is not exactly one version-1 encoding is ErrCorrupt.
func DecodeHeader(b []byte) (map[string][]string, error) {
	if b == nil {
		return nil, nil
	}
	if len(b) == 0 || b[0] != Version1 {
		return nil, ErrCorrupt
	}
	h, rest, err := DecodeHeaderFields(b[1:])
	if err != nil || len(rest) != 0 {
		return nil, ErrCorrupt
	}
	return h, nil
}

// DecodeHeaderFields decodes the fields of a version-1 header encoding
// after its version byte (n, then the names and values) from the front of
// b, and returns the bytes after them. The etcd backend's first outcome
// format held these fields without the version byte.
func DecodeHeaderFields(b []byte) (h map[string][]string, rest []byte, err error) {
	r := reader{b: b}
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) {
		return nil, nil, ErrCorrupt
	}
	h = make(map[string][]string, n)
	for range n {
		k := r.string()
		m := r.uvarint()
		if r.bad || m > uint64(len(r.b)) {
			return nil, nil, ErrCorrupt
		}
		var vs []string
		if m > 0 {
			vs = make([]string, 0, m)
		}
		for range m {
			vs = append(vs, r.string())
		}
		if r.bad {
			return nil, nil, ErrCorrupt
		}
		h[k] = vs
	}
	return h, r.b, nil
}

// AppendOutcome appends the version-1 encoding of o to dst.
func AppendOutcome(dst []byte, o *contract.Outcome) []byte {
	dst = append(dst, Version1)
	dst = binary.AppendUvarint(dst, uint64(o.Code))
	dst = appendString(dst, o.Ref)
	dst = binary.AppendUvarint(dst, uint64(len(o.Body)))
	dst = append(dst, o.Body...)
	if o.Header == nil {
		return binary.AppendUvarint(dst, 0)
	}
	h := AppendHeader(make([]byte, 0, headerLen(o.Header)), o.Header)
	dst = binary.AppendUvarint(dst, uint64(len(h)))
	return append(dst, h...)
}

// OutcomeLen is an upper bound of the length of o's encoding.
func OutcomeLen(o *contract.Outcome) int {
	n := 1 + 4*binary.MaxVarintLen64 + len(o.Ref) + len(o.Body)
	if o.Header != nil {
		n += headerLen(o.Header)
	}
	return n
}

// DecodeOutcome decodes one version-1 outcome encoding from the front of
// b and returns the bytes after it. The outcome's Body and Header are its
// own: they do not share memory with b.
func DecodeOutcome(b []byte) (o *contract.Outcome, rest []byte, err error) {
	if len(b) == 0 || b[0] != Version1 {
		return nil, nil, ErrCorrupt
	}
	r := reader{b: b[1:]}
	code := r.uvarint()
	ref := r.string()
	body := r.bytes()
	hb := r.bytes()
	if r.bad || code > 999 {
		return nil, nil, ErrCorrupt
	}
	o = &contract.Outcome{Code: int(code), Ref: ref}
	if len(body) > 0 {
		o.Body = bytes.Clone(body)
	}
	if len(hb) > 0 {
		if o.Header, err = DecodeHeader(hb); err != nil {
			return nil, nil, err
		}
	}
	return o, r.b, nil
}

// Clone returns a copy of o as a read of the stored outcome returns it: the
// Body and Header copied, and every name with an empty value list given a
// nil one. A backend that answers CompleteKey from the caller's Completion
// instead of from storage returns this.
func Clone(o *contract.Outcome) *contract.Outcome {
	if o == nil {
		return nil
	}
	out := *o
	out.Body = bytes.Clone(o.Body)
	out.Header = CloneHeader(o.Header)
	return &out
}

// CloneHeader copies h as it reads back: nil for nil, and a nil list for
// every name with an empty one.
func CloneHeader(h map[string][]string) map[string][]string {
	if h == nil {
		return nil
	}
	out := make(map[string][]string, len(h))
	for k, vs := range h {
		if len(vs) == 0 {
			out[k] = nil
			continue
		}
		out[k] = slices.Clone(vs)
	}
	return out
}

// reader reads length-prefixed fields; bad is set on the first malformed
// one, after which every read returns zero values.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) uvarint() uint64 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) string() string { return string(r.bytes()) }
