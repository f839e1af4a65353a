package durable

import (
	"time"

	"github.com/durable-go/durable/contract"
)

func invalid(op, msg string) *contract.Error {
	return &contract.Error{Code: contract.InvalidArgument, Op: op, Msg: msg}
}

// asciiSet is a set of ASCII bytes: bit c is set when byte c is in it.
type asciiSet [2]uint64

// charRanges returns the set of the bytes in the inclusive ranges given as
// pairs of bytes: charRanges("az", "09") is [a-z0-9].
func charRanges(pairs ...string) asciiSet {
	var s asciiSet
	for _, p := range pairs {
		for c := p[0]; c <= p[1]; c++ {
			s[c/64] |= 1 << (c % 64)
		}
	}
	return s
}

func (s *asciiSet) has(c byte) bool { return c < 128 && s[c/64]&(1<<(c%64)) != 0 }

// syntax is the shape of every string the package checks: 1 to max bytes,
// the first from first and the rest from rest.
type syntax struct {
	max         int
	first, rest asciiSet
}

func (x *syntax) valid(s string) bool {
	if len(s) == 0 || len(s) > x.max || !x.first.has(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !x.rest.has(s[i]) {
			return false
		}
	}
	return true
}

var (
	alnum     = charRanges("az", "AZ", "09")
	printable = charRanges("!~") // printable ASCII without space
	// identifierSyntax: IDs, keys, owners, resources and non-empty scopes,
	// [A-Za-z0-9][A-Za-z0-9_.:-]*, 1–128 bytes.
	identifierSyntax = syntax{maxIdentifierLength, alnum, charRanges("az", "AZ", "09", "__", "..", "::", "--")}
	// statusSyntax: [a-z][a-z0-9_]{0,63}.
	statusSyntax = syntax{64, charRanges("az"), charRanges("az", "09", "__")}
	// schemeSyntax: a URL scheme, [A-Za-z][A-Za-z0-9+.-]*, 1–64 bytes.
	schemeSyntax = syntax{64, charRanges("az", "AZ"), charRanges("az", "AZ", "09", "++", "..", "--")}
	// Printable ASCII without spaces, of several lengths.
	tokenSyntax       = syntax{maxIdentifierLength, printable, printable}
	fingerprintSyntax = syntax{maxFingerprintLength, printable, printable}
	headerNameSyntax  = syntax{256, printable, printable}
	refSyntax         = syntax{maxRefLength, printable, printable}
)

func ttlInRange(d time.Duration) bool { return d >= TTLMargin && d <= MaxTTL }

// validator collects the first problem of one call.
type validator struct {
	op  string
	err *contract.Error
}

func (v *validator) fail(msg string) {
	if v.err == nil {
		v.err = invalid(v.op, msg)
	}
}

// check fails with what+msg unless s has syntax x.
func (v *validator) check(x *syntax, s, what, msg string) {
	if !x.valid(s) {
		v.fail(what + msg)
	}
}

const identifierRule = " must be 1-128 bytes of [A-Za-z0-9_.:-] starting with a letter or digit"

func (v *validator) scope(s contract.Scope) {
	if s != "" && !identifierSyntax.valid(string(s)) {
		v.fail("scope must be empty or 1-128 bytes of [A-Za-z0-9_.:-] starting with a letter or digit")
	}
}

func (v *validator) ident(what, s string) { v.check(&identifierSyntax, s, what, identifierRule) }

// leaseResource checks a lease's resource: an identifier, or a permit's
// (identifier "#" n, see contract.PermitResource).
func (v *validator) leaseResource(what, s string) {
	if base, _, ok := contract.SplitPermit(s); ok {
		s = base
	}
	v.check(&identifierSyntax, s, what, identifierRule+`, or a permit's name (resource "#" 1-1000)`)
}

// leaseValue checks a lease's value against contract.MaxLeaseValueBytes.
func (v *validator) leaseValue(s string) {
	if len(s) > contract.MaxLeaseValueBytes {
		v.fail("lease value must be at most 1024 bytes")
	}
}

