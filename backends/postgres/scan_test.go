package postgres

import (
	"testing"
	"time"

	"github.com/durable-go/durable/backends/postgres/internal/pgclient"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestNullableScanTargets scans NULL and non-NULL values into the
// NULLable column types of pgclient (scan.go) on every client's path (pgx, lib/pq's
// prepared path, pgx's stdlib): a value is kept, NULL is not valid, and an
// infinite timestamp is an error as it is for a *time.Time.
func TestNullableScanTargets(t *testing.T) {
	srv := pgtest.Require(t)
	enablePQPrepare(t)
	at := time.Date(2026, 12, 5, 12, 30, 0, 123456000, time.UTC)
	for _, c := range dsnClients {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			b, err := c.open(ctx, srv.DSN()+"&pool_max_conns=1", Options{Schema: srv.Schema(t), Listen: ListenOff})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			var (
				t1, t2 = pgclient.NullTime{Time: time.Unix(1, 0), Valid: true}, pgclient.NullTime{Time: time.Unix(1, 0), Valid: true}
				n1, n2 = pgclient.NullInt64{Int64: 7, Valid: true}, pgclient.NullInt64{Int64: 7, Valid: true}
				s1, s2 = pgclient.NullString{String: "x", Valid: true}, pgclient.NullString{String: "x", Valid: true}
			)
			found, err := b.q.QueryRow(ctx, read, `SELECT $1::timestamptz, NULL::timestamptz, $2::int, NULL::int, $3::text, NULL::text`,
				[]any{at, int64(201), "ref"}, &t1, &t2, &n1, &n2, &s1, &s2)
			if err != nil || !found {
				t.Fatalf("found %v, %v", found, err)
			}
			if !t1.Valid || !t1.UTC().Equal(at) || t2.Valid || t2.UTC() != (time.Time{}) {
				t.Errorf("timestamps: %+v, %+v", t1, t2)
			}
			if n1 != (pgclient.NullInt64{Int64: 201, Valid: true}) || n2.Valid {
				t.Errorf("integers: %+v, %+v", n1, n2)
			}
			if s1 != (pgclient.NullString{String: "ref", Valid: true}) || s2.Valid {
				t.Errorf("texts: %+v, %+v", s1, s2)
			}
			if v, _ := t1.Value(); v != any(t1.Time) {
				t.Errorf("Value of a timestamp: %v", v)
			}
			if v, _ := t2.Value(); v != nil {
				t.Errorf("Value of NULL: %v", v)
			}
			if _, err := b.q.QueryRow(ctx, read, `SELECT 'infinity'::timestamptz WHERE $1::int = 1`, []any{int64(1)}, &t1); err == nil {
				t.Errorf("an infinite timestamp scanned: %+v", t1)
			}
		})
	}
}
