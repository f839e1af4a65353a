package exactlyonce

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/faultproxy"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/middleware/idempotency"
)

// lossy loses the reply of the first ClaimKey of every key after the
// server applied it: the claim is stored under the caller's token and the
// caller sees ErrOutcomeUnknown, as when the connection breaks between the
// statement's arrival and its answer.
type lossy struct {
	contract.Backend
	mu   sync.Mutex
	seen map[string]bool
	lost atomic.Int64
}

func (l *lossy) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := l.Backend.ClaimKey(ctx, req)
	l.mu.Lock()
	first := !l.seen[req.Key]
	l.seen[req.Key] = true
	l.mu.Unlock()
	if err == nil && first && c.Kind.Owned() {
		l.lost.Add(1)
		return contract.Claim{}, &contract.Error{Code: contract.OutcomeUnknown, Msg: "reply lost (test)"}
	}
	return c, err
}

// TestLostClaimRepliesRecoverTheirOwnClaim: on PostgreSQL (every client
// library), every first claim of a key is applied but its reply lost. Do,
// and the middleware through it, retry the claim with the call's own token
// and get the claim back: every call ends completed, its function ran
// exactly once, and no call answers ErrInFlight or 409.
func TestLostClaimRepliesRecoverTheirOwnClaim(t *testing.T) {
	srv := pgtest.Require(t)
	for _, driver := range []string{"pgx", "pq", "pgx-stdlib"} {
		t.Run(driver, func(t *testing.T) {
			ctx := t.Context()
			s, err := postgres.Open(ctx, srv.DSN()+"&schema="+srv.Schema(t)+"&driver="+driver)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var b *postgres.Backend
			if !s.As(&b) {
				t.Fatal("no postgres backend behind the store")
			}
			l := &lossy{Backend: b, seen: map[string]bool{}}
			store, err := durable.New(l)
			if err != nil {
				t.Fatal(err)
			}

			const calls = 40
			var runs [calls]atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, calls)
			for i := range calls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := durable.ClaimRequest{KeyRef: durable.KeyRef{Key: fmt.Sprintf("do-%d", i)}, Fingerprint: "f"}
					res, err := store.Do(ctx, req, durable.DoOptions{}, func(context.Context) (durable.Outcome, error) {
						runs[i].Add(1)
						return durable.Outcome{Code: 200, Body: []byte("ok")}, nil
					})
					switch {
					case err != nil:
						errs <- fmt.Errorf("call %d: %w", i, err)
					case res.Replayed || res.Record.State != durable.KeyCompleted:
						errs <- fmt.Errorf("call %d: replayed %v, state %q: want its own run, completed", i, res.Replayed, res.Record.State)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			for i := range calls {
				if n := runs[i].Load(); n != 1 {
					t.Errorf("call %d ran its function %d times, want 1", i, n)
				}
			}
			if got := l.lost.Load(); got != calls {
				t.Errorf("%d claim replies lost, want %d (every first claim)", got, calls)
			}

			// The middleware: one request per key, each first claim's reply
			// lost; every request is answered by its handler (201), none
			// 409.
			var handled atomic.Int64
			mw, err := idempotency.New(store, idempotency.Options{Required: true})
			if err != nil {
				t.Fatal(err)
			}
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				handled.Add(1)
				w.WriteHeader(http.StatusCreated)
			}))
			statuses := map[int]int{}
			for i := range calls {
				req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":1}`))
				req.Header.Set("Idempotency-Key", fmt.Sprintf("\"http-%d\"", i))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				statuses[rec.Code]++
			}
			if statuses[http.StatusCreated] != calls || handled.Load() != calls {
				t.Errorf("statuses %v, handler ran %d times: want %d × 201 and %d runs", statuses, handled.Load(), calls, calls)
			}
			if l.lost.Load() != 2*calls {
				t.Errorf("%d claim replies lost in all, want %d", l.lost.Load(), 2*calls)
			}
		})
	}
}

