package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/durable-go/durable"
	_ "github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/middleware/idempotency"
)

func Example() {
	store, _ := durable.Open(context.Background(), "memory://")
	defer store.Close()
	mw, err := idempotency.New(store, idempotency.Options{Required: true})
	if err != nil {
		panic(err)
	}

	charges := 0
	handler := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++ // the side effect that must happen once per key
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":"ch_%d"}`, charges)
	}))

	send := func(key, body string) {
		req := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Printf("%d replayed=%q %s: %s\n", rec.Code, rec.Header().Get("Idempotent-Replayed"),
			rec.Header().Get("Content-Type"), strings.TrimSpace(rec.Body.String()))
	}
	send(`"order-1"`, `{"amount":500}`) // runs the handler
	send(`"order-1"`, `{"amount":500}`) // a retry: replayed
	send(`"order-1"`, `{"amount":900}`) // the key reused for another request
	send("", `{"amount":500}`)          // no key
	fmt.Println("charges:", charges)
	// Output:
	// 201 replayed="" application/json: {"charge":"ch_1"}
	// 201 replayed="true" application/json: {"charge":"ch_1"}
	// 422 replayed="" application/problem+json: {"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"The idempotency key was already used for a different request."}
	// 400 replayed="" application/problem+json: {"type":"about:blank","title":"Bad Request","status":400,"detail":"This request requires an idempotency key header."}
	// charges: 1
}
