package sqlite

import (
	"context"

	"github.com/durable-go/durable/internal/coalesce"
	"github.com/golang-migrate/migrate/v4"
)

// ExecOnWriterForTest runs a statement on b's write connection.
func ExecOnWriterForTest(b *Backend, stmt string) {
	if err := b.lockWriter(context.Background()); err != nil {
		panic(err)
	}
	defer b.unlockWriter()
	if _, err := b.wc.ExecContext(context.Background(), stmt); err != nil {
		panic(err)
	}
}

// WatchesForTest counts the lease watches registered through b and in the
// hub of b's file (every backend's).
func WatchesForTest(b *Backend) (own, hub int) {
	b.watchMu.Lock()
	own = len(b.watches)
	b.watchMu.Unlock()
	b.hub.mu.Lock()
	for _, m := range b.hub.watches {
		hub += len(m)
	}
	b.hub.mu.Unlock()
	return own, hub
}

// MigrateToForTest migrates b's database up or down to version, through
// the backend's migration runner.
func MigrateToForTest(b *Backend, version uint) error {
	ctx := context.Background()
	if err := b.lockWriter(ctx); err != nil {
		return err
	}
	defer b.unlockWriter()
	defer b.ws.reset()
	defer b.rs.reset()
	return b.runMigrate(ctx, func(m *migrate.Migrate) error { return m.Migrate(version) })
}

// SetWriteHooksForTest sets b's write test hooks (before b's first write):
// afterBody runs after each write's body, in its transaction (its error
// fails that write); flush sees each flush of the write batcher.
func SetWriteHooksForTest(b *Backend, afterBody func(ctx context.Context) error, flush func(ctx context.Context, n int)) {
	b.testAfterBody, b.testFlush = afterBody, flush
}

// WriteStatsForTest returns the counts of b's write batcher (zero when
// coalescing is off).
func WriteStatsForTest(b *Backend) coalesce.Stats { return b.writeStats() }
