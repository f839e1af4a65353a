package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/middleware/idempotency"
	"github.com/jackc/pgx/v5"
)

// payments is where the API records its payments: a map (memPayments) on a
// store without transactions the caller can share (memory://), or a table
// of the store's own database (sqlPayments) on PostgreSQL and SQLite, whose
// rows are written in the transaction that also stores the response.
type payments interface {
	// create records a payment of amount in currency for r, a POST
	// /payments request, and returns it.
	create(r *http.Request, amount int64, currency string) (payment, error)
	// get returns the payment id, or false if there is none.
	get(ctx context.Context, id string) (payment, bool, error)
	// count returns how many payments were created.
	count(ctx context.Context) (int, error)
}

// paymentID is the API's id of the payment numbered n.
func paymentID(n int64) string { return "pay_" + strconv.FormatInt(n, 10) }

// paymentNumber is the number of the payment id, or false if id is not a
// payment id.
func paymentNumber(id string) (int64, bool) {
	s, ok := strings.CutPrefix(id, "pay_")
	if !ok || s == "" || s[0] == '0' || s[0] == '+' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}

// newPayments returns the payments of the API on store, opened with dsn,
// and whether they are written in the request's transaction. On a store
// that can complete keys in the caller's transaction it creates the table
// if needed.
func newPayments(ctx context.Context, store *durable.Store, dsn string) (payments, bool, error) {
	if !store.CanCompleteInTx() {
		return &memPayments{byID: map[string]payment{}}, false, nil
	}
	d, err := dialectOf(dsn)
	if err != nil {
		return nil, false, err
	}
	p := &sqlPayments{store: store, d: d}
	if err := p.createTable(ctx); err != nil {
		return nil, false, err
	}
	return p, true, nil
}

// memPayments keeps the payments in a map, in this process only.
type memPayments struct {
	mu   sync.Mutex
	n    int64 // payments created
	byID map[string]payment
}

func (m *memPayments) create(_ *http.Request, amount int64, currency string) (payment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	p := payment{ID: paymentID(m.n), Amount: amount, Currency: currency, Status: "succeeded"}
	m.byID[p.ID] = p
	return p, nil
}

func (m *memPayments) get(_ context.Context, id string) (payment, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.byID[id]
	return p, ok, nil
}

func (m *memPayments) count(context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int(m.n), nil
}

// table is the payments' table.
const table = "httpapi_payments"

// dialect is the SQL of the payments' table on one database.
type dialect struct {
	create, insert, get, count string
}

// dialectOf returns the dialect for dsn's scheme. On PostgreSQL the table
// goes into the store's schema (the DSN's schema parameter), next to the
// store's own tables.
func dialectOf(dsn string) (dialect, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return dialect{}, errors.New("httpapi: the DSN is not a URL")
	}
	switch strings.ToLower(u.Scheme) {
	case "postgres", "postgresql":
		schema := u.Query().Get("schema")
		if schema == "" {
			schema = postgres.DefaultSchema
		}
		if !postgres.ValidSchema(schema) {
			return dialect{}, errors.New("httpapi: invalid schema parameter")
		}
		t := `"` + schema + `".` + table
		return dialect{
			create: `CREATE TABLE IF NOT EXISTS ` + t + ` (id bigserial PRIMARY KEY, amount bigint NOT NULL, currency text NOT NULL, status text NOT NULL)`,
			insert: `INSERT INTO ` + t + ` (amount, currency, status) VALUES ($1, $2, $3) RETURNING id`,
			get:    `SELECT amount, currency, status FROM ` + t + ` WHERE id = $1`,
			count:  `SELECT count(*) FROM ` + t,
		}, nil
	case "sqlite":
		return dialect{
			create: `CREATE TABLE IF NOT EXISTS ` + table + ` (id INTEGER PRIMARY KEY AUTOINCREMENT, amount INTEGER NOT NULL, currency TEXT NOT NULL, status TEXT NOT NULL)`,
			insert: `INSERT INTO ` + table + ` (amount, currency, status) VALUES (?, ?, ?) RETURNING id`,
			get:    `SELECT amount, currency, status FROM ` + table + ` WHERE id = ?`,
			count:  `SELECT count(*) FROM ` + table,
		}, nil
	}
	return dialect{}, fmt.Errorf("httpapi: no payments table for the %q scheme (PostgreSQL and SQLite have one)", u.Scheme)
}

// sqlPayments keeps the payments in a table of the store's database.
// create writes through the transaction the idempotency middleware began
// for the request, so a payment row commits together with the stored
// response, or not at all; the reads run in a transaction of their own,
// rolled back afterwards.
type sqlPayments struct {
	store *durable.Store
	d     dialect
}

// createTable creates the table if it does not exist.
func (s *sqlPayments) createTable(ctx context.Context) error {
	tx, err := s.store.BeginTx(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // after Commit: nothing
	if err := exec(ctx, tx.Raw(), s.d.create); err != nil {
		return fmt.Errorf("httpapi: creating the payments table: %w", err)
	}
	return tx.Commit(ctx)
}

func (s *sqlPayments) create(r *http.Request, amount int64, currency string) (payment, error) {
	tx, ok := idempotency.TxFrom(r.Context())
	if !ok {
		// Every POST /payments has a key (Options.Required), so the
		// middleware always began one.
		return payment{}, errors.New("httpapi: the request has no transaction")
	}
	var n int64
	if err := queryRow(r.Context(), tx.Raw(), s.d.insert, []any{amount, currency, "succeeded"}, &n); err != nil {
		return payment{}, err
	}
	return payment{ID: paymentID(n), Amount: amount, Currency: currency, Status: "succeeded"}, nil
}

func (s *sqlPayments) get(ctx context.Context, id string) (payment, bool, error) {
	n, ok := paymentNumber(id)
	if !ok {
		return payment{}, false, nil
	}
	p := payment{ID: id}
	err := s.read(ctx, s.d.get, []any{n}, &p.Amount, &p.Currency, &p.Status)
	switch {
	case errors.Is(err, sql.ErrNoRows): // pgx.ErrNoRows is one too
		return payment{}, false, nil
	case err != nil:
		return payment{}, false, err
	}
	return p, true, nil
}

func (s *sqlPayments) count(ctx context.Context) (int, error) {
	var n int
	err := s.read(ctx, s.d.count, nil, &n)
	return n, err
}

// read runs the query q in a transaction of its own, rolled back
// afterwards, and scans its one row into dest.
func (s *sqlPayments) read(ctx context.Context, q string, args []any, dest ...any) error {
	tx, err := s.store.BeginTx(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	return queryRow(ctx, tx.Raw(), q, args, dest...)
}

// exec runs q in tx, the client library's transaction: a pgx.Tx on
// PostgreSQL over pgx (the default), a *sql.Tx over lib/pq, pgx's stdlib
// and on SQLite.
func exec(ctx context.Context, tx any, q string, args ...any) error {
	switch tx := tx.(type) {
	case pgx.Tx:
		_, err := tx.Exec(ctx, q, args...)
		return err
	case *sql.Tx:
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	}
	return fmt.Errorf("httpapi: unexpected transaction type %T", tx)
}

// queryRow runs q in tx (see exec) and scans its first row into dest.
func queryRow(ctx context.Context, tx any, q string, args []any, dest ...any) error {
	switch tx := tx.(type) {
	case pgx.Tx:
		return tx.QueryRow(ctx, q, args...).Scan(dest...)
	case *sql.Tx:
		return tx.QueryRowContext(ctx, q, args...).Scan(dest...)
	}
	return fmt.Errorf("httpapi: unexpected transaction type %T", tx)
}
