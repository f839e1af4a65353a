package client

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"7", 7 * time.Second, true},
		{" 3 ", 3 * time.Second, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"Friday, 02-Jan-26 03:05:05 GMT", time.Minute, true}, // RFC 850
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
	}
	for _, c := range cases {
		got, ok := retryAfter(c.v, now)
		if got != c.want || ok != c.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", c.v, got, ok, c.want, c.ok)
		}
	}
}

func TestRetryStatusHonoursRetryAfter(t *testing.T) {
	tr := &Transport{MaxRetryAfter: 10 * time.Second}
	for _, c := range []struct {
		code  int
		ra    string
		want  time.Duration
		again bool
	}{
		{503, "4", 4 * time.Second, true},
		{429, "60", 10 * time.Second, true}, // capped
		{503, "", 0, true},                  // the backoff
		{500, "2", 2 * time.Second, true},
		{400, "2", 0, false},
		{422, "", 0, false},
	} {
		resp := &http.Response{StatusCode: c.code, Header: http.Header{}}
		if c.ra != "" {
			resp.Header.Set("Retry-After", c.ra)
		}
		got, again := tr.retryStatus(resp)
		if got != c.want || again != c.again {
			t.Errorf("%d Retry-After %q: %v, %v; want %v, %v", c.code, c.ra, got, again, c.want, c.again)
		}
	}
}

func TestBackoff(t *testing.T) {
	tr := &Transport{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	for n, cap := range []time.Duration{100, 200, 400, 800, 1000, 1000, 1000} {
		cap *= time.Millisecond
		for range 200 {
			if d := tr.backoff(n + 1); d < cap/2 || d > cap {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n+1, d, cap/2, cap)
			}
		}
	}
	// Jittered: not always the same.
	seen := map[time.Duration]bool{}
	for range 50 {
		seen[tr.backoff(3)] = true
	}
	if len(seen) < 2 {
		t.Fatal("backoff is not jittered")
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"abc":     `"abc"`,
		`a"b\c`:   `"a\"b\\c"`,
		"a b":     `"a b"`,
		"":        "",
		"tab\tx":  "",
		"naïve":   "",
		"~!#$%&'": `"~!#$%&'"`,
	} {
		got, ok := quote(in)
		if got != want || ok != (want != "") {
			t.Errorf("quote(%q) = %q, %v", in, got, ok)
		}
		if ok && unquote(got) != in {
			t.Errorf("unquote(%q) = %q", got, unquote(got))
		}
	}
	if s, ok := quote(string(make([]byte, 256))); ok {
		t.Errorf("a 256-byte key: %q", s)
	}
}
