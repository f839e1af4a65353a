package idempotency_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/internal/idemcases"
	"github.com/durable-go/durable/middleware/idempotency"
)

// httpAdapter runs the shared behaviour table (internal/idemcases) against
// the middleware over a loopback HTTP server and the memory backend.
type httpAdapter struct{}

func (httpAdapter) Start(t *testing.T, cfg idemcases.Config, h *idemcases.Handler) idemcases.Client {
	store, err := durable.New(memory.NewStorage(memory.Options{}).Backend())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	opts := idempotency.Options{Required: cfg.Required}
	if cfg.WaitInFlight {
		opts.WaitInFlight = time.Minute
	}
	mw, err := idempotency.New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		a, v := h.Run(r.Context())
		w.Header().Set("Content-Type", "text/plain")
		switch a {
		case idemcases.Succeed:
			w.Write([]byte(v))
		case idemcases.FailCaller:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(v))
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})))
	t.Cleanup(srv.Close)
	return &httpClient{url: srv.URL, c: srv.Client()}
}

type httpClient struct {
	url string
	c   *http.Client
}

func (c *httpClient) Send(ctx context.Context, key, variant string) idemcases.Reply {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/pay", strings.NewReader(variant))
	if err != nil {
		return idemcases.Reply{Kind: idemcases.Other, Value: err.Error()}
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
	}
	resp, err := c.c.Do(req)
	if err != nil {
		return idemcases.Reply{Kind: idemcases.Other, Value: err.Error()}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	r := idemcases.Reply{Replayed: resp.Header.Get(idempotency.ReplayedHeader) == "true"}
	switch resp.StatusCode {
	case http.StatusOK:
		r.Kind, r.Value = idemcases.Success, string(body)
	case http.StatusNotFound:
		r.Kind, r.Value = idemcases.CallerFault, string(body)
	case http.StatusServiceUnavailable:
		r.Kind = idemcases.Transient
	case http.StatusUnprocessableEntity:
		r.Kind = idemcases.Reused
	case http.StatusConflict:
		r.Kind = idemcases.InFlight
	case http.StatusBadRequest:
		r.Kind = idemcases.KeyRejected
	default:
		r.Kind, r.Value = idemcases.Other, resp.Status
	}
	return r
}

// TestBehaviourTable runs the behaviour table the gRPC interceptor passes
// too (middleware/grpcidem's TestBehaviourTable).
func TestBehaviourTable(t *testing.T) {
	idemcases.Run(t, httpAdapter{})
}
