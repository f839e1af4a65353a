package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

// TestClaimKeyAnswersWithoutLocking: the answers of ClaimKey that change
// nothing (the replay of a completed key, a live claim in flight, a key
// bound to another request, expired or not) are read-only: they take no
// row lock, so they return at once while another transaction holds the
// row locked, and they leave the row's version untouched. (Before, every
// one of them went through ON CONFLICT DO UPDATE, which locks the row: they
// queued behind the lock and committed a write.)
func TestClaimKeyAnswersWithoutLocking(t *testing.T) {
	b, clock, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	ref := func(k string) contract.KeyRef { return contract.KeyRef{Scope: "s", Key: k} }
	done := claimFor(t, b, "done")
	complete(t, b, done)
	claimFor(t, b, "abandoned")
	clock.advance(time.Minute) // "abandoned" (30 s) is now reclaimable by its own request
	claimFor(t, b, "busy")

	for _, c := range []struct {
		key, fp  string
		want     contract.ClaimKind
		conflict bool // want KeyConflict
	}{
		{"done", "fp", contract.ClaimCompleted, false},
		{"busy", "fp", contract.ClaimInFlight, false},
		{"done", "other", 0, true},
		{"busy", "other", 0, true},
		{"abandoned", "other", 0, true},
	} {
		// Another transaction holds the row locked.
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var before string
		if err := tx.QueryRow(ctx, `SELECT xmin::text || '/' || xmax::text FROM `+quoteIdent(b.schema)+`.idempotency_keys WHERE scope = 's' AND key = $1 FOR UPDATE`, c.key).Scan(&before); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		start := time.Now()
		got, err := b.ClaimKey(cctx, contract.ClaimRequest{KeyRef: ref(c.key), Fingerprint: c.fp, TTL: 30 * time.Second})
		cancel()
		switch {
		case c.conflict && contract.CodeOf(err) != contract.KeyConflict,
			!c.conflict && (err != nil || got.Kind != c.want):
			t.Errorf("ClaimKey(%s, %s) with the row locked elsewhere = %+v, %v after %v; want %v (conflict %v) at once",
				c.key, c.fp, got.Kind, err, time.Since(start), c.want, c.conflict)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		// Unlocked, the answer leaves the row as it was: no lock, no write.
		var xmin1, xmax1, xmin2, xmax2 string
		read := func(xmin, xmax *string) {
			if err := b.pool.QueryRow(ctx, `SELECT xmin::text, xmax::text FROM `+quoteIdent(b.schema)+`.idempotency_keys WHERE scope = 's' AND key = $1`, c.key).Scan(xmin, xmax); err != nil {
				t.Fatal(err)
			}
		}
		read(&xmin1, &xmax1)
		if _, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref(c.key), Fingerprint: c.fp, TTL: 30 * time.Second}); !c.conflict && err != nil {
			t.Fatal(err)
		}
		read(&xmin2, &xmax2)
		if xmin1 != xmin2 || xmax1 != xmax2 {
			t.Errorf("ClaimKey(%s, %s) changed the row's xmin/xmax from %s/%s to %s/%s: it locked or wrote it",
				c.key, c.fp, xmin1, xmax1, xmin2, xmax2)
		}
	}

	// The reclaim of the abandoned claim by its own request still takes it.
	got, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref("abandoned"), Fingerprint: "fp", TTL: 30 * time.Second})
	if err != nil || got.Kind != contract.ClaimReclaimed {
		t.Errorf("reclaim = %+v, %v; want Reclaimed", got, err)
	}
}
