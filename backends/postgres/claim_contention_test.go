package postgres

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestClaimKeyNeverGivesUpUnderContention: claims racing releases and
// reclaims of one key, from many goroutines, on every client library: every
// ClaimKey ends in an answer (new, reclaimed, in flight, completed, or a
// key conflict for the other request), never Unavailable. Claims last a
// few milliseconds without a tolerance, so holders that do not release
// are reclaimed; the database's clock judges expiry. Bounded by a number
// of rounds and by time.
func TestClaimKeyNeverGivesUpUnderContention(t *testing.T) {
	srv := pgtest.Require(t)
	for _, tc := range dsnClients {
		for _, rounds := range []int{optimisticClaims, 1} {
			t.Run(fmt.Sprintf("%s/optimistic=%d", tc.name, rounds), func(t *testing.T) {
				ctx := t.Context()
				schema := srv.Schema(t)
				if err := migratePool(ctx, newPool(t, srv.DSN()), schema, Up); err != nil {
					t.Fatal(err)
				}
				b, err := tc.open(ctx, srv.DSN()+"&pool_max_conns=16", Options{Schema: schema, Migrate: MigrateVerify, Listen: ListenOff, Tolerance: -1})
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				b.claimRounds = rounds
				stressClaims(t, b)
			})
		}
	}
}

