package broken

import (
	"context"
	"fmt"
	"time"

	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// Idempotency keys.
func init() {
	register("stale-claim-token-completes", variant{
		doc:  "CompleteKey ignores the claim token: a stale owner can complete a reclaimed key",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return &staleTokenCompletes{b, st} },
	})
	register("wait-never-wakes", variant{
		doc:  "WaitKey returns at once for settled keys but is never woken by a completion or release",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return waitNeverWakes{b} },
	})
	register("claim-race", variant{
		doc:  "ClaimKey checks for the key, then claims it in a second step: racing callers all think they won",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return claimRace{b} },
	})
	register("reclaim-race", variant{
		doc:  "ClaimKey reads an abandoned claim, then reclaims it in a second step: racing callers all think they reclaimed it",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return reclaimRace{b, st} },
	})
	register("completed-key-ignores-workflow-id", variant{
		doc:  "ClaimKey replays a completed key to a claim naming another workflow id instead of KeyConflict",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return completedIgnoresWorkflowID{b} },
	})
	register("abandoned-claim-ignores-workflow-id", variant{
		doc:  "ClaimKey lets a claim naming another workflow id reclaim an abandoned claim of the same fingerprint",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return abandonedIgnoresWorkflowID{b, st} },
	})
	register("retention-counted-from-claim", variant{
		doc:  "a completed key's ExpiresAt is CreatedAt + Retain (counted from the claim, not the completion)",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return retentionFromClaim{b, st} },
	})
	register("retention-ends-early", variant{
		doc:  "a completed key is forgotten 2 s before the ExpiresAt it reports",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return retentionEndsEarly{b} },
	})
	register("renew-key-from-old-expiry", variant{
		doc:  "RenewKey sets LeaseUntil to the old LeaseUntil + ttl instead of now + ttl",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return renewFromOldExpiry{b, st} },
	})
	register("renew-never-shortens", variant{
		doc:  "RenewKey and RenewLease never move an expiry earlier: a shorter ttl than what is left is ignored",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return renewNeverShortens{b, st} },
	})
	register("ttl-whole-seconds", variant{
		doc:  "claim and lease TTLs are kept in whole seconds (1.5 s becomes 1 s), and the harness does not declare it",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return wholeSeconds{b} },
	})
	register("ttl-whole-seconds-declared", variant{
		doc:     "claim and lease TTLs are kept in whole seconds, and the harness declares Granularity = 1 s",
		control: true,
		wrap:    func(b *exactmem.Backend, _ *state) contract.Backend { return wholeSeconds{b} },
		caps:    func(c *conformance.Capabilities) { c.Granularity = time.Second },
	})
	register("wait-wakes-one-waiter", variant{
		doc:  "WaitKey wakes only the first caller waiting on a key (Signal, not Broadcast); the others wait until their context ends",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return waitWakesOne{b, st} },
	})
	register("wait-not-woken-by-cleanup", variant{
		doc:  "WaitKey is woken by completion and release but not when Cleanup deletes an abandoned claim",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return waitNotWokenByCleanup{b, st} },
	})
	register("sequential-claim-tokens", variant{
		doc: "claim tokens come from a counter (tok-0000000000000001, …)",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend {
			return claimTokens{b, st, func(n int64, _ string) string { return fmt.Sprintf("tok-%016d", n) }}
		},
	})
	register("short-claim-tokens", variant{
		doc: "claim tokens are 8 hex digits (32 random bits)",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend {
			return claimTokens{b, st, func(_ int64, real string) string { return real[:8] }}
		},
	})
}

// staleTokenCompletes completes with whatever token currently holds the
// claim, not the caller's.
type staleTokenCompletes struct {
	*exactmem.Backend
	st *state
}

func (b *staleTokenCompletes) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := b.Backend.ClaimKey(ctx, req)
	if err == nil && c.Kind.Owned() {
		b.st.mu.Lock()
		b.st.claims[req.KeyRef] = c.Token
		b.st.mu.Unlock()
	}
	return c, err
}

func (b *staleTokenCompletes) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	b.st.mu.Lock()
	if tok, ok := b.st.claims[c.KeyRef]; ok {
		c.Token = tok // the bug
	}
	b.st.mu.Unlock()
	return b.Backend.CompleteKey(ctx, c)
}

// waitNeverWakes answers WaitKey for keys that are already completed or
// absent, and otherwise sleeps until the caller gives up.
type waitNeverWakes struct{ *exactmem.Backend }

func (b waitNeverWakes) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	rec, err := b.Backend.GetKey(ctx, k)
	if err != nil || rec.State == contract.KeyCompleted {
		return rec, err
	}
	<-ctx.Done()
	return contract.KeyRecord{}, &contract.Error{Code: contract.Canceled, Err: ctx.Err()}
}

