package idempotency_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/middleware/idempotency"
)

// storedTimes sends one keyed request through the middleware over store
// and returns, measured from the store clock (which does not move), how
// long the claim was live for while the handler ran (LeaseUntil − now) and
// how long the stored response is kept (ExpiresAt − now).
func storedTimes(t *testing.T, store *durable.Store, clock *memory.ManualClock, opts idempotency.Options, key string) (claim, retain time.Duration) {
	t.Helper()
	mw, err := idempotency.New(store, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ref := durable.KeyRef{Key: idempotency.StoreKey(key)}
	ran := false
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran = true
		rec, err := store.GetKey(r.Context(), ref)
		if err != nil {
			t.Errorf("GetKey while the handler runs: %v", err)
			return
		}
		if rec.State != durable.KeyClaimed {
			t.Errorf("state while the handler runs = %v, want claimed", rec.State)
		}
		claim = rec.LeaseUntil.Sub(clock.Now())
		w.WriteHeader(http.StatusCreated)
	}))
	req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":1}`))
	req.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if !ran || w.Code != http.StatusCreated {
		t.Fatalf("handler ran %v, status %d; want a run and 201", ran, w.Code)
	}
	rec, err := store.GetKey(t.Context(), ref)
	if err != nil {
		t.Fatalf("GetKey after the request: %v", err)
	}
	if rec.State != durable.KeyCompleted {
		t.Fatalf("state after the request = %v, want completed", rec.State)
	}
	return claim, rec.ExpiresAt.Sub(clock.Now())
}

// TestDefaultsComeFromTheStore: a zero ClaimTTL and Retention mean the
// Store's (durable.WithDefaultTTLs, durable.WithKeyRetention), and explicit
// middleware options win over them.
func TestDefaultsComeFromTheStore(t *testing.T) {
	open := func(t *testing.T, opts ...durable.Option) (*durable.Store, *memory.ManualClock) {
		// A whole second: the store keeps times at a coarser granularity
		// than the system clock's.
		clock := memory.NewManualClock(time.Now().Truncate(time.Second))
		s, err := memory.Open(memory.Options{Clock: clock}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, clock
	}
	for _, c := range []struct {
		name                    string
		store                   []durable.Option
		opts                    idempotency.Options
		wantClaim, wantRetained time.Duration
	}{
		{"StoreDefaults", nil, idempotency.Options{}, durable.DefaultClaimTTL, durable.DefaultKeyRetention},
		{"StoreOptions", []durable.Option{durable.WithDefaultTTLs(5*time.Minute, time.Minute), durable.WithKeyRetention(2 * time.Hour)},
			idempotency.Options{}, 5 * time.Minute, 2 * time.Hour},
		{"OnlyTTL", []durable.Option{durable.WithDefaultTTLs(7*time.Minute, time.Minute)},
			idempotency.Options{}, 7 * time.Minute, durable.DefaultKeyRetention},
		{"OnlyRetention", []durable.Option{durable.WithKeyRetention(90 * time.Minute)},
			idempotency.Options{}, durable.DefaultClaimTTL, 90 * time.Minute},
		{"MiddlewareWins", []durable.Option{durable.WithDefaultTTLs(5*time.Minute, time.Minute), durable.WithKeyRetention(2 * time.Hour)},
			idempotency.Options{ClaimTTL: 90 * time.Second, Retention: 3 * time.Hour}, 90 * time.Second, 3 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, clock := open(t, c.store...)
			claim, retained := storedTimes(t, s, clock, c.opts, "key-"+c.name)
			if claim != c.wantClaim {
				t.Errorf("claim LeaseUntil - now = %v, want %v", claim, c.wantClaim)
			}
			if retained != c.wantRetained {
				t.Errorf("completed ExpiresAt - now = %v, want %v", retained, c.wantRetained)
			}
		})
	}

	// New checks the Store's default claim TTL as it checks ClaimTTL: it
	// must be at least the Store's minimum, and RenewEvery shorter than it
	// minus the tolerance.
	t.Run("Validation", func(t *testing.T) {
		s, err := memory.Open(memory.Options{Tolerance: 2 * time.Second}, durable.WithDefaultTTLs(2*time.Second, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := idempotency.New(s, idempotency.Options{}); !errors.Is(err, durable.ErrInvalidArgument) {
			t.Fatalf("New over a store whose default claim TTL (2s) is below its minimum (3s) = %v, want ErrInvalidArgument", err)
		}
		if _, err := idempotency.New(s, idempotency.Options{ClaimTTL: 5 * time.Second}); err != nil {
			t.Fatalf("New with an explicit ClaimTTL over that store: %v", err)
		}
		long, _ := open(t, durable.WithDefaultTTLs(10*time.Minute, time.Minute))
		short, _ := open(t)
		o := idempotency.Options{RenewEvery: 5 * time.Minute}
		if _, err := idempotency.New(long, o); err != nil {
			t.Fatalf("RenewEvery 5m with the store's default claim TTL of 10m: %v", err)
		}
		if _, err := idempotency.New(short, o); !errors.Is(err, durable.ErrInvalidArgument) {
			t.Fatalf("RenewEvery 5m with the store's default claim TTL of 1m = %v, want ErrInvalidArgument", err)
		}
	})
}
