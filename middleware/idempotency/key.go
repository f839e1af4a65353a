package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// MaxKeyLength is the longest client key accepted, in characters.
const MaxKeyLength = 255

// StoreKey returns the store key under which the middleware keeps a client
// key: "idem:sha256:" and the 64 hex digits of the key's SHA-256. Client
// keys may hold any character the header syntax allows; only their hash
// reaches storage. Use it to inspect a key's record with
// [durable.Store.GetKey], in the scope the request was made in.
func StoreKey(clientKey string) string {
	sum := sha256.Sum256([]byte(clientKey))
	var b [12 + 2*sha256.Size]byte
	copy(b[:], "idem:sha256:")
	hex.Encode(b[12:], sum[:])
	return string(b[:])
}

// ParseKey parses the values of the key header (or of another
// transport's key field: middleware/grpcidem reads gRPC metadata with it).
// It returns the key, or "" and false when the field is malformed.
//
// The field is an RFC 8941 Item whose bare item is a String:
//
//	Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// Parameters after the string are checked for syntax and ignored. For
// compatibility with clients that do not quote, a value that does not start
// with a double quote is taken whole as the key; it must then consist of
// visible ASCII characters other than the double quote, backslash, comma
// and semicolon. Either way the key has 1 to 255 characters. Several field
// lines (a list, not an Item) are malformed.
func ParseKey(values []string) (string, bool) {
	if len(values) != 1 {
		return "", false
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", false
	}
	if v[0] != '"' {
		if len(v) > MaxKeyLength {
			return "", false
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' || c == ',' || c == ';' {
				return "", false
			}
		}
		return v, true
	}
	key, rest, ok := parseString(v)
	if !ok || key == "" || len(key) > MaxKeyLength {
		return "", false
	}
	if rest, ok = parseParams(rest); !ok || rest != "" {
		return "", false
	}
	return key, true
}

// parseString parses an sf-string at the start of s (RFC 8941 4.2.5).
func parseString(s string) (str, rest string, ok bool) {
	if s == "" || s[0] != '"' {
		return "", s, false
	}
	// Fast path: no escapes.
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return s[1:i], s[i+1:], true
		case c == '\\':
			return parseEscaped(s)
		case c < 0x20 || c > 0x7e:
			return "", s, false
		}
	}
	return "", s, false
}

func parseEscaped(s string) (str, rest string, ok bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", s, false
			}
			b.WriteByte(s[i])
		case c == '"':
			return b.String(), s[i+1:], true
		case c < 0x20 || c > 0x7e:
			return "", s, false
		default:
			b.WriteByte(c)
		}
	}
	return "", s, false
}

// parseParams parses RFC 8941 parameters (4.2.3.2) at the start of s and
// returns what follows them.
func parseParams(s string) (rest string, ok bool) {
	for len(s) > 0 && s[0] == ';' {
		s = strings.TrimLeft(s[1:], " ")
		// key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )
		if s == "" || !(isLCAlpha(s[0]) || s[0] == '*') {
			return s, false
		}
		i := 1
		for i < len(s) && (isLCAlpha(s[i]) || isDigit(s[i]) || strings.IndexByte("_-.*", s[i]) >= 0) {
			i++
		}
		s = s[i:]
		if len(s) > 0 && s[0] == '=' {
			if s, ok = parseBareItem(s[1:]); !ok {
				return s, false
			}
		}
	}
	return s, true
}

// parseBareItem parses an RFC 8941 bare item (4.2.3.1) at the start of s.
func parseBareItem(s string) (rest string, ok bool) {
	if s == "" {
		return s, false
	}
	switch c := s[0]; {
	case c == '-' || isDigit(c):
		return parseNumber(s)
	case c == '"':
		_, rest, ok := parseString(s)
		return rest, ok
	case c == '*' || isAlpha(c):
		i := 1
		for i < len(s) && (isTChar(s[i]) || s[i] == ':' || s[i] == '/') {
			i++
		}
		return s[i:], true
	case c == ':':
		end := strings.IndexByte(s[1:], ':')
		if end < 0 {
			return s, false
		}
		for i := 1; i <= end; i++ {
			if c := s[i]; !(isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '=') {
				return s, false
			}
		}
		return s[end+2:], true
	case c == '?':
		if len(s) < 2 || (s[1] != '0' && s[1] != '1') {
			return s, false
		}
		return s[2:], true
	}
	return s, false
}

// parseNumber parses an sf-integer or sf-decimal (RFC 8941 4.2.4).
func parseNumber(s string) (rest string, ok bool) {
	i := 0
	if s[0] == '-' {
		i++
	}
	if i == len(s) || !isDigit(s[i]) {
		return s, false
	}
	start, dot := i, -1
	for ; i < len(s); i++ {
		c := s[i]
		if c == '.' && dot < 0 {
			if i-start > 12 {
				return s, false
			}
			dot = i
			continue
		}
		if !isDigit(c) {
			break
		}
	}
	switch digits := i - start; {
	case digits == 0 || (dot < 0 && digits > 15):
		return s, false
	case dot >= 0 && (i-dot-1 < 1 || i-dot-1 > 3):
		return s, false
	}
	return s[i:], true
}

func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || (c >= 'A' && c <= 'Z') }

// isTChar reports whether c is an RFC 9110 tchar.
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// validToken reports whether s is an RFC 9110 token, such as a header name
// or a method.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTChar(s[i]) {
			return false
		}
	}
	return true
}

// DefaultFingerprint is the default request fingerprint: "sha256:" and the
// hex SHA-256 of the method, the escaped path and the body, each separated
// by a zero byte. The query string and headers are not part of it; pass a
// Fingerprint function in [Options] to include them.
func DefaultFingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte{0})
	h.Write([]byte(r.URL.EscapedPath()))
	h.Write([]byte{0})
	h.Write(body)
	var sum [sha256.Size]byte
	return hashString(h.Sum(sum[:0]))
}

func hashString(sum []byte) string {
	var b [7 + 2*sha256.Size]byte
	copy(b[:], "sha256:")
	hex.Encode(b[7:], sum)
	return string(b[:])
}

// storeFingerprint returns fp if the store accepts it as is (1-256 bytes of
// visible ASCII), otherwise "sha256:" and its hex SHA-256.
func storeFingerprint(fp string) string {
	ok := fp != "" && len(fp) <= 256
	for i := 0; ok && i < len(fp); i++ {
		ok = fp[i] >= 0x21 && fp[i] <= 0x7e
	}
	if ok {
		return fp
	}
	sum := sha256.Sum256([]byte(fp))
	return hashString(sum[:])
}
