package broken

import (
	"context"
	"strings"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/claimrule"
	"github.com/durable-go/durable/internal/exactmem"
	"github.com/durable-go/durable/internal/outcomecodec"
)

// Caller tokens and tombstones, whose scenarios are in
// conformance/exactlyonce.go.
func init() {
	register("token-compared-case-insensitively", variant{
		doc:  "ClaimKey hands a claim back to a caller token that differs from the claim's only in case",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return tokenFold{b, st} },
	})
	register("reclaimed-claim-handed-back", variant{
		doc:  "ClaimKey hands a claim that another caller reclaimed back to the old caller's token",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return handBackReclaimed{b, st} },
	})
	register("completed-key-handed-back-as-held", variant{
		doc:  "ClaimKey with the token that completed a key answers ClaimNew (held) instead of replaying it",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return handBackCompleted{b, st} },
	})
	register("tombstone-replays-payload", variant{
		doc:  "a completed key past its retention still replays its whole outcome instead of becoming a tombstone",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return replayAfterRetain{b, st} },
	})
	register("tombstone-forgotten-at-expiry", variant{
		doc:  "the tombstone ends with the outcome (ForgetAt = ExpiresAt whatever Completion.Tombstone says), so a late retry runs again",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return forgetAtExpires{b} },
	})
}

// completion is what the wrappers remember of a key's completion.
type completion struct {
	token       string
	completedAt time.Time
	outcome     contract.Outcome
}

// claimKey is ClaimKey noting the claim token of each key, and the token
// of a claim another caller reclaimed.
func (st *state) claimKey(ctx context.Context, b *exactmem.Backend, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := b.ClaimKey(ctx, req)
	if err != nil || !c.Kind.Owned() {
		return c, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if old, ok := st.claims[req.KeyRef]; ok && c.Kind == contract.ClaimReclaimed && old != c.Token {
		if st.reclaimed[req.KeyRef] == nil {
			st.reclaimed[req.KeyRef] = map[string]bool{}
		}
		st.reclaimed[req.KeyRef][old] = true
	}
	st.claims[req.KeyRef] = c.Token
	return c, nil
}

// handBack gives the live or lapsed claim held by tok to a caller whose
// request is the claim's, renewed to now + req.TTL, under the caller's
// token: the mistake the token bugs share. It reports false when the key
// is not such a claim.
func handBack(ctx context.Context, b *exactmem.Backend, req contract.ClaimRequest, tok string) (contract.Claim, bool) {
	rec, err := b.GetKey(ctx, req.KeyRef)
	if err != nil || rec.State != contract.KeyClaimed || !claimrule.SameRequest(rec.Fingerprint, rec.WorkflowID, req.Fingerprint, req.WorkflowID) {
		return contract.Claim{}, false
	}
	rec, err = b.RenewKey(ctx, req.KeyRef, tok, req.TTL)
	if err != nil {
		return contract.Claim{}, false
	}
	return contract.Claim{Kind: contract.ClaimNew, Token: req.Token, Record: rec}, true
}

// tokenFold compares caller tokens case-insensitively.
type tokenFold struct {
	*exactmem.Backend
	st *state
}

func (b tokenFold) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	b.st.mu.Lock()
	tok, ok := b.st.claims[req.KeyRef]
	b.st.mu.Unlock()
	if ok && req.Token != "" && req.Token != tok && strings.EqualFold(req.Token, tok) {
		if c, ok := handBack(ctx, b.Backend, req, tok); ok {
			return c, nil // the bug
		}
	}
	return b.st.claimKey(ctx, b.Backend, req)
}

// handBackReclaimed hands a reclaimed claim back to the token it was
// reclaimed from.
type handBackReclaimed struct {
	*exactmem.Backend
	st *state
}

func (b handBackReclaimed) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	b.st.mu.Lock()
	tok, old := b.st.claims[req.KeyRef], b.st.reclaimed[req.KeyRef][req.Token]
	b.st.mu.Unlock()
	if req.Token != "" && old {
		if c, ok := handBack(ctx, b.Backend, req, tok); ok {
			return c, nil // the bug
		}
	}
	return b.st.claimKey(ctx, b.Backend, req)
}

// remember notes a key's completion.
func (st *state) remember(c contract.Completion, rec contract.KeyRecord) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if prev, ok := st.completions[c.KeyRef]; ok && prev.completedAt.Equal(rec.CompletedAt) {
		return // a retry
	}
	o := c.Outcome
	o.Header = outcomecodec.CloneHeader(o.Header)
	o.Body = append([]byte(nil), o.Body...)
	if c.Outcome.Body == nil {
		o.Body = nil
	}
	st.completions[c.KeyRef] = completion{c.Token, rec.CompletedAt, o}
}

// completedBy returns the completion of the record rec reads.
func (st *state) completedBy(rec contract.KeyRecord) (completion, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	done, ok := st.completions[rec.KeyRef]
	return done, ok && done.completedAt.Equal(rec.CompletedAt)
}

// handBackCompleted answers a claim with the token that completed the key
// as if its claim were still held.
type handBackCompleted struct {
	*exactmem.Backend
	st *state
}

func (b handBackCompleted) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	rec, err := b.Backend.CompleteKey(ctx, c)
	if err == nil {
		b.st.remember(c, rec)
	}
	return rec, err
}

func (b handBackCompleted) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := b.Backend.ClaimKey(ctx, req)
	if err == nil && c.Kind == contract.ClaimCompleted && req.Token != "" {
		if done, ok := b.st.completedBy(c.Record); ok && done.token == req.Token {
			c.Kind, c.Token = contract.ClaimNew, req.Token // the bug
		}
	}
	return c, err
}

// replayAfterRetain keeps replaying an outcome past its ExpiresAt.
type replayAfterRetain struct {
	*exactmem.Backend
	st *state
}

// replay returns rec, a tombstone, with the whole outcome it had.
func (b replayAfterRetain) replay(rec contract.KeyRecord) contract.KeyRecord {
	if rec.State != contract.KeyExpired {
		return rec
	}
	if done, ok := b.st.completedBy(rec); ok {
		o := done.outcome
		rec.State, rec.Outcome = contract.KeyCompleted, &o // the bug
	}
	return rec
}

func (b replayAfterRetain) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	rec, err := b.Backend.CompleteKey(ctx, c)
	if err == nil {
		b.st.remember(c, rec)
	}
	return b.replay(rec), err
}

func (b replayAfterRetain) GetKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	rec, err := b.Backend.GetKey(ctx, ref)
	return b.replay(rec), err
}

func (b replayAfterRetain) WaitKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	rec, err := b.Backend.WaitKey(ctx, ref)
	return b.replay(rec), err
}

func (b replayAfterRetain) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := b.Backend.ClaimKey(ctx, req)
	if contract.CodeOf(err) == contract.OutcomeExpired {
		if rec, gerr := b.Backend.GetKey(ctx, req.KeyRef); gerr == nil {
			if rec = b.replay(rec); rec.State == contract.KeyCompleted {
				return contract.Claim{Kind: contract.ClaimCompleted, Record: rec}, nil
			}
		}
	}
	return c, err
}

// forgetAtExpires drops Completion.Tombstone: the key is forgotten with
// its outcome.
type forgetAtExpires struct{ *exactmem.Backend }

func (b forgetAtExpires) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	c.Tombstone = 0 // the bug
	return b.Backend.CompleteKey(ctx, c)
}
