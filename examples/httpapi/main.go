// Command httpapi is a tiny payments API whose POST /payments is protected
// by the idempotency middleware: a retried request with the same
// Idempotency-Key replays the first response instead of creating a second
// payment. See README.md for a curl walkthrough.
//
//	go run ./examples/httpapi                         # memory store
//	go run ./examples/httpapi -dsn 'postgres://…'     # Postgres store
//	go run ./examples/httpapi -dsn sqlite://httpapi.db # SQLite store
//	go run ./examples/httpapi -trace                  # also print spans to stderr
//	go run ./examples/httpapi -client -n 3            # post 3 payments to it through the client kit
//
// Where the payments go depends on the store, and with them how far the
// promise of "one payment per key" reaches (the log says which path runs):
//
//   - memory:// keeps them in a map, and the middleware takes its plain
//     path: the handler creates the payment, then the middleware stores the
//     response. If the process dies (or the store stays unreachable)
//     between the two, the claim expires and a retry creates a second
//     payment: the residual hazard the idempotency package describes.
//   - PostgreSQL and SQLite (stores that can complete a key in the
//     caller's transaction, durable.Store.CanCompleteInTx) keep them in a
//     table of the store's own database, httpapi_payments (on PostgreSQL in
//     the store's schema), created at startup. The middleware runs in
//     transactional mode: the handler inserts the payment row through the
//     request's transaction (idempotency.TxFrom), the middleware stores
//     the response in the same transaction and commits, and only then
//     sends it. The payment and its stored response commit together or not
//     at all, so the hazard is gone. On SQLite that transaction holds the
//     database's write lock while the handler runs: a retry meanwhile
//     waits for it (up to the middleware's StoreTimeout, 10 s, then 503)
//     and then replays the response, instead of getting 409.
//
// Endpoints:
//
//	POST /payments        {"amount": 500, "currency": "eur"} → 201 and the payment;
//	                      requires an Idempotency-Key header. With ?slow=1 the
//	                      handler takes -slow to finish, to show a request in flight.
//	GET  /payments/{id}   the payment
//	GET  /stats           {"payments_created": n}: how often the handler really
//	                      created a payment (on PostgreSQL and SQLite: the rows of
//	                      the table)
//	GET  /metrics         Prometheus metrics: the Store's durable_* series, the
//	                      middleware's durable_idempotency_responses_total and
//	                      otelhttp's http_server_* series
//
// Telemetry goes through the OpenTelemetry SDK (see telemetry.go): otelhttp
// starts a server span per request, and the Store's durable.* spans are its
// children.
//
// An X-Account header, if sent, names the tenant: keys of one account never
// replay for another.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/durable-go/durable"
	_ "github.com/durable-go/durable/backends/memory"
	_ "github.com/durable-go/durable/backends/postgres"
	_ "github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/middleware/idempotency"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	dsn := flag.String("dsn", "memory://", "durable store DSN (memory://, postgres://… or sqlite://…)")
	slow := flag.Duration("slow", 5*time.Second, "how long a POST /payments?slow=1 takes")
	traceSpans := flag.Bool("trace", false, "print finished spans to stderr as JSON")
	clientMode := flag.Bool("client", false, "post payments to the API at -addr through the client kit instead of serving (see client.go)")
	n := flag.Int("n", 3, "with -client: how many payments to post")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *clientMode {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if _, err := runClient(ctx, newPaymentsClient(nil), "http://"+*addr, *n, 500, "eur", os.Stdout); err != nil {
			log.Error("httpapi -client", "err", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*addr, *dsn, *slow, *traceSpans, log); err != nil {
		log.Error("httpapi", "err", err)
		os.Exit(1)
	}
}

func run(addr, dsn string, slow time.Duration, traceSpans bool, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var spans sdktrace.SpanExporter
	if traceSpans {
		var err error
		if spans, err = stdoutSpans(os.Stderr); err != nil {
			return err
		}
	}
	tel, err := newTelemetry(spans)
	if err != nil {
		return err
	}
	defer func() { _ = tel.shutdown(context.Background()) }()

	store, err := durable.Open(ctx, dsn, append(tel.storeOptions(), durable.WithLogger(log))...)
	if err != nil {
		return err
	}
	defer store.Close()
	handler, err := newHandler(ctx, store, dsn, log, tel, func(ctx context.Context) error {
		select {
		case <-time.After(slow):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil {
		return err
	}

	srv := &http.Server{Addr: addr, Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("httpapi listening", "addr", addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// newHandler returns the API over store, opened with dsn, instrumented
// through tel. wait is what a ?slow=1 request waits for. On a store that
// can complete keys in the caller's transaction (PostgreSQL, SQLite) it
// creates the payments table if needed and runs the middleware in
// transactional mode; on others (memory) it keeps payments in a map and
// runs the plain path.
func newHandler(ctx context.Context, store *durable.Store, dsn string, log *slog.Logger, tel *telemetry, wait func(context.Context) error) (http.Handler, error) {
	pays, transactional, err := newPayments(ctx, store, dsn)
	if err != nil {
		return nil, err
	}
	if transactional {
		log.Info("httpapi: transactional path: each payment row and its stored response commit in one transaction", "table", table)
	} else {
		log.Info("httpapi: plain path: payments kept in memory; the response is stored after the payment (the residual hazard)")
	}
	mw, err := idempotency.New(store, idempotency.Options{
		Required: true, // a payment without a key could be charged twice
		Scope: func(r *http.Request) durable.Scope {
			if acct := r.Header.Get("X-Account"); acct != "" {
				return durable.TenantScope(acct)
			}
			return ""
		},
		Transactional: transactional,
		Logger:        log,
		MeterProvider: tel.mp,
	})
	if err != nil {
		return nil, err
	}
	a := &api{payments: pays, wait: wait, log: log}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw(http.HandlerFunc(a.create)))
	mux.HandleFunc("GET /payments/{id}", a.get)
	mux.HandleFunc("GET /stats", a.stats)
	mux.Handle("GET /metrics", tel.metrics)
	return tel.wrap(mux), nil
}

type payment struct {
	ID       string `json:"id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

type api struct {
	wait     func(context.Context) error
	payments payments
	log      *slog.Logger
}

var currencyRE = regexp.MustCompile(`^[a-z]{3}$`)

func (a *api) create(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Amount <= 0 || !currencyRE.MatchString(in.Currency) {
		problem(w, http.StatusBadRequest, `Send {"amount": <positive integer>, "currency": "<3 lower-case letters>"}.`)
		return
	}
	if r.URL.Query().Get("slow") == "1" {
		if err := a.wait(r.Context()); err != nil {
			// The client went away: create nothing. The middleware
			// releases the key (and rolls its transaction back), so the
			// client's retry runs again.
			return
		}
	}
	p, err := a.payments.create(r, in.Amount, in.Currency)
	if err != nil {
		// A 5xx is not stored: the middleware rolls the transaction back
		// and releases the key, so a retry runs again.
		a.log.Error("httpapi: recording the payment failed", "err", err)
		problem(w, http.StatusInternalServerError, "The payment could not be recorded.")
		return
	}
	w.Header().Set("Location", "/payments/"+p.ID)
	writeJSON(w, http.StatusCreated, p)
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	p, ok, err := a.payments.get(r.Context(), r.PathValue("id"))
	switch {
	case err != nil:
		a.log.Error("httpapi: reading the payment failed", "err", err)
		problem(w, http.StatusServiceUnavailable, "The payment could not be read.")
	case !ok:
		problem(w, http.StatusNotFound, "No such payment.")
	default:
		writeJSON(w, http.StatusOK, p)
	}
}

func (a *api) stats(w http.ResponseWriter, r *http.Request) {
	n, err := a.payments.count(r.Context())
	if err != nil {
		a.log.Error("httpapi: counting the payments failed", "err", err)
		problem(w, http.StatusServiceUnavailable, "The payments could not be counted.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"payments_created": n})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) // a write error means the client is gone
}

func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail,
	})
}