// TestClaimKeyLockedForm runs ClaimKey's fallback directly on each kind of
// stored key: it answers as the optimistic form does.
func TestClaimKeyLockedForm(t *testing.T) {
	b, clock, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	req := func(key, fp, token string) contract.ClaimRequest {
		return contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: key}, Fingerprint: fp, TTL: 10 * time.Second, Token: token}
	}
	locked := func(r contract.ClaimRequest) (contract.Claim, error) {
		token := r.Token
		if token == "" {
			token = newToken()
		}
		return b.claimLocked(ctx, r, b.claimKeyParams(r, token))
	}
	c, err := locked(req("a", "fp", ""))
	if err != nil || c.Kind != contract.ClaimNew || len(c.Token) != 32 {
		t.Fatalf("locked claim of a free key = %+v, %v", c, err)
	}
	if got, err := b.GetKey(ctx, c.Record.KeyRef); err != nil || got.LeaseUntil != c.Record.LeaseUntil || got.CreatedAt != c.Record.CreatedAt {
		t.Errorf("the stored claim %+v, %v; the answer %+v", got, err, c.Record)
	}
	if c, err := locked(req("a", "fp", "")); err != nil || c.Kind != contract.ClaimInFlight {
		t.Errorf("locked claim of a live claim = %+v, %v", c, err)
	}
	if _, err := locked(req("a", "fp-2", "")); contract.CodeOf(err) != contract.KeyConflict {
		t.Errorf("locked claim of another request = %v", err)
	}
	own, err := locked(req("b", "fp", "own-token-0123456789"))
	if err != nil || own.Kind != contract.ClaimNew || own.Token != "own-token-0123456789" {
		t.Fatalf("locked claim with a token = %+v, %v", own, err)
	}
	clock.advance(time.Minute)
	if c, err := locked(req("b", "fp", "own-token-0123456789")); err != nil || c.Kind != contract.ClaimNew || !c.Record.CreatedAt.Equal(own.Record.CreatedAt) {
		t.Errorf("locked claim of the own lapsed claim = %+v, %v; want it handed back", c, err)
	}
	clock.advance(time.Minute)
	rc, err := locked(req("a", "fp", ""))
	if err != nil || rc.Kind != contract.ClaimReclaimed || !rc.Record.CreatedAt.Equal(c.Record.CreatedAt) {
		t.Fatalf("locked reclaim = %+v, %v", rc, err)
	}
	if _, err := b.CompleteKey(ctx, contract.Completion{KeyRef: rc.Record.KeyRef, Token: rc.Token, Outcome: contract.Outcome{Code: 200}, Retain: time.Hour, Tombstone: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if c, err := locked(req("a", "fp", "")); err != nil || c.Kind != contract.ClaimCompleted || c.Record.Outcome == nil {
		t.Errorf("locked claim of a completed key = %+v, %v", c, err)
	}
	clock.advance(time.Hour)
	if _, err := locked(req("a", "fp", "")); contract.CodeOf(err) != contract.OutcomeExpired {
		t.Errorf("locked claim of a tombstone = %v", err)
	}
	clock.advance(time.Hour)
	if c, err := locked(req("a", "fp", "")); err != nil || c.Kind != contract.ClaimNew || c.Record.State != contract.KeyClaimed {
		t.Errorf("locked claim past the tombstone = %+v, %v", c, err)
	}
	if got, err := b.GetKey(ctx, contract.KeyRef{Scope: "s", Key: "a"}); err != nil || got.State != contract.KeyClaimed || got.Outcome != nil || !got.ForgetAt.IsZero() {
		t.Errorf("the key retaken past its tombstone = %+v, %v", got, err)
	}
}

// stressClaims races claims, releases, reclaims and the callers' own
// retries of one key on b (see TestClaimKeyNeverGivesUpUnderContention).
func stressClaims(t *testing.T, b *Backend) {
	ctx := t.Context()
	const workers, perWorker = 12, 400
	deadline := time.Now().Add(20 * time.Second)
	var kinds [8]atomic.Int64
	var conflicts, calls atomic.Int64
	var mu sync.Mutex
	var failures []error
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 27))
			fp := "fp"
			if w == workers-1 {
				fp = "fp-other" // another request: conflicts
			}
			for i := 0; i < perWorker && time.Now().Before(deadline); i++ {
				req := contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: "hot"}, Fingerprint: fp,
					TTL: time.Duration(1+r.IntN(5)) * time.Millisecond}
				if r.IntN(3) == 0 {
					req.Token = fmt.Sprintf("own-token-%02d-%06d", w, i)
				}
				calls.Add(1)
				c, err := b.ClaimKey(ctx, req)
				switch {
				case contract.CodeOf(err) == contract.KeyConflict:
					conflicts.Add(1)
					continue
				case err != nil:
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
					continue
				}
				kinds[c.Kind].Add(1)
				if c.Kind != contract.ClaimNew && c.Kind != contract.ClaimReclaimed {
					continue
				}
				if req.Token != "" && r.IntN(2) == 0 {
					// The caller's retry after a lost reply.
					again, err := b.ClaimKey(ctx, req)
					calls.Add(1)
					switch {
					case contract.CodeOf(err) == contract.KeyConflict:
						// Reclaimed, released and taken by the
						// other request meanwhile.
						conflicts.Add(1)
					case err != nil:
						mu.Lock()
						failures = append(failures, err)
						mu.Unlock()
					default:
						kinds[again.Kind].Add(1)
					}
				}
				if r.IntN(8) != 0 {
					if _, err := b.ReleaseKey(ctx, c.Record.KeyRef, c.Token); err != nil {
						mu.Lock()
						failures = append(failures, err)
						mu.Unlock()
					}
				} // else: abandoned, reclaimed once it lapses
			}
		})
	}
	wg.Wait()
	for i, err := range failures {
		if i < 5 {
			t.Errorf("ClaimKey or ReleaseKey failed under contention: %v (code %v)", err, contract.CodeOf(err))
		}
	}
	if len(failures) > 0 {
		t.Errorf("%d of %d calls failed", len(failures), calls.Load())
	}
	t.Logf("%d claims: %d new, %d reclaimed, %d in flight, %d conflicts; %d decided by the locked form",
		calls.Load(), kinds[contract.ClaimNew].Load(), kinds[contract.ClaimReclaimed].Load(), kinds[contract.ClaimInFlight].Load(),
		conflicts.Load(), b.lockedClaims.Load())
	if kinds[contract.ClaimNew].Load() == 0 || kinds[contract.ClaimReclaimed].Load() == 0 || kinds[contract.ClaimInFlight].Load() == 0 {
		t.Error("the stress did not produce new claims, reclaims and claims in flight: it does not race what it should")
	}
	if b.claimRounds == 1 && b.lockedClaims.Load() == 0 {
		t.Error("no claim fell back to the locked form with one optimistic round: the stress does not reach it")
	}
}

// TestClaimKeyNeverGivesUpThroughPgBouncer: the same through PgBouncer in
// transaction mode, the locked form's transaction included.
func TestClaimKeyNeverGivesUpThroughPgBouncer(t *testing.T) {
	bouncer, schema := migratedBehindBouncer(t)
	for _, tc := range []testClient{tcPgx, tcPQ} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.open(t.Context(), bouncer.DSN()+"&pool_max_conns=16", Options{Schema: schema, Migrate: MigrateVerify,
				Pooler: PoolerTransaction, Tolerance: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			b.claimRounds = 1
			stressClaims(t, b)
		})
	}
}