// claimRace checks for the key and claims it in two steps; a caller that
// saw no key believes it won even when another caller claimed it between
// the steps.
type claimRace struct{ *exactmem.Backend }

func (b claimRace) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	_, err := b.Backend.GetKey(ctx, req.KeyRef)
	absent := contract.CodeOf(err) == contract.NotFound
	if absent {
		time.Sleep(raceWindow) // widen the window
	}
	c, err := b.Backend.ClaimKey(ctx, req)
	if err == nil && absent && c.Kind == contract.ClaimInFlight {
		c.Kind, c.Token = contract.ClaimNew, "lost-race-"+req.Key // the bug
	}
	return c, err
}

// reclaimRace is claimRace on the reclaim path.
type reclaimRace struct {
	*exactmem.Backend
	st *state
}

func (b reclaimRace) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	rec, err := b.Backend.GetKey(ctx, req.KeyRef)
	abandoned := err == nil && rec.State == contract.KeyClaimed && rec.LeaseUntil.Add(Tolerance).Before(b.st.now())
	if abandoned {
		time.Sleep(raceWindow) // widen the window
	}
	c, err := b.Backend.ClaimKey(ctx, req)
	if err == nil && abandoned && c.Kind == contract.ClaimInFlight {
		c.Kind, c.Token = contract.ClaimReclaimed, "lost-race-"+req.Key // the bug
	}
	return c, err
}

// completedIgnoresWorkflowID compares the workflow id of live claims only.
type completedIgnoresWorkflowID struct{ *exactmem.Backend }

func (b completedIgnoresWorkflowID) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := b.Backend.ClaimKey(ctx, req)
	if contract.CodeOf(err) == contract.KeyConflict && req.WorkflowID != "" {
		req.WorkflowID = ""
		if c2, err2 := b.Backend.ClaimKey(ctx, req); err2 == nil && c2.Kind == contract.ClaimCompleted {
			return c2, nil // the bug
		}
	}
	return c, err
}

// abandonedIgnoresWorkflowID compares the workflow id of live claims only.
type abandonedIgnoresWorkflowID struct {
	*exactmem.Backend
	st *state
}

func (b abandonedIgnoresWorkflowID) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := b.Backend.ClaimKey(ctx, req)
	if contract.CodeOf(err) == contract.KeyConflict && req.WorkflowID != "" {
		rec, gerr := b.Backend.GetKey(ctx, req.KeyRef)
		if gerr == nil && rec.State == contract.KeyClaimed && rec.Fingerprint == req.Fingerprint &&
			rec.LeaseUntil.Add(Tolerance).Before(b.st.now()) {
			req.WorkflowID = ""
			return b.Backend.ClaimKey(ctx, req) // the bug
		}
	}
	return c, err
}

// retentionFromClaim shortens Retain by the time the claim was held.
type retentionFromClaim struct {
	*exactmem.Backend
	st *state
}

func (b retentionFromClaim) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	if rec, err := b.Backend.GetKey(ctx, c.KeyRef); err == nil && rec.State == contract.KeyClaimed {
		c.Retain -= b.st.now().Sub(rec.CreatedAt) // the bug
		c.Retain = max(c.Retain, time.Microsecond)
	}
	return b.Backend.CompleteKey(ctx, c)
}

// retentionEndsEarly keeps completed keys 2 s less than it reports.
type retentionEndsEarly struct{ *exactmem.Backend }

const early = 2 * time.Second

func report(r contract.KeyRecord) contract.KeyRecord {
	if r.State == contract.KeyCompleted {
		r.ExpiresAt = r.ExpiresAt.Add(early)
	}
	return r
}

func (b retentionEndsEarly) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	c.Retain = max(c.Retain-early, time.Microsecond)
	rec, err := b.Backend.CompleteKey(ctx, c)
	return report(rec), err
}

func (b retentionEndsEarly) GetKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	rec, err := b.Backend.GetKey(ctx, k)
	return report(rec), err
}

func (b retentionEndsEarly) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := b.Backend.ClaimKey(ctx, req)
	c.Record = report(c.Record)
	return c, err
}

func (b retentionEndsEarly) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	rec, err := b.Backend.WaitKey(ctx, k)
	return report(rec), err
}

// renewFromOldExpiry adds the TTL to the old expiry.
type renewFromOldExpiry struct {
	*exactmem.Backend
	st *state
}

func (b renewFromOldExpiry) RenewKey(ctx context.Context, k contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	if rec, err := b.Backend.GetKey(ctx, k); err == nil && rec.State == contract.KeyClaimed {
		if left := rec.LeaseUntil.Sub(b.st.now()); left > 0 {
			ttl += left // the bug
		}
	}
	return b.Backend.RenewKey(ctx, k, token, ttl)
}