func (v *validator) optIdent(what, s string) {
	if s != "" {
		v.ident(what, s)
	}
}

func (v *validator) status(what string, s contract.Status) {
	v.check(&statusSyntax, string(s), what, " must match [a-z][a-z0-9_]{0,63}")
}

// ttl checks a claim or lease TTL against the range and against min, the
// Store's minimum for its backend's clock tolerance (see [Store.MinTTL]).
// limit validates a page size and fills the default for 0.
func (v *validator) limit(n int) int {
	switch {
	case n == 0:
		return DefaultListLimit
	case n < 0 || n > MaxListLimit:
		v.fail("limit must be within 0 and 1000")
	}
	return n
}

func (v *validator) ttl(d, min time.Duration) {
	switch {
	case !ttlInRange(d):
		v.fail("ttl must be within 1s and 24h")
	case d < min:
		v.fail("ttl must be at least " + min.String() + " (the backend's clock tolerance plus 1s), so that the holder has time to use it")
	}
}

func (v *validator) token(s string) {
	v.check(&tokenSyntax, s, "claim token", " must be 1-128 bytes of printable ASCII")
}

// Lengths of a caller-chosen claim token (ClaimRequest.Token).
const (
	minCallerToken = 16
	maxCallerToken = 128
)

// callerToken checks ClaimRequest.Token: empty, or 16-128 bytes of
// printable ASCII.
func (v *validator) callerToken(s string) {
	if s != "" && (len(s) < minCallerToken || !tokenSyntax.valid(s)) {
		v.fail("claim request token must be empty or 16-128 bytes of printable ASCII")
	}
}

// completion checks what CompleteKey and CompleteKeyTx share; the
// defaults are filled.
func (v *validator) completion(c contract.Completion, maxBody, maxHeader int) {
	v.scope(c.Scope)
	v.ident("key", c.Key)
	v.token(c.Token)
	if c.Retain < 0 {
		v.fail("retain must be positive")
	}
	if c.Tombstone < 0 {
		v.fail("tombstone must not be negative")
	}
	v.outcome(c.Outcome, maxBody, maxHeader)
	v.fence(c.Fence)
}

func (v *validator) fingerprint(s string) {
	v.check(&fingerprintSyntax, s, "fingerprint", " must be 1-256 bytes of printable ASCII")
}

func (v *validator) fence(f *contract.Fence) {
	if f == nil {
		return
	}
	v.leaseResource("fence resource", f.Resource)
	v.ident("fence owner", f.Owner)
	if f.Token <= 0 {
		v.fail("fence token must be positive")
	}
}

func (v *validator) lease(l contract.Lease) {
	v.scope(l.Scope)
	v.leaseResource("resource", l.Resource)
	v.ident("owner", l.Owner)
	if l.Token <= 0 {
		v.fail("lease token must be positive")
	}
}

func (v *validator) size(what string, n, max int) {
	if n > max {
		v.fail(what + " exceeds the configured size limit")
	}
}

func (v *validator) outcome(o contract.Outcome, maxBody, maxHeader int) {
	if o.Code < 0 || o.Code > 999 {
		v.fail("outcome code must be within 0 and 999")
	}
	v.size("outcome body", len(o.Body), maxBody)
	if o.Ref != "" {
		v.check(&refSyntax, o.Ref, "outcome ref", " must be 1-1024 bytes of printable ASCII")
	}
	n := 0
	for k, vs := range o.Header {
		v.check(&headerNameSyntax, k, "outcome header names", " must be 1-256 bytes of printable ASCII")
		n += len(k)
		for _, s := range vs {
			n += len(s)
		}
	}
	v.size("outcome headers", n, maxHeader)
}

// cleanup validates req and fills its default limit.
func (v *validator) cleanup(req contract.CleanupRequest) contract.CleanupRequest {
	switch {
	case req.Limit == 0:
		req.Limit = DefaultCleanupLimit
	case req.Limit < 0 || req.Limit > MaxCleanupLimit:
		v.fail("limit must be within 0 and 100000")
	}
	if req.TerminalAge < 0 {
		v.fail("terminal age must not be negative")
	}
	return req
}
