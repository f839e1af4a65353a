package idempotency_test

import (
	"errors"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/middleware/idempotency"
)

func TestNewRejectsInvalidOptions(t *testing.T) {
	store, err := memory.Open(memory.Options{Tolerance: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := idempotency.New(store, idempotency.Options{}); err != nil {
		t.Fatalf("zero Options: %v", err)
	}
	if _, err := idempotency.New(nil, idempotency.Options{}); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("nil store: %v", err)
	}
	for name, o := range map[string]idempotency.Options{
		"HeaderWithSpace":        {Header: "Idempotency Key"},
		"MethodWithSpace":        {Methods: []string{"PO ST"}},
		"TTLTooShort":            {ClaimTTL: 500 * time.Millisecond},
		"TTLTooLong":             {ClaimTTL: 25 * time.Hour},
		"TTLBelowStoreMinimum":   {ClaimTTL: 1400 * time.Millisecond}, // the store's tolerance is 500ms: minimum 1.5s
		"RenewNotShorterThanTTL": {ClaimTTL: 2 * time.Second, RenewEvery: 2 * time.Second},
		"RenewWithinTolerance":   {ClaimTTL: 2 * time.Second, RenewEvery: 1600 * time.Millisecond},
		"NegativeRenew":          {RenewEvery: -time.Second},
		"NegativeRetention":      {Retention: -time.Hour},
		"NegativeWait":           {WaitInFlight: -time.Second},
		"NegativeRetryAfter":     {RetryAfter: -time.Second},
		"NegativeStoreTimeout":   {StoreTimeout: -time.Second},
		"StoredHeaderWithColon":  {StoreHeaders: []string{"Location:"}},
		"NegativeMaxBody":        {MaxBody: -1},
		"NegativeMaxRequestBody": {MaxRequestBody: -1},
		"MaxBodyAboveStoreLimit": {MaxBody: durable.DefaultMaxBody + 1},
	} {
		t.Run(name, func(t *testing.T) {
			mw, err := idempotency.New(store, o)
			if !errors.Is(err, durable.ErrInvalidArgument) || mw != nil {
				t.Fatalf("New = %v; want ErrInvalidArgument", err)
			}
		})
	}
}

func TestMaxBodyDefaultsToTheStoreLimit(t *testing.T) {
	store, err := memory.Open(memory.Options{}, durable.WithMaxBodyBytes(1024))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// The default (1 MiB) would exceed this Store's limit; New lowers it
	// to the Store's, and rejects an explicit larger one.
	if _, err := idempotency.New(store, idempotency.Options{}); err != nil {
		t.Fatalf("zero Options on a small store: %v", err)
	}
	if _, err := idempotency.New(store, idempotency.Options{MaxBody: 2048}); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("MaxBody above the store's limit: %v", err)
	}
}