// renewNeverShortens keeps the later of the old expiry and now + ttl.
type renewNeverShortens struct {
	*exactmem.Backend
	st *state
}

func (b renewNeverShortens) RenewKey(ctx context.Context, k contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	if rec, err := b.Backend.GetKey(ctx, k); err == nil && rec.State == contract.KeyClaimed {
		ttl = max(ttl, rec.LeaseUntil.Sub(b.st.now())) // the bug
	}
	return b.Backend.RenewKey(ctx, k, token, ttl)
}

func (b renewNeverShortens) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	if cur, err := b.Backend.GetLease(ctx, l.Scope, l.Resource); err == nil {
		ttl = max(ttl, cur.ExpiresAt.Sub(b.st.now())) // the bug
	}
	return b.Backend.RenewLease(ctx, l, ttl)
}

// wholeSeconds drops the fraction of every TTL.
type wholeSeconds struct{ *exactmem.Backend }

func (b wholeSeconds) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	req.TTL = req.TTL.Truncate(time.Second)
	return b.Backend.ClaimKey(ctx, req)
}

func (b wholeSeconds) RenewKey(ctx context.Context, k contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	return b.Backend.RenewKey(ctx, k, token, ttl.Truncate(time.Second))
}

func (b wholeSeconds) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	req.TTL = req.TTL.Truncate(time.Second)
	return b.Backend.AcquireLease(ctx, req)
}

func (b wholeSeconds) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	return b.Backend.RenewLease(ctx, l, ttl.Truncate(time.Second))
}

// waitWakesOne lets only the first waiter on a key really wait; the others
// are never woken.
type waitWakesOne struct {
	*exactmem.Backend
	st *state
}

func (b waitWakesOne) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	rec, err := b.Backend.GetKey(ctx, k)
	if err != nil || rec.State == contract.KeyCompleted {
		return rec, err
	}
	b.st.mu.Lock()
	first := b.st.waiting[k] == 0
	b.st.waiting[k]++
	b.st.mu.Unlock()
	defer func() {
		b.st.mu.Lock()
		b.st.waiting[k]--
		b.st.mu.Unlock()
	}()
	if first {
		return b.Backend.WaitKey(ctx, k)
	}
	<-ctx.Done() // the bug: nobody signals this waiter
	return contract.KeyRecord{}, &contract.Error{Code: contract.Canceled, Err: ctx.Err()}
}

// waitNotWokenByCleanup returns NotFound to a waiter only for a release.
type waitNotWokenByCleanup struct {
	*exactmem.Backend
	st *state
}

func (b waitNotWokenByCleanup) ReleaseKey(ctx context.Context, k contract.KeyRef, token string) (bool, error) {
	ok, err := b.Backend.ReleaseKey(ctx, k, token)
	if ok {
		b.st.mu.Lock()
		b.st.released[k] = true
		b.st.mu.Unlock()
	}
	return ok, err
}

func (b waitNotWokenByCleanup) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	if _, err := b.Backend.GetKey(ctx, k); err != nil {
		return contract.KeyRecord{}, err
	}
	rec, err := b.Backend.WaitKey(ctx, k)
	if contract.CodeOf(err) == contract.NotFound {
		b.st.mu.Lock()
		rel := b.st.released[k]
		b.st.mu.Unlock()
		if !rel {
			<-ctx.Done() // the bug: only a release notifies
			return contract.KeyRecord{}, &contract.Error{Code: contract.Canceled, Err: ctx.Err()}
		}
	}
	return rec, err
}

// claimTokens shows callers other claim tokens than the memory backend's,
// translating them back on the way in.
type claimTokens struct {
	*exactmem.Backend
	st     *state
	format func(n int64, real string) string
}

func (b claimTokens) show(real string) string {
	if real == "" {
		return ""
	}
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if v, ok := b.st.claimVis[real]; ok {
		return v
	}
	b.st.claimN++
	v := b.format(b.st.claimN, real)
	b.st.claimVis[real], b.st.claimReal[v] = v, real
	return v
}

func (b claimTokens) real(visible string) string {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if r, ok := b.st.claimReal[visible]; ok {
		return r
	}
	return visible
}

func (b claimTokens) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := b.Backend.ClaimKey(ctx, req)
	c.Token = b.show(c.Token)
	return c, err
}

func (b claimTokens) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	c.Token = b.real(c.Token)
	return b.Backend.CompleteKey(ctx, c)
}

func (b claimTokens) RenewKey(ctx context.Context, k contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	return b.Backend.RenewKey(ctx, k, b.real(token), ttl)
}

func (b claimTokens) ReleaseKey(ctx context.Context, k contract.KeyRef, token string) (bool, error) {
	return b.Backend.ReleaseKey(ctx, k, b.real(token))
}
