package durable_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestMain stops the throwaway PostgreSQL cluster that the Postgres tests of
// this package start on first use.
func TestMain(m *testing.M) { pgtest.Main(m) }

// openPostgres opens a backend on a fresh schema; tolerance is a DSN value.
// It reaches the raw backend as users holding a Store do, with Store.As.
func openPostgres(t *testing.T, schema, tolerance string) *postgres.Backend {
	t.Helper()
	srv := pgtest.Require(t)
	s, err := postgres.Open(context.Background(), srv.DSN()+"&schema="+schema+"&tolerance="+tolerance+"&pool_max_conns=4")
	if err != nil {
		t.Fatal(err)
	}
	var b *postgres.Backend
	if !s.As(&b) {
		t.Fatal("Store.As does not reach the *postgres.Backend")
	}
	return b
}

func TestRunWithLeasePostgresFunctionEndsBeforeTakeover(t *testing.T) {
	schema := pgtest.Require(t).Schema(t)
	testFunctionEndsBeforeTakeover(t, openPostgres(t, schema, "200ms"), openPostgres(t, schema, "200ms"))
}

func TestRunWithLeasePostgresRenewsFencesAndReleases(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Require(t).Schema(t)
	s, err := durable.New(openPostgres(t, schema, "200ms"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if tol := s.ClockTolerance(); tol != 200*time.Millisecond {
		t.Fatalf("ClockTolerance = %v", tol)
	}
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "job", Status: durable.StatusRunning, Snapshot: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	var token int64
	err = s.RunWithLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "w1", TTL: 1200 * time.Millisecond},
		durable.LeaseOptions{RenewEvery: 100 * time.Millisecond},
		func(fctx context.Context, l durable.Lease) error {
			token = l.Token
			// Outlive the TTL: only renewals keep the lease.
			for i := 0; i < 3; i++ {
				select {
				case <-fctx.Done():
					return context.Cause(fctx)
				case <-time.After(500 * time.Millisecond):
				}
				if _, err := s.Step(fctx, "", "job", durable.StepOptions{Fence: l.Fence()}, increment); err != nil {
					return err
				}
			}
			return nil
		})
	if err != nil {
		t.Fatalf("RunWithLease: %v", err)
	}
	w, err := s.GetWorkflow(ctx, "", "job")
	if err != nil || string(w.Snapshot) != "3" {
		t.Fatalf("workflow %+v %v: want three fenced steps", w, err)
	}
	if _, err := s.GetLease(ctx, "", "job"); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("lease not released: %v", err)
	}
	// The next holder gets a greater token.
	l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "job", Owner: "w2", TTL: 1200 * time.Millisecond})
	if err != nil || l.Token <= token {
		t.Fatalf("next lease %+v %v, want token > %d", l, err, token)
	}
}
