package idempotency

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"

	"github.com/durable-go/durable/backends/memory"
)

// TestRecorderHeaders checks the stored headers' snapshot at WriteHeader
// and their restoration when the buffered response is sent, on responses
// with few headers and with more headers than are stored (the recorder
// walks whichever is shorter).
func TestRecorderHeaders(t *testing.T) {
	s, err := memory.Open(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cfg, err := newConfig(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, extra := range []int{0, 3, len(DefaultStoreHeaders) + 5} {
		t.Run(strconv.Itoa(extra)+"OtherHeaders", func(t *testing.T) {
			w := httptest.NewRecorder()
			w.Header().Set("X-Outer", "outer") // set by an outer middleware
			var x exchange
			rec := &x.rec
			rec.init(w, cfg)
			h := rec.Header()
			for i := range extra {
				h.Set("X-Other-"+strconv.Itoa(i), "o")
			}
			h.Set("Content-Type", "application/json")
			h["Link"] = []string{"</a>; rel=a", "</b>; rel=b"}
			h["Vary"] = nil // present without values
			h.Set("Location", "/before")
			h.Set("Set-Cookie", "a=1") // not stored
			rec.WriteHeader(http.StatusCreated)
			rec.Write([]byte("body"))

			// Too late: net/http ignores these, and so must the stored and
			// the sent response.
			h.Set("Location", "/after")
			h.Set("ETag", `"late"`)
			h.Del("Content-Type")
			h["Link"] = append(h["Link"], "</c>; rel=c")
			h.Set("X-Late", "late") // not a stored header: left as it is

			out, reason := rec.outcome(false)
			if reason != "" {
				t.Fatalf("not stored: %s", reason)
			}
			want := map[string][]string{
				"Content-Type": {"application/json"},
				"Link":         {"</a>; rel=a", "</b>; rel=b"},
				"Vary":         nil,
				"Location":     {"/before"},
			}
			if !reflect.DeepEqual(out.Header, want) {
				t.Fatalf("stored headers %v, want %v", out.Header, want)
			}
			x.finish()
			got := w.Result().Header
			for k, vs := range want {
				if k == "Vary" {
					if _, ok := got[k]; !ok {
						t.Errorf("sent headers lack Vary")
					}
					continue
				}
				if !reflect.DeepEqual(got[k], vs) {
					t.Errorf("sent %s = %q, want %q", k, got[k], vs)
				}
			}
			if _, ok := got["Etag"]; ok {
				t.Errorf("sent an ETag added after WriteHeader")
			}
			if got.Get("X-Outer") != "outer" || got.Get("Set-Cookie") != "a=1" || got.Get("Content-Length") != "4" {
				t.Errorf("sent headers %v, want the outer, unstored and length headers kept", got)
			}
			if extra > 0 && got.Get("X-Other-0") != "o" {
				t.Errorf("sent headers %v, want the other headers kept", got)
			}
		})
	}
}
