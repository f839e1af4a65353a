package postgres

import (
	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"testing"
)

// TestDefaultPoolSize: a DSN without pool_max_conns gets DefaultPoolSize
// connections on every client library (pgxpool's own default, the greater
// of 4 and the CPU count, starved 16 concurrent callers), one with it gets
// what it says, and a pool_min_conns above the default raises the maximum
// with it.
func TestDefaultPoolSize(t *testing.T) {
	const base = "postgres://u@localhost/db?"
	for _, c := range []struct {
		params string
		want   int
	}{
		{"driver=pgx", DefaultPoolSize},
		{"driver=pgx-stdlib", DefaultPoolSize},
		{"driver=pq", DefaultPoolSize},
		{"driver=pgx&pool_max_conns=3", 3},
		{"driver=pgx-stdlib&pool_max_conns=40", 40},
		{"driver=pq&pool_max_conns=5", 5},
		{"driver=pgx&pool_min_conns=24", 24},
	} {
		cfg, err := parseDSN(base + c.params)
		if err != nil {
			t.Fatalf("%s: %v", c.params, err)
		}
		if cfg.client.Pool != nil && int(cfg.client.Pool.MaxConns) != c.want {
			t.Errorf("%s: pgx pool of %d, want %d", c.params, cfg.client.Pool.MaxConns, c.want)
		}
		if cfg.client.Library != pgclient.Pgx && cfg.client.SQLPool.MaxConns != c.want {
			t.Errorf("%s: database/sql pool of %d, want %d", c.params, cfg.client.SQLPool.MaxConns, c.want)
		}
	}
}
