package postgres

import (
	"encoding/binary"
	"errors"
	"sort"
)

// Outcome headers are stored in the outcome_header bytea column in this
// encoding, byte-exact for any name and value (JSON and jsonb are not: they
// cannot hold invalid UTF-8, and HTTP header values may contain obs-text):
//
//	0x01                          format version
//	uvarint n                     number of names, then n times, by name:
//	  uvarint len, name bytes
//	  uvarint m                   number of values, then m times:
//	    uvarint len, value bytes
//
// A nil map is stored as NULL; a name with no values reads back as nil.

const headerFormat = 0x01

var errBadHeader = errors.New("postgres: corrupt outcome header encoding")

func encodeHeader(h map[string][]string) []byte {
	if h == nil {
		return nil
	}
	names := make([]string, 0, len(h))
	size := 1 + binary.MaxVarintLen64
	for k, vs := range h {
		names = append(names, k)
		size += 2*binary.MaxVarintLen64 + len(k)
		for _, v := range vs {
			size += binary.MaxVarintLen64 + len(v)
		}
	}
	sort.Strings(names)
	b := make([]byte, 0, size)
	b = append(b, headerFormat)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		vs := h[k]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

func decodeHeader(b []byte) (map[string][]string, error) {
	if b == nil {
		return nil, nil
	}
	if len(b) == 0 || b[0] != headerFormat {
		return nil, errBadHeader
	}
	b = b[1:]
	next := func() (uint64, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return n, true
	}
	str := func() (string, bool) {
		n, ok := next()
		if !ok || n > uint64(len(b)) {
			return "", false
		}
		s := string(b[:n])
		b = b[n:]
		return s, true
	}
	n, ok := next()
	if !ok || n > uint64(len(b)) {
		return nil, errBadHeader
	}
	h := make(map[string][]string, n)
	for i := uint64(0); i < n; i++ {
		k, ok := str()
		if !ok {
			return nil, errBadHeader
		}
		m, ok := next()
		if !ok || m > uint64(len(b)) {
			return nil, errBadHeader
		}
		var vs []string
		if m > 0 {
			vs = make([]string, 0, m)
		}
		for j := uint64(0); j < m; j++ {
			v, ok := str()
			if !ok {
				return nil, errBadHeader
			}
			vs = append(vs, v)
		}
		h[k] = vs
	}
	if len(b) != 0 {
		return nil, errBadHeader
	}
	return h, nil
}
