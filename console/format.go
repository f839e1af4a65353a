package console

import (
	"encoding/base64"
	"fmt"
	"html/template"
	"net/url"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/durable-go/durable"
)

// Truncation of payloads: a table cell shows cellBytes of a payload, a
// record's page pageBytes; the download has all of it.
const (
	cellBytes = 80
	pageBytes = 4096
)

// payload is a snapshot or body as a page shows it: text when it is valid
// UTF-8, else base64; cut to a bound. html/template escapes Text.
type payload struct {
	Text      string
	Binary    bool
	Size      int
	Truncated bool
}

func preview(b []byte, max int) payload {
	p := payload{Size: len(b)}
	if utf8.Valid(b) {
		if len(b) > max {
			b, p.Truncated = b[:max], true
			for len(b) > 0 && !utf8.Valid(b) { // do not cut a character in two
				b = b[:len(b)-1]
			}
		}
		p.Text = string(b)
		return p
	}
	p.Binary = true
	if len(b) > max*3/4 {
		b, p.Truncated = b[:max*3/4], true
	}
	p.Text = base64.StdEncoding.EncodeToString(b)
	return p
}

// cut shortens a string field (an owner, a lease value, a fingerprint) for
// a table cell, on a character boundary.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	b := []byte(s[:max])
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1]
	}
	return string(b) + "…"
}

// span is a duration for people: "3d4h", "2h5m", "4m10s", "12s", "850ms".
func span(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%dm", d/time.Hour, d%time.Hour/time.Minute)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%ds", d/time.Minute, d%time.Minute/time.Second)
	case d >= time.Second:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// recordQuery is the query string of a record's page (and of its delete
// and download links).
func recordQuery(sc durable.Scope, id string) string {
	v := url.Values{"id": {id}}
	if sc != "" {
		v.Set("scope", string(sc))
	}
	return v.Encode()
}

// sortedCounts returns m's entries sorted by name, for templates.
type nameCount struct {
	Name  string
	Count int
}

func sortedCounts(m map[string]int) []nameCount {
	out := make([]nameCount, 0, len(m))
	for k, v := range m {
		out = append(out, nameCount{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (h *Handler) funcs() template.FuncMap {
	return template.FuncMap{
		"preview": func(b []byte) payload { return preview(b, pageBytes) },
		"cell":    func(b []byte) payload { return preview(b, cellBytes) },
		"cut":     func(s string) string { return cut(s, cellBytes) },
		"age":     func(t, now time.Time) string { return span(now.Sub(t)) },
		"left": func(t, now time.Time) string {
			if !t.After(now) {
				return "expired " + span(now.Sub(t)) + " ago"
			}
			return span(t.Sub(now))
		},
		"after": func(t, now time.Time) bool { return t.After(now) },
		"when": func(t time.Time) string {
			if t.IsZero() {
				return "-"
			}
			return t.UTC().Format("2006-01-02 15:04:05.000Z")
		},
		"scopeText": func(sc durable.Scope) string {
			if sc == "" {
				return "(unscoped)"
			}
			return string(sc)
		},
		// q builds a query string from pairs: q "scope" .Scope "id" .ID;
		// an empty value is left out.
		"q": func(pairs ...any) template.URL {
			v := url.Values{}
			for i := 0; i+1 < len(pairs); i += 2 {
				if s := fmt.Sprint(pairs[i+1]); s != "" {
					v.Set(fmt.Sprint(pairs[i]), s)
				}
			}
			return template.URL(v.Encode())
		},
		"sorted": sortedCounts,
		"claimExpired": func(k durable.KeyRecord, now time.Time) bool {
			return k.State == durable.KeyClaimed && !k.LeaseUntil.After(now)
		},
	}
}
