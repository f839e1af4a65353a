package memory

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/durable-go/durable/contract"
)

// TestKeyRecordIsOneObject checks what keyRec promises: a completed key is
// one object beside its map slot, and neither the map nor the listing
// indexes (built here by a listing while the keys are claimed) keep the
// caller's strings or a record's earlier data alive.
func TestKeyRecordIsOneObject(t *testing.T) {
	const n = 20000
	ctx := context.Background()
	s := NewStorage(Options{})
	b := s.Backend()
	out := contract.Outcome{Code: 201, Body: []byte(`{"id":"pay_1"}`), Header: map[string][]string{"Location": {"/payments/pay_1"}}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	claims := make([]contract.Claim, n)
	for i := range n {
		// Fresh strings per key, as a caller's would be.
		req := contract.ClaimRequest{
			KeyRef:      contract.KeyRef{Scope: contract.Scope(fmt.Sprintf("tenant-%d", i%3)), Key: fmt.Sprintf("key-%08d", i)},
			Fingerprint: fmt.Sprintf("sha256:%064d", i), WorkflowID: fmt.Sprintf("wf-%d", i), TTL: time.Minute,
		}
		c, err := b.ClaimKey(ctx, req)
		if err != nil || c.Kind != contract.ClaimNew {
			t.Fatal(c.Kind, err)
		}
		claims[i] = c
	}
	for scope := range 3 {
		if _, err := b.ListKeys(ctx, contract.KeyListQuery{Scope: contract.Scope(fmt.Sprintf("tenant-%d", scope))}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ListKeys(ctx, contract.KeyListQuery{Scope: contract.Scope(fmt.Sprintf("tenant-%d", scope)), State: contract.KeyClaimed}); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range claims {
		ref := contract.KeyRef{Scope: contract.Scope(fmt.Sprintf("tenant-%d", i%3)), Key: fmt.Sprintf("key-%08d", i)}
		if _, err := b.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: c.Token, Outcome: out, Retain: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	claims = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	// The map's tables and the indexes' chunks add a few objects per
	// thousand keys; the records before keyRec were five objects a key.
	if perKey := float64(after.HeapObjects-before.HeapObjects) / n; perKey > 1.1 {
		t.Errorf("%.2f heap objects per completed key, want 1 (and a little for the map and indexes)", perKey)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, r := range s.keys {
		data := uintptr(unsafe.Pointer(unsafe.StringData(r.data)))
		within := func(s string) bool {
			p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
			return p >= data && p < data+uintptr(len(r.data))
		}
		if !within(k.id) || !within(string(k.scope)) {
			t.Fatalf("the map key of %q is not in its record's data", k.id)
		}
	}
	for name, set := range map[string]indexSet[contract.Scope, struct{}]{"keys": s.idx.keys, "claimed keys": s.idx.keysClaimed} {
		for g, x := range set.m {
			for _, c := range x.chunks {
				for _, e := range c {
					id := e.id
					r := s.keys[recKey{g, id}]
					if unsafe.StringData(id) != unsafe.StringData(r.key()) {
						t.Fatalf("the index of %s holds %q apart from its record's data", name, id)
					}
				}
			}
		}
	}
}

// TestKeyRecordRoundTrip checks that a record keeps each string and time
// as given, including empty strings and zero times.
func TestKeyRecordRoundTrip(t *testing.T) {
	r := newKeyRec("", "k", "fp", "", "tok", nil)
	if r.scope() != "" || r.key() != "k" || r.fingerprint() != "fp" || r.workflowID() != "" || r.token() != "tok" || r.out() != "" {
		t.Fatalf("strings: %+v", r)
	}
	rec := r.record(time.Time{}, true)
	if !rec.LeaseUntil.IsZero() || !rec.CreatedAt.IsZero() || !rec.CompletedAt.IsZero() || !rec.ExpiresAt.IsZero() || !rec.ForgetAt.IsZero() || rec.Outcome != nil || rec.State != contract.KeyClaimed {
		t.Fatalf("a new record: %+v", rec)
	}
	when := time.Date(2031, 1, 2, 3, 4, 5, 678901000, time.UTC)
	o := &contract.Outcome{Code: 200, Body: []byte("b")}
	c := r.withData("tok2", o)
	c.completed = true
	c.completedAt, c.expiresAt, c.until = micros(when), micros(when.Add(time.Hour)), micros(when.Add(2*time.Hour))
	rec = c.record(when, true)
	if rec.Key != "k" || rec.Fingerprint != "fp" || c.token() != "tok2" || rec.State != contract.KeyCompleted ||
		rec.CompletedAt != when || rec.ExpiresAt != when.Add(time.Hour) || rec.ForgetAt != when.Add(2*time.Hour) || !rec.LeaseUntil.IsZero() ||
		rec.Outcome == nil || rec.Outcome.Code != 200 || string(rec.Outcome.Body) != "b" {
		t.Fatalf("a completed record: %+v", rec)
	}
	if rec := c.record(when, false); rec.Outcome != nil {
		t.Fatal("record(false) unpacked the outcome")
	}
	// Past ExpiresAt the record is its tombstone, before and after its
	// payload is dropped: the code alone, never the body.
	later := when.Add(time.Hour)
	for _, x := range []keyRec{c, c.withoutPayload()} {
		rec = x.record(later, true)
		if rec.State != contract.KeyExpired || rec.Outcome == nil || rec.Outcome.Code != 200 || rec.Outcome.Body != nil ||
			rec.ForgetAt != when.Add(2*time.Hour) || x.token() != "tok2" || rec.Fingerprint != "fp" {
			t.Fatalf("a tombstone: %+v", rec)
		}
	}
	if d := c.withoutPayload(); c.out().dropped() || !d.out().dropped() {
		t.Fatal("dropped marks the wrong record")
	}
	if !c.live(later) || c.live(when.Add(2*time.Hour)) {
		t.Fatal("live ignores ForgetAt")
	}
}
