package durable

import (
	"github.com/durable-go/durable/contract"
	"time"
)

func invalid(op, msg string) *contract.Error {
	return &contract.Error{Code: contract.InvalidArgument, Op: op, Msg: msg}
}

// validIdentifier reports whether s matches [A-Za-z0-9][A-Za-z0-9_.:-]* and
// is 1–128 bytes long.
func validIdentifier(s string) bool {
	if len(s) == 0 || len(s) > maxIdentifierLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// validStatus reports whether s matches [a-z][a-z0-9_]{0,63}.
func validStatus(s contract.Status) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z':
		case i > 0 && (c >= '0' && c <= '9' || c == '_'):
		default:
			return false
		}
	}
	return true
}

// validPrintable reports whether s is 1–max bytes of printable ASCII
// without spaces.
func validPrintable(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func ttlInRange(d time.Duration) bool { return d >= MinTTL && d <= MaxTTL }

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

func (v *validator) scope(s contract.Scope) {
	if s != "" && !validIdentifier(string(s)) {
		v.fail("scope must be empty or 1-128 bytes of [A-Za-z0-9_.:-] starting with a letter or digit")
	}
}

func (v *validator) ident(what, s string) {
	if !validIdentifier(s) {
		v.fail(what + " must be 1-128 bytes of [A-Za-z0-9_.:-] starting with a letter or digit")
	}
}

func (v *validator) optIdent(what, s string) {
	if s != "" {
		v.ident(what, s)
	}
}

func (v *validator) status(what string, s contract.Status) {
	if !validStatus(s) {
		v.fail(what + " must match [a-z][a-z0-9_]{0,63}")
	}
}

// ttl checks a claim or lease TTL against the range and against min, the
// Store's minimum for its backend's clock tolerance (see [Store.MinTTL]).
func (v *validator) ttl(d, min time.Duration) {
	switch {
	case !ttlInRange(d):
		v.fail("ttl must be within 1s and 24h")
	case d < min:
		v.fail("ttl must be at least " + min.String() + " (the backend's clock tolerance plus 1s), so that the holder has time to use it")
	}
}

func (v *validator) token(s string) {
	if !validPrintable(s, maxIdentifierLength) {
		v.fail("claim token must be 1-128 bytes of printable ASCII")
	}
}

func (v *validator) fence(f *contract.Fence) {
	if f == nil {
		return
	}
	v.ident("fence resource", f.Resource)
	v.ident("fence owner", f.Owner)
	if f.Token <= 0 {
		v.fail("fence token must be positive")
	}
}

func (v *validator) lease(l contract.Lease) {
	v.scope(l.Scope)
	v.ident("resource", l.Resource)
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
	if o.Ref != "" && !validPrintable(o.Ref, maxRefLength) {
		v.fail("outcome ref must be 1-1024 bytes of printable ASCII")
	}
	n := 0
	for k, vs := range o.Header {
		if !validPrintable(k, 256) {
			v.fail("outcome header names must be 1-256 bytes of printable ASCII")
		}
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
