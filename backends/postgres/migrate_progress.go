package postgres

import "context"

// MigratePhase is a step of a running migration, for progress reports.
type MigratePhase string

// The phases of Backend.Migrate and Backend.Force, in the order they
// happen. A migration that finds nothing to do reports none.
const (
	// PhaseLocking: the transaction has begun and takes the migration lock.
	PhaseLocking MigratePhase = "locking"
	// PhaseWaiting: another migrator holds the lock; the wait goes on
	// until it commits or rolls back, or the context ends.
	PhaseWaiting MigratePhase = "waiting for the migration lock"
	// PhaseApplying: one migration file runs (MigrateStep.Version). DDL
	// that rewrites a large table spends its time here.
	PhaseApplying MigratePhase = "applying"
	// PhaseCommitting: every step ran; the transaction commits.
	PhaseCommitting MigratePhase = "committing"
)

// MigrateStep is one progress report of a running migration.
type MigrateStep struct {
	Schema  string
	Phase   MigratePhase
	Version int // PhaseApplying: the version being applied (migrating down: the version being reverted to)
}

type migrateProgressKey struct{}

// WithMigrateProgress returns a context on which Backend.Migrate and
// Backend.Force report each phase of the migration to f, as it begins
// (the durable CLI shows them as a progress line). f is called on the
// migrating goroutine and must return quickly.
func WithMigrateProgress(ctx context.Context, f func(MigrateStep)) context.Context {
	return context.WithValue(ctx, migrateProgressKey{}, f)
}

// progressOf returns the progress function on ctx, or one that does
// nothing.
func progressOf(ctx context.Context, schema string) func(MigratePhase, int) {
	f, _ := ctx.Value(migrateProgressKey{}).(func(MigrateStep))
	if f == nil {
		return func(MigratePhase, int) {}
	}
	return func(p MigratePhase, v int) { f(MigrateStep{Schema: schema, Phase: p, Version: v}) }
}
