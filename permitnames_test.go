package durable_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/durable-go/durable"
	_ "github.com/durable-go/durable/backends/memory"
)

// TestPermitNamesAreValidatedOnce: a permit's name is accepted where a
// lease is passed back or looked up, in exactly the form PermitResource
// makes, and refused where a plain lease is granted.
func TestPermitNamesAreValidatedOnce(t *testing.T) {
	ctx := context.Background()
	s, err := durable.Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	_, err = s.AcquireLease(ctx, durable.LeaseRequest{Resource: "R#2", Owner: "o"})
	if !errorsIsInvalid(err) || !strings.Contains(err.Error(), "AcquirePermit") {
		t.Errorf("AcquireLease on a permit's name = %v, want InvalidArgument pointing to AcquirePermit", err)
	}
	p, err := s.AcquirePermit(ctx, durable.PermitRequest{Resource: "R", Owner: "o", Permits: 2, Value: "addr"})
	if err != nil || p.Resource != "R#1" || p.Value != "addr" {
		t.Fatalf("AcquirePermit = %+v, %v; want permit R#1 with its value", p, err)
	}
	if got, err := s.GetLease(ctx, "", "R#1"); err != nil || got != p {
		t.Errorf("GetLease(R#1) = %+v, %v; want %+v", got, err, p)
	}
	if _, err := s.ListLeases(ctx, durable.LeaseListQuery{After: "R#1"}); err != nil {
		t.Errorf("ListLeases after a permit's name: %v", err)
	}
	for _, bad := range []string{"R#0", "R#01", "R#1001", "R#1#2", "#1", "R#", "R#-1", "R#+1"} {
		if _, err := s.GetLease(ctx, "", bad); !errorsIsInvalid(err) {
			t.Errorf("GetLease(%q) = %v, want InvalidArgument", bad, err)
		}
	}
	for _, n := range []int{0, -1, 1001} {
		if _, err := s.AcquirePermit(ctx, durable.PermitRequest{Resource: "R", Owner: "o", Permits: n}); !errorsIsInvalid(err) {
			t.Errorf("AcquirePermit(Permits %d) = %v, want InvalidArgument", n, err)
		}
	}
	if _, err := s.AcquirePermit(ctx, durable.PermitRequest{Resource: "R#1", Owner: "o", Permits: 2}); !errorsIsInvalid(err) {
		t.Errorf("AcquirePermit on a permit's name = %v, want InvalidArgument", err)
	}
	if ok, err := s.DeleteRecord(ctx, durable.KindLease, "", "R#1"); err != nil || !ok {
		t.Errorf("DeleteRecord(R#1) = %v, %v; want true", ok, err)
	}
}

func errorsIsInvalid(err error) bool { return errors.Is(err, durable.ErrInvalidArgument) }
