package postgres

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testClock is a clock shared by every client of one harness: a fixed base
// plus an offset that Advance moves.
type testClock struct {
	base   time.Time
	offset atomic.Int64
}

func newTestClock() *testClock {
	return &testClock{base: time.Date(2031, 1, 2, 3, 4, 5, 678900000, time.UTC)}
}

func (c *testClock) now() time.Time          { return c.base.Add(time.Duration(c.offset.Load())) }
func (c *testClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// harness runs the conformance suite on a fresh schema. Every client has
// its own pool (like separate processes) and shares the schema and clock.
type harness struct {
	t      *testing.T
	srv    *pgtest.Server
	schema string
	clock  *testClock
	params string     // extra DSN parameters
	listen ListenMode // WaitKey's mode
}

func newHarness(ctx context.Context, t *testing.T) (conformance.Harness, error) {
	return newHarnessWith(ctx, t, "", ListenOn)
}

func newHarnessWith(ctx context.Context, t *testing.T, params string, listen ListenMode) (*harness, error) {
	srv := pgtest.Require(t)
	h := &harness{t: t, srv: srv, schema: srv.Schema(t), clock: newTestClock(), params: params, listen: listen}
	// Migrate once, so that Open only verifies.
	pool, err := pgxpool.New(ctx, srv.DSN())
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := Migrate(ctx, pool, h.schema, Up); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *harness) Open(ctx context.Context) (contract.Backend, error) {
	return openTestBackend(ctx, h.srv.DSN()+"&pool_max_conns=4"+h.params, Options{
		Schema: h.schema, Clock: h.clock.now, Migrate: MigrateVerify, Listen: h.listen,
	})
}

func (h *harness) Advance(d time.Duration)  { h.clock.advance(d) }
func (h *harness) Tolerance() time.Duration { return DefaultTolerance }
func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.Capabilities{Clock: true, Restart: true}
}
func (h *harness) Close() error { return nil } // the schema is dropped by pgtest

// openTestBackend opens a backend that owns a new pool on dsn.
func openTestBackend(ctx context.Context, dsn string, opts Options) (*Backend, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	b, err := New(ctx, pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	b.ownPool = true
	return b, nil
}

func TestConformance(t *testing.T) { conformance.Run(t, newHarness) }

// TestConformanceSimpleProtocol runs the suite as behind a transaction
// pooler: pgx's simple protocol (arguments interpolated client-side, no
// prepared statements) and no LISTEN. It also checks that the statements do
// not depend on the extended protocol, which the database/sql path of lib/pq
// will use differently.
func TestConformanceSimpleProtocol(t *testing.T) {
	conformance.Run(t, func(ctx context.Context, t *testing.T) (conformance.Harness, error) {
		return newHarnessWith(ctx, t, "&default_query_exec_mode=simple_protocol", ListenOff)
	})
}
