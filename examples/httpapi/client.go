package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/durable-go/durable/middleware/idempotency/client"
)

// The -client mode: post payments to a running httpapi through the client
// kit (middleware/idempotency/client), which gives each POST an
// Idempotency-Key and retries it with that key on connection failures,
// 5xx, 429 and the 409 of a key in flight, so a payment is created once
// however often its request had to be sent:
//
//	go run ./examples/httpapi &
//	go run ./examples/httpapi -client -n 3

// paid is the outcome of one payment request.
type paid struct {
	Payment  payment
	Status   int
	Key      string
	Attempts int
	Replayed bool
}

// newPaymentsClient returns an http.Client whose Transport is the kit.
func newPaymentsClient(base http.RoundTripper) *http.Client {
	return &http.Client{Transport: &client.Transport{
		Base:   base,
		Budget: 30 * time.Second, // for the whole request, retries included
	}}
}

// pay posts one payment. key is "" for a new payment (the kit generates
// the key), or the key of an earlier one to ask for its outcome again.
func pay(ctx context.Context, hc *http.Client, baseURL string, amount int64, currency, key string) (paid, error) {
	body, err := json.Marshal(map[string]any{"amount": amount, "currency": currency})
	if err != nil {
		return paid{}, err
	}
	// A bytes.Reader body: http.NewRequest sets GetBody, so the kit can
	// send it again.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/payments", bytes.NewReader(body))
	if err != nil {
		return paid{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", strconv.Quote(key))
	}
	resp, err := hc.Do(req)
	if err != nil {
		var e *client.Error
		if errors.As(err, &e) {
			// No answer within the budget: the payment may or may not
			// exist. Retrying later with e.Key gets its outcome, never a
			// second payment.
			return paid{Key: e.Key, Attempts: e.Attempts}, err
		}
		return paid{}, err
	}
	defer resp.Body.Close()
	res, _ := client.ResultOf(resp)
	out := paid{Status: resp.StatusCode, Key: res.Key, Attempts: res.Attempts, Replayed: res.Replayed}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return out, err
	}
	if resp.StatusCode != http.StatusCreated {
		return out, fmt.Errorf("POST /payments: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return out, json.Unmarshal(b, &out.Payment)
}

// runClient posts n payments of amount to the API at baseURL, then asks
// for the first one again with its key (a replay), printing each outcome
// to w.
func runClient(ctx context.Context, hc *http.Client, baseURL string, n int, amount int64, currency string, w io.Writer) ([]paid, error) {
	var all []paid
	show := func(p paid) {
		replay := "ran"
		if p.Replayed {
			replay = "replayed"
		}
		fmt.Fprintf(w, "%s %d %s: %d after %d attempt(s), %s (key %s)\n",
			p.Payment.ID, p.Payment.Amount, p.Payment.Currency, p.Status, p.Attempts, replay, p.Key)
	}
	for range n {
		p, err := pay(ctx, hc, baseURL, amount, currency, "")
		if err != nil {
			if p.Key != "" {
				return all, fmt.Errorf("%w (retry with the key %s for its outcome)", err, p.Key)
			}
			return all, err
		}
		show(p)
		all = append(all, p)
	}
	if len(all) > 0 {
		// The same payment again, with its key: the stored outcome, not a
		// new payment.
		p, err := pay(ctx, hc, baseURL, amount, currency, all[0].Key)
		if err != nil {
			return all, err
		}
		show(p)
		all = append(all, p)
	}
	return all, nil
}
