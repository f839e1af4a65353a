package postgres

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/faultproxy"
	"github.com/durable-go/durable/internal/pgtest"
)

// newFreezer starts a fault proxy to target, closed when t ends. Its
// Freeze stops moving bytes while keeping every connection open: the
// server looks alive to TCP but never answers.
func newFreezer(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target, faultproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestHungServerDoesNotHangCallers freezes the connection to the server
// (TCP stays up, no bytes flow) and checks that a write through the Store,
// whose context has no deadline, returns within the Store's operation
// timeout with OutcomeUnknown, on every client library.
func TestHungServerDoesNotHangCallers(t *testing.T) {
	srv := pgtest.Require(t)
	host, port := srv.HostPort()
	for _, tc := range dsnClients {
		t.Run(tc.name, func(t *testing.T) {
			schema := srv.Schema(t)
			fz := newFreezer(t, net.JoinHostPort(host, strconv.Itoa(port)))
			b, err := tc.open(context.Background(), fz.DSN(srv.DSN())+"&pool_max_conns=2", Options{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			s, err := durable.New(b, durable.WithOperationTimeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			if _, err := s.GetKey(ctx, durable.KeyRef{Key: "warm"}); !errors.Is(err, durable.ErrNotFound) {
				t.Fatalf("GetKey before the freeze: %v", err)
			}
			fz.Freeze()
			start := time.Now()
			_, err = s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k"}, Fingerprint: "f"})
			el := time.Since(start)
			if !errors.Is(err, durable.ErrOutcomeUnknown) && !errors.Is(err, durable.ErrUnavailable) {
				t.Fatalf("ClaimKey on a frozen server = %v, want OutcomeUnknown or Unavailable", err)
			}
			if el > 5*time.Second {
				t.Fatalf("ClaimKey took %v with a 500ms operation timeout", el)
			}
			t.Logf("ClaimKey on a frozen server: %v after %v", err, el.Round(time.Millisecond))
			fz.Thaw()
		})
	}
}

// TestFrozenServerDuringConnectDoesNotHangCallers: a call that must open a
// new connection to a frozen server returns when its context ends. lib/pq
// honours the context only while dialing, not during the startup and
// authentication exchange, so it used to wait for connect_timeout (10 s).
func TestFrozenServerDuringConnectDoesNotHangCallers(t *testing.T) {
	srv := pgtest.Require(t)
	host, port := srv.HostPort()
	for _, tc := range dsnClients {
		t.Run(tc.name, func(t *testing.T) {
			schema := srv.Schema(t)
			fz := newFreezer(t, net.JoinHostPort(host, strconv.Itoa(port)))
			b, err := tc.open(context.Background(), fz.DSN(srv.DSN())+"&pool_max_conns=1", Options{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			s, err := durable.New(b, durable.WithOperationTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			fz.Freeze()
			defer fz.Thaw()
			// The first call is cut on the pooled connection; the ones after
			// it must connect anew, to the frozen server.
			for i := range 3 {
				start := time.Now()
				_, err := s.GetLease(context.Background(), "", "r")
				if el := time.Since(start); el > 3*time.Second {
					t.Errorf("call %d returned after %v: %v", i, el, err)
				}
				if !errors.Is(err, durable.ErrUnavailable) {
					t.Errorf("call %d = %v, want Unavailable", i, err)
				}
			}
		})
	}
}

// TestFrozenServerPreparedLibPQ: on lib/pq, a statement the connection has
// prepared waits, after its context ends, for its cancel request to end
// (lib/pq's statement watchCancel), and lib/pq's dial sets a deadline of
// connect_timeout on the cancel request's connection. On a frozen server
// the cancel request's bound must still hold, so that the caller returns
// within the watchdog's grace of its context's end, not connect_timeout
// (here 10 s) later.
func TestFrozenServerPreparedLibPQ(t *testing.T) {
	enablePQPrepare(t)
	srv := pgtest.Require(t)
	host, port := srv.HostPort()
	schema := srv.Schema(t)
	fz := newFreezer(t, net.JoinHostPort(host, strconv.Itoa(port)))
	b, err := tcPQ.open(t.Context(), fz.DSN(srv.DSN())+"&pool_max_conns=1&connect_timeout=10", Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !pgclient.ModeOf(b.q).Prepare {
		t.Fatal("lib/pq's prepared statements are off")
	}
	claim := func(ctx context.Context, key string) error {
		_, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: key}, Fingerprint: "f", TTL: 30 * time.Second})
		return err
	}
	// Prepare ClaimKey on the pool's one connection.
	for _, k := range []string{"warm-1", "warm-2"} {
		if err := claim(t.Context(), k); err != nil {
			t.Fatal(err)
		}
	}
	fz.Freeze()
	defer fz.Thaw()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = claim(ctx, "k")
	el := time.Since(start)
	if err == nil {
		t.Fatal("ClaimKey on a frozen server succeeded")
	}
	// The context ends at 200 ms, the watchdog cuts the statement a second
	// later; 10 s (connect_timeout) is what the unbounded cancel request
	// took.
	if el > 4*time.Second {
		t.Fatalf("ClaimKey on a frozen server returned %v after %v: past its context's end plus the watchdog's grace", err, el)
	}
	t.Logf("ClaimKey on a frozen server: %v after %v", err, el.Round(time.Millisecond))
}
