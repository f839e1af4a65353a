package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/durable-go/durable/backends/memory"
)

// TestClient runs the -client mode against the API on a network that
// loses the first reply to every payment request after the payment was
// made (and its response stored): each payment is created once, its
// caller gets it from the replay of the second attempt, and asking again
// with a payment's key replays it.
func TestClient(t *testing.T) {
	tel, err := newTelemetry(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.shutdown(context.Background())
	store, err := memory.Open(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	h, err := newHandler(t.Context(), store, "memory://", slog.New(slog.DiscardHandler), tel, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		first := r.Method == http.MethodPost && !seen[key]
		seen[key] = true
		mu.Unlock()
		if !first {
			h.ServeHTTP(w, r)
			return
		}
		// The payment is made and its response stored; the reply is lost.
		h.ServeHTTP(httptest.NewRecorder(), r)
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
	}))
	defer srv.Close()

	// A new connection per attempt: net/http's Transport would otherwise
	// resend a request whose reused connection broke by itself, below the
	// kit's count of attempts.
	base := &http.Transport{DisableKeepAlives: true}
	var out strings.Builder
	all, err := runClient(t.Context(), newPaymentsClient(base), srv.URL, 3, 500, "eur", &out)
	t.Logf("client output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 {
		t.Fatalf("%d outcomes, want 3 payments and the replay of the first", len(all))
	}
	ids := map[string]bool{}
	for i, p := range all[:3] {
		if p.Status != http.StatusCreated || p.Attempts != 2 || !p.Replayed || p.Key == "" || p.Payment.Amount != 500 {
			t.Fatalf("payment %d: %+v", i, p)
		}
		ids[p.Payment.ID] = true
	}
	if len(ids) != 3 {
		t.Fatalf("payment ids %v", ids)
	}
	again := all[3]
	if again.Key != all[0].Key || again.Payment != all[0].Payment || !again.Replayed || again.Attempts != 1 {
		t.Fatalf("asking again with the first key: %+v; first %+v", again, all[0])
	}
	resp, err := http.Get(srv.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct {
		N int `json:"payments_created"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || s.N != 3 {
		t.Fatalf("payments created: %d (%v), want 3", s.N, err)
	}
	if !strings.Contains(out.String(), "after 2 attempt(s), replayed") {
		t.Fatalf("output %q", out.String())
	}
}
