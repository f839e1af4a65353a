package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/syncbuf"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestListenDisconnectLogsAndCounts kills the LISTEN connection of a Store
// opened through the registry with a logger and a meter provider: the
// backend logs the loss (Warn) and the reconnection (Info), and counts the
// disconnect in durable.postgres.listen.disconnects.
func TestListenDisconnectLogsAndCounts(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	var logs syncbuf.Buffer
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	store, err := durable.Open(ctx, srv.DSN()+"&schema="+srv.Schema(t),
		durable.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		durable.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var b *Backend
	if !store.As(&b) {
		t.Fatal("not a postgres backend")
	}
	ref := durable.KeyRef{Scope: "s", Key: "k"}
	if _, err := store.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = store.WaitKey(wctx, ref) }()
	pid := awaitListener(t, b, 0)
	if s := logs.String(); !strings.Contains(s, "level=DEBUG") || !strings.Contains(s, "LISTEN connection established") {
		t.Errorf("no Debug line for the first LISTEN connection: %q", s)
	}
	var killed bool
	if err := b.Pool().QueryRow(ctx, `SELECT pg_terminate_backend($1)`, int32(pid)).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend: %v, %v", killed, err)
	}
	awaitListener(t, b, pid)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "re-established") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	s := logs.String()
	if !strings.Contains(s, `level=WARN msg="durable/postgres: LISTEN connection lost`) {
		t.Errorf("no Warn line for the lost LISTEN connection: %q", s)
	}
	if !strings.Contains(s, `level=INFO msg="durable/postgres: LISTEN connection re-established"`) {
		t.Errorf("no Info line for the re-established LISTEN connection: %q", s)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var got int64 = -1
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "durable.postgres.listen.disconnects" {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					got = dp.Value
				}
			}
			if m.Name == "durable.operation.duration" {
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					if v, _ := dp.Attributes.Value("db.system.name"); v.AsString() != "postgresql" {
						t.Errorf("db.system.name = %q, want postgresql", v.AsString())
					}
				}
			}
		}
	}
	if got != 1 {
		t.Errorf("durable.postgres.listen.disconnects = %d, want 1", got)
	}
}

// TestMigrationStepsAreLogged: migrating up logs from and to at Info (once:
// a current schema logs nothing), forcing and migrating down log at Warn.
func TestMigrationStepsAreLogged(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	schema := srv.Schema(t)
	var buf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pool := newPool(t, srv.DSN())
	b, err := NewBackend(ctx, pool, Options{Schema: schema, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	want := fmt.Sprintf("level=INFO msg=\"durable/postgres: migrated\" schema=%s from=0 to=%d", schema, LatestVersion())
	if got := buf.String(); !strings.Contains(got, want) {
		t.Fatalf("log after migrating:\n%s\nwant a line with %s", got, want)
	}
	// Opening a current schema again logs nothing above Debug.
	before := buf.String()
	b2, err := NewBackend(ctx, pool, Options{Schema: schema, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if extra := strings.TrimPrefix(buf.String(), before); strings.Contains(extra, "level=INFO") || strings.Contains(extra, "level=WARN") {
		t.Errorf("opening a current schema logged:\n%s", extra)
	}
	if err := b.Force(ctx, int(LatestVersion())); err != nil {
		t.Fatal(err)
	}
	if err := b.Migrate(ctx, Down); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`level=WARN msg="durable/postgres: migration version forced"`, `level=WARN msg="durable/postgres: migrated down`} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, buf.String())
		}
	}
}