// wireLoss loses the reply of the first ClaimKey of every key on the wire:
// before the call it gives the proxy a latency of lag and arms it; the
// chunk the client then sends to run the claim's statement schedules a
// cut of every connection 1.5 lag later, after the server has run the
// statement and while its reply is still held by the proxy. The margins on
// either side are half a lag (the server's run, the cut timer's lateness
// on a loaded machine): 150 ms once let a reply through under CI's load.
type wireLoss struct {
	contract.Backend
	proxy *faultproxy.Proxy
	lag   time.Duration
	armed atomic.Bool
	mu    sync.Mutex
	seen  map[string]bool
	// first records, per key, the first ClaimKey's error and when the
	// retry began.
	firstErr map[string]error
	retryAt  map[string]time.Time
}

func (w *wireLoss) Write(p []byte) (int, error) {
	// The chunk that runs the claim starts with its Bind message ('B'); a
	// pool's ping (a simple query, 'Q') or a statement's preparation
	// ('P') before it is let through, since losing those loses nothing
	// the server applied.
	if len(p) > 0 && p[0] == 'B' && w.armed.CompareAndSwap(true, false) {
		time.AfterFunc(w.lag*3/2, func() {
			w.proxy.Cut()
			w.proxy.SetLatency(0, 0)
		})
	}
	return len(p), nil
}

func (w *wireLoss) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	w.mu.Lock()
	first := !w.seen[req.Key]
	w.seen[req.Key] = true
	if !first {
		if _, ok := w.retryAt[req.Key]; !ok {
			w.retryAt[req.Key] = time.Now()
		}
	}
	w.mu.Unlock()
	if first {
		w.proxy.SetLatency(w.lag, 0)
		w.armed.Store(true)
	}
	c, err := w.Backend.ClaimKey(ctx, req)
	if first {
		w.mu.Lock()
		w.firstErr[req.Key] = err
		w.mu.Unlock()
	}
	return c, err
}

// TestLostClaimRepliesOnTheWire: the same as
// TestLostClaimRepliesRecoverTheirOwnClaim, with the reply lost on the
// wire (a proxy cuts the connection while it holds the server's answer):
// the client library reports a broken connection, the backend
// OutcomeUnknown, and Do's retry with the call's own token gets the claim
// the server stored back (its CreatedAt is before the retry began).
func TestLostClaimRepliesOnTheWire(t *testing.T) {
	srv := pgtest.Require(t)
	for _, driver := range []string{"pgx", "pq", "pgx-stdlib"} {
		t.Run(driver, func(t *testing.T) {
			ctx := t.Context()
			w := &wireLoss{lag: 300 * time.Millisecond, seen: map[string]bool{}, firstErr: map[string]error{}, retryAt: map[string]time.Time{}}
			host, port := srv.HostPort()
			p, err := faultproxy.New(fmt.Sprintf("%s:%d", host, port), faultproxy.Options{ClientBytes: func() io.Writer { return w }})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			w.proxy = p
			s, err := postgres.Open(ctx, p.DSN(srv.DSN())+"&schema="+srv.Schema(t)+"&driver="+driver)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var b *postgres.Backend
			if !s.As(&b) {
				t.Fatal("no postgres backend behind the store")
			}
			w.Backend = b
			store, err := durable.New(w)
			if err != nil {
				t.Fatal(err)
			}
			const calls = 6
			for i := range calls {
				key := fmt.Sprintf("wire-%d", i)
				runs := 0
				res, err := store.Do(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: key}, Fingerprint: "f"}, durable.DoOptions{},
					func(context.Context) (durable.Outcome, error) {
						runs++
						return durable.Outcome{Code: 200}, nil
					})
				if err != nil || runs != 1 || res.Replayed {
					t.Fatalf("%s: Do = %+v, %v (fn ran %d times); want its own single run", key, res, err, runs)
				}
				w.mu.Lock()
				first, retry := w.firstErr[key], w.retryAt[key]
				w.mu.Unlock()
				if durable.CodeOf(first) != contract.OutcomeUnknown {
					t.Fatalf("%s: the first claim's error = %v, want OutcomeUnknown (its reply lost on the wire)", key, first)
				}
				if retry.IsZero() || !res.Record.CreatedAt.Before(retry) {
					t.Errorf("%s: record created %v, the retry began %v: want the claim stored by the lost call, handed back", key, res.Record.CreatedAt, retry)
				}
			}
		})
	}
}
