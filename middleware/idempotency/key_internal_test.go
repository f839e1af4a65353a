package idempotency

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLength)
	cases := []struct {
		name   string
		values []string
		want   string // "" means malformed
	}{
		{"String", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"StringWithSpaces", []string{`"a key with spaces"`}, "a key with spaces"},
		{"EscapedQuote", []string{`"a\"b"`}, `a"b`},
		{"EscapedBackslash", []string{`"a\\b"`}, `a\b`},
		{"SurroundingSpace", []string{` "abc" `}, "abc"},
		{"ParameterIgnored", []string{`"abc";v=1`}, "abc"},
		{"BooleanParameter", []string{`"abc";flag`}, "abc"},
		{"EveryBareItemKind", []string{`"abc"; a=?1;b="x\"y";c=tok/x:y;d=:aGVsbG8=:;e=-1.5;f=*x;g=123456789012345`}, "abc"},
		{"LongestString", []string{`"` + long + `"`}, long},
		{"LongestEscapedString", []string{`"` + strings.Repeat(`\"`, MaxKeyLength) + `"`}, strings.Repeat(`"`, MaxKeyLength)},
		{"BareUUID", []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"BareBase64", []string{"dGVzdA+/=="}, "dGVzdA+/=="},
		{"LongestBare", []string{long}, long},

		{"NoValue", nil, ""},
		{"Empty", []string{""}, ""},
		{"OnlySpaces", []string{"   "}, ""},
		{"EmptyString", []string{`""`}, ""},
		{"Unterminated", []string{`"abc`}, ""},
		{"UnterminatedAfterEscape", []string{`"abc\`}, ""},
		{"UnknownEscape", []string{`"a\qb"`}, ""},
		{"ControlCharacter", []string{"\"a\x01b\""}, ""},
		{"Tab", []string{"\"a\tb\""}, ""},
		{"NonASCII", []string{`"café"`}, ""},
		{"TooLongString", []string{`"` + long + `k"`}, ""},
		{"TooLongBare", []string{long + "k"}, ""},
		{"TrailingGarbage", []string{`"abc" x`}, ""},
		{"EmptyParameter", []string{`"abc";`}, ""},
		{"UppercaseParameterKey", []string{`"abc";A=1`}, ""},
		{"ParameterWithoutValue", []string{`"abc";a=`}, ""},
		{"DecimalWithFourFractionDigits", []string{`"abc";a=1.2345`}, ""},
		{"IntegerWithSixteenDigits", []string{`"abc";a=1234567890123456`}, ""},
		{"BadBoolean", []string{`"abc";a=?2`}, ""},
		{"UnterminatedByteSequence", []string{`"abc";a=:aGVs`}, ""},
		{"InnerList", []string{`("abc")`}, ""},
		{"List", []string{`"abc", "def"`}, ""},
		{"TwoFieldLines", []string{`"abc"`, `"def"`}, ""},
		{"BareWithSpace", []string{"abc def"}, ""},
		{"BareWithParameter", []string{"abc;x=1"}, ""},
		{"BareWithComma", []string{"abc,def"}, ""},
		{"BareWithQuote", []string{`ab"c`}, ""},
		{"BareWithBackslash", []string{`ab\c`}, ""},
		{"BareNonASCII", []string{"café"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := ParseKey(c.values)
			if got != c.want || ok != (c.want != "") {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q", c.values, got, ok, c.want)
			}
		})
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b";x=1`, "abc", `"`, `"\`, `"abc";a=:x:`, `"abc";a=-1.123`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, ok := ParseKey([]string{v})
		if !ok {
			return
		}
		if len(key) == 0 || len(key) > MaxKeyLength {
			t.Fatalf("accepted a key of %d characters", len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("accepted a key with byte %#x", key[i])
			}
		}
	})
}

func TestStoreKey(t *testing.T) {
	a, b := StoreKey("key-1"), StoreKey("key-2")
	if a == b || a != StoreKey("key-1") {
		t.Fatal("StoreKey is not a function of the key")
	}
	for _, k := range []string{a, StoreKey(""), StoreKey(`"; DROP TABLE x; --`), StoreKey(strings.Repeat("é", 300))} {
		if len(k) != 76 || !strings.HasPrefix(k, "idem:sha256:") || strings.Trim(k[12:], "0123456789abcdef") != "" {
			t.Fatalf("StoreKey = %q, want idem:sha256: and 64 hex digits", k)
		}
	}
}

func TestFingerprints(t *testing.T) {
	r := httptest.NewRequest("POST", "/payments?x=1", nil)
	fp := DefaultFingerprint(r, []byte("body"))
	if !strings.HasPrefix(fp, "sha256:") || len(fp) != 71 {
		t.Fatalf("DefaultFingerprint = %q", fp)
	}
	if DefaultFingerprint(httptest.NewRequest("POST", "/payments?x=2", nil), []byte("body")) != fp {
		t.Fatal("the query string changed the default fingerprint")
	}
	for name, other := range map[string]string{
		"Method": DefaultFingerprint(httptest.NewRequest("PATCH", "/payments", nil), []byte("body")),
		"Path":   DefaultFingerprint(httptest.NewRequest("POST", "/refunds", nil), []byte("body")),
		"Body":   DefaultFingerprint(r, []byte("body2")),
		// The separators keep method, path and body apart.
		"Boundary": DefaultFingerprint(httptest.NewRequest("POST", "/paymentsb", nil), []byte("ody")),
	} {
		if other == fp {
			t.Errorf("another %s gave the same fingerprint", name)
		}
	}

	if got := storeFingerprint("v1:abc"); got != "v1:abc" {
		t.Fatalf("storeFingerprint kept a valid value as %q", got)
	}
	for _, bad := range []string{"", "has space", strings.Repeat("x", 257), "é"} {
		got := storeFingerprint(bad)
		if !strings.HasPrefix(got, "sha256:") || len(got) != 71 {
			t.Fatalf("storeFingerprint(%q) = %q, want a hash", bad, got)
		}
	}
	if storeFingerprint("has space") == storeFingerprint("has  space") {
		t.Fatal("hashed fingerprints collide")
	}
}
