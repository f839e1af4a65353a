package outcomecodec

import (
	"encoding/binary"
	"time"

	"github.com/durable-go/durable/contract"
)

// Earlier formats, still read.
//
// The SQLite backend first stored headers with no version byte: uvarint
// n, then for each name (sorted) uvarint len and the name, a byte 0 (a nil
// list, nothing follows) or 1 (uvarint m, then m times uvarint len and the
// value). Such a value never starts with a zero byte unless it is exactly
// that one byte (no names), so the SQLite backend now stores a zero byte
// followed by the version-1 header encoding ([EncodeTaggedHeader]), and
// [DecodeTaggedHeader] reads both.
//
// The etcd backend first stored an outcome as: completedAt and expiresAt
// (8 bytes each, big-endian Unix microseconds, 0 for the zero time),
// uvarint code, uvarint len and ref, uvarint len and body, then the
// version-1 header fields without their version byte. Its first byte is
// the top byte of a time, 0x00 for every time from 1970 to beyond the year
// 4000, never [Version1]; see [DecodeLegacyEtcdOutcome].

// EncodeTaggedHeader returns the zero byte and the version-1 encoding of h,
// nil for a nil h: the form of a column that once held the SQLite
// backend's untagged format.
func EncodeTaggedHeader(h map[string][]string) []byte {
	if h == nil {
		return nil
	}
	b := make([]byte, 1, 1+headerLen(h))
	return AppendHeader(b, h)
}

// DecodeTaggedHeader decodes EncodeTaggedHeader's bytes, and the SQLite
// backend's first, untagged format: nil for nil.
func DecodeTaggedHeader(b []byte) (map[string][]string, error) {
	if b == nil {
		return nil, nil
	}
	if len(b) >= 2 && b[0] == 0 {
		return DecodeHeader(b[1:])
	}
	return decodeSQLiteHeader(b)
}

func decodeSQLiteHeader(b []byte) (map[string][]string, error) {
	r := reader{b: b}
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) {
		return nil, ErrCorrupt
	}
	h := make(map[string][]string, n)
	for range n {
		k := r.string()
		if r.bad || len(r.b) == 0 {
			return nil, ErrCorrupt
		}
		hasValues := r.b[0]
		r.b = r.b[1:]
		if hasValues == 0 {
			h[k] = nil
			continue
		}
		m := r.uvarint()
		if r.bad || m > uint64(len(r.b)) {
			return nil, ErrCorrupt
		}
		var vs []string
		if m > 0 {
			vs = make([]string, 0, m)
		}
		for range m {
			vs = append(vs, r.string())
		}
		if r.bad {
			return nil, ErrCorrupt
		}
		h[k] = vs
	}
	if len(r.b) != 0 {
		return nil, ErrCorrupt
	}
	return h, nil
}

// DecodeLegacyEtcdOutcome decodes an outcome of the etcd backend's first
// format, with the two times before it.
func DecodeLegacyEtcdOutcome(v []byte) (completed, expires time.Time, o *contract.Outcome, err error) {
	if len(v) < 16 {
		return time.Time{}, time.Time{}, nil, ErrCorrupt
	}
	completed, expires = legacyTime(v), legacyTime(v[8:])
	r := reader{b: v[16:]}
	code := r.uvarint()
	ref := r.string()
	body := r.bytes()
	if r.bad {
		return time.Time{}, time.Time{}, nil, ErrCorrupt
	}
	o = &contract.Outcome{Code: int(code), Ref: ref}
	if len(body) > 0 {
		o.Body = append([]byte(nil), body...)
	}
	h, rest, err := DecodeHeaderFields(r.b)
	if err != nil || len(rest) != 0 {
		return time.Time{}, time.Time{}, nil, ErrCorrupt
	}
	if len(h) > 0 {
		o.Header = h
	}
	return completed, expires, o, nil
}

func legacyTime(b []byte) time.Time {
	v := int64(binary.BigEndian.Uint64(b))
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMicro(v).UTC()
}
