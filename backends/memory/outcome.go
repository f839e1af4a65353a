package memory

import (
	"encoding/binary"
	"strings"

	"github.com/durable-go/durable/contract"
)

// packedOutcome is a stored outcome as one string, the tail of a completed
// key record's data (see keyRec): a flags byte, the code, the ref and the
// body, the number of headers and of all their values, then each header's
// name and values, every length a uvarint. Kept as a struct, a header map,
// a value array and a body, an outcome would be four objects for the
// garbage collector to mark on every cycle for as long as the key is
// retained, three of them full of pointers. Replays pay no more for it:
// unpack builds the same private copy that a clone did, with the names and
// values as substrings of the packed string instead of shared strings.
type packedOutcome string

const (
	packedHasHeader = 1 << iota // Header was not nil
	packedHasBody               // Body was not nil
	// packedDropped: a tombstone's outcome, whose payload (ref, body,
	// headers) Cleanup dropped past ExpiresAt; only the code is left.
	packedDropped
)

// packOutcome packs o (nil packs to "") in one allocation.
func packOutcome(o *contract.Outcome) packedOutcome {
	var p packer
	p.b.Grow(packedLen(o))
	p.outcome(o, 0)
	return packedOutcome(p.b.String())
}

// packedLen returns the length of o packed.
func packedLen(o *contract.Outcome) int {
	if o == nil {
		return 0
	}
	n, nv := 0, 0
	for k, vs := range o.Header {
		n += stringLen(k) + uvarintLen(uint64(len(vs)))
		nv += len(vs)
		for _, v := range vs {
			n += stringLen(v)
		}
	}
	return n + 1 + varintLen(int64(o.Code)) + stringLen(o.Ref) + uvarintLen(uint64(len(o.Body))) + len(o.Body) +
		uvarintLen(uint64(len(o.Header))) + uvarintLen(uint64(nv))
}

// outcome writes o packed (nothing for nil), with extra flags (such as
// packedDropped) in its flags byte.
func (p *packer) outcome(o *contract.Outcome, flags byte) {
	if o == nil {
		return
	}
	nv := 0
	for _, vs := range o.Header {
		nv += len(vs)
	}
	if o.Header != nil {
		flags |= packedHasHeader
	}
	if o.Body != nil {
		flags |= packedHasBody
	}
	p.b.WriteByte(flags)
	p.b.Write(binary.AppendVarint(p.scratch[:0], int64(o.Code)))
	p.string(o.Ref)
	p.uvarint(uint64(len(o.Body)))
	p.b.Write(o.Body)
	p.uvarint(uint64(len(o.Header)))
	p.uvarint(uint64(nv)) // the values of all headers, for unpack's one array
	for k, vs := range o.Header {
		p.string(k)
		p.uvarint(uint64(len(vs)))
		for _, v := range vs {
			p.string(v)
		}
	}
}

// packer writes length-prefixed fields into a string.
type packer struct {
	b       strings.Builder
	scratch [binary.MaxVarintLen64]byte
}

func (p *packer) uvarint(v uint64) { p.b.Write(binary.AppendUvarint(p.scratch[:0], v)) }

func (p *packer) string(s string) {
	p.uvarint(uint64(len(s)))
	p.b.WriteString(s)
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func varintLen(v int64) int { return uvarintLen(uint64(v<<1) ^ uint64(v>>63)) }

func stringLen(s string) int { return uvarintLen(uint64(len(s))) + len(s) }

// unpack returns a private copy of the packed outcome (nil for ""): the
// caller may change its header map, value slices and body. Each header's
// value slice is capped, so an append to one cannot write into the next.
func (p packedOutcome) unpack() *contract.Outcome {
	if p == "" {
		return nil
	}
	d := unpacker{s: string(p)}
	flags := d.s[0]
	d.s = d.s[1:]
	out := &contract.Outcome{Code: int(d.varint()), Ref: d.string()}
	body := d.string()
	if flags&packedHasBody != 0 {
		out.Body = []byte(body)
	}
	nh, nv := int(d.uvarint()), int(d.uvarint())
	if flags&packedHasHeader == 0 {
		return out
	}
	out.Header = make(map[string][]string, nh)
	vals := make([]string, 0, nv)
	for range nh {
		k := d.string()
		n := int(d.uvarint())
		if n == 0 {
			out.Header[k] = nil
			continue
		}
		start := len(vals)
		for range n {
			vals = append(vals, d.string())
		}
		out.Header[k] = vals[start:len(vals):len(vals)]
	}
	return out
}

// code returns the packed outcome's status code without unpacking the
// rest (0 for "").
func (p packedOutcome) code() int {
	if p == "" {
		return 0
	}
	d := unpacker{s: string(p[1:])}
	return int(d.varint())
}

// dropped reports whether the packed outcome is a tombstone's: its
// payload was dropped (see packedDropped).
func (p packedOutcome) dropped() bool { return p != "" && p[0]&packedDropped != 0 }

// unpacker reads what packOutcome wrote. The input is the store's own, so
// it is well formed. (binary.Uvarint reads a []byte; converting the string
// would copy it.)
type unpacker struct{ s string }

func (d *unpacker) uvarint() uint64 {
	var v uint64
	for shift := 0; ; shift += 7 {
		c := d.s[0]
		d.s = d.s[1:]
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v
		}
	}
}

func (d *unpacker) varint() int64 {
	u := d.uvarint()
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

func (d *unpacker) string() string {
	n := int(d.uvarint())
	s := d.s[:n]
	d.s = d.s[n:]
	return s
}

// hasEmptyValues reports whether a header name has an empty, non-nil value
// list, which reads back as nil (the contract's rule for nil and empty,
// which unpack follows: a name with no values gets a nil list).
func hasEmptyValues(h map[string][]string) bool {
	for _, vs := range h {
		if vs != nil && len(vs) == 0 {
			return true
		}
	}
	return false
}
