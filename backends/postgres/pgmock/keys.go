package pgmock

import (
	"context"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres/internal/mockspec"
	"github.com/durable-go/durable/contract"
)

// ClaimKey is the expectation of Store.ClaimKey (and of the claim that
// Store.Do starts with).
type ClaimKey struct {
	expectation
	req       durable.ClaimRequest
	contended bool
}

// Contended makes the outcome chosen next come after contention: the
// backend's optimistic statement finds the key changed on every attempt,
// and ClaimKey decides in a transaction that holds the key's row lock
// (BEGIN, the lock, the claim's write when it takes the key, COMMIT; or
// ROLLBACK when it takes nothing). It returns e.
func (e *ClaimKey) Contended() *ClaimKey {
	e.contended = true
	return e
}

// gen returns the statements of outcome o with record rec, their token
// placeholders bound to cell.
func (e *ClaimKey) gen(o mockspec.ClaimOutcome, rec durable.KeyRecord, cell *tokenCell) []mockspec.Statement {
	if e.req.Token != "" {
		cell.mu.Lock()
		cell.v = e.req.Token
		cell.mu.Unlock()
	}
	return withTokens(e.m.gen.ClaimKey(e.req, o, rec, e.contended), cell)
}

// ExpectClaimKey expects Store.ClaimKey(ctx, req), or Store.Do(ctx, req,
// …)'s claim. A zero req.TTL is the Store's default claim TTL.
func (m *Mock) ExpectClaimKey(req durable.ClaimRequest) *ClaimKey {
	req = capture[durable.ClaimRequest](m, "ClaimKey", func(ctx context.Context, s *durable.Store) error {
		_, err := s.ClaimKey(ctx, req)
		return err
	})
	e := &ClaimKey{req: req}
	e.expectation = m.begin("ClaimKey", func() mockspec.Statement {
		return withTokens(m.gen.ClaimKey(req, mockspec.ClaimOutcome(contract.ClaimNew), e.claimed(m.now()), false), &tokenCell{})[0]
	})
	m.track(&e.expectation)
	return e
}

// claimed is the record of a claim of e's request made at created, live
// for its TTL from now.
func (e *ClaimKey) claimed(created time.Time) durable.KeyRecord {
	return durable.KeyRecord{
		KeyRef: e.req.KeyRef, Fingerprint: e.req.Fingerprint, WorkflowID: e.req.WorkflowID,
		State: durable.KeyClaimed, LeaseUntil: e.m.now().Add(e.req.TTL), CreatedAt: created,
	}
}

// claim registers a claim of the caller's (New or Reclaimed) created at
// created and returns the Claim the Store returns, without its token (the
// backend's random one).
func (e *ClaimKey) claim(kind durable.ClaimKind, created time.Time) durable.Claim {
	rec := e.claimed(created)
	cell := &tokenCell{}
	stmts := e.gen(mockspec.ClaimOutcome(kind), rec, cell)
	e.m.mu.Lock()
	e.m.claims[e.req.KeyRef] = &claim{req: e.req, created: created, token: cell}
	e.m.mu.Unlock()
	e.finish(stmts)
	return durable.Claim{Kind: kind, Token: e.req.Token, Record: rec}
}

// New: the key is free and the caller now holds a new claim (ClaimNew).
// It returns the Claim the Store returns, but for its Token when the
// request has none: the backend then draws a random one, which the
// expectation accepts and keeps for the later expectations on this key
// that give no token (see the package documentation). A request's own
// Token is sent, returned and kept as it is.
func (e *ClaimKey) New() durable.Claim { return e.claim(durable.ClaimNew, e.m.now()) }

// Reclaimed: an abandoned claim of the same request was taken over
// (ClaimReclaimed). The record keeps the abandoned claim's creation time:
// that of the key's last expected claim, if any, otherwise the latest time
// from which a claim of this TTL had expired beyond the tolerance (now −
// TTL − tolerance − 1µs). The token is as for New.
func (e *ClaimKey) Reclaimed() durable.Claim {
	created := e.m.now().Add(-e.req.TTL - e.m.gen.Tolerance() - time.Microsecond)
	if c := e.m.claimOf(e.req.KeyRef); c != nil {
		created = c.created
	}
	return e.claim(durable.ClaimReclaimed, created)
}

// Completed: the key holds the outcome o of an earlier call of the same
// request (ClaimCompleted: Store.Do replays it). It returns the Claim the
// Store returns.
func (e *ClaimKey) Completed(o durable.Outcome) durable.Claim {
	now := e.m.now()
	rec := durable.KeyRecord{
		KeyRef: e.req.KeyRef, Fingerprint: e.req.Fingerprint, WorkflowID: e.req.WorkflowID,
		State: durable.KeyCompleted, Outcome: &o, CreatedAt: now, CompletedAt: now, ExpiresAt: now.Add(e.m.retention),
		ForgetAt: now.Add(max(e.m.retention, e.m.tombstone)),
	}
	e.finish(e.gen(mockspec.ClaimOutcome(durable.ClaimCompleted), rec, &tokenCell{}))
	return durable.Claim{Kind: durable.ClaimCompleted, Record: rec}
}

// OutcomeExpired: the key holds the tombstone of an earlier call of the
// same request, whose outcome's retention ended (ErrOutcomeExpired: the
// request must not run again).
func (e *ClaimKey) OutcomeExpired() {
	now := e.m.now()
	rec := durable.KeyRecord{
		KeyRef: e.req.KeyRef, Fingerprint: e.req.Fingerprint, WorkflowID: e.req.WorkflowID,
		State: durable.KeyCompleted, Outcome: &durable.Outcome{Code: 200}, CreatedAt: now.Add(-2 * e.m.retention),
		CompletedAt: now.Add(-e.m.retention), ExpiresAt: now, ForgetAt: now.Add(e.m.tombstone),
	}
	e.finish(e.gen(mockspec.ClaimOutcomeExpired, rec, &tokenCell{}))
}

// InFlight: another caller holds a live claim of the same request
// (ClaimInFlight: Store.Do returns ErrInFlight without waiting). It returns
// the Claim the Store returns.
func (e *ClaimKey) InFlight() durable.Claim {
	rec := e.claimed(e.m.now())
	e.finish(e.gen(mockspec.ClaimOutcome(durable.ClaimInFlight), rec, &tokenCell{}))
	return durable.Claim{Kind: durable.ClaimInFlight, Record: rec}
}

// KeyConflict: the key is bound to another request, another fingerprint
// (ErrKeyConflict).
func (e *ClaimKey) KeyConflict() {
	rec := e.claimed(e.m.now())
	rec.Fingerprint += "-other"
	e.finish(e.gen(mockspec.ClaimKeyConflict, rec, &tokenCell{}))
}

// CompleteKey is the expectation of Store.CompleteKey (and of the
// completion that Store.Do ends with).
type CompleteKey struct {
	expectation
	c     durable.Completion
	claim *claim
	cell  *tokenCell
	tx    bool // CompleteKeyTx's statement
}

// ExpectCompleteKey expects Store.CompleteKey(ctx, c). A zero c.Token
// stands for the token of the last expected claim (New or Reclaimed) of
// c's key, as Store.Do passes it; a zero c.Retain is the Store's key
// retention.
func (m *Mock) ExpectCompleteKey(c durable.Completion) *CompleteKey {
	var cl *claim
	c.Token, cl = m.heldToken("CompleteKey", c.KeyRef, c.Token)
	c = capture[durable.Completion](m, "CompleteKey", func(ctx context.Context, s *durable.Store) error {
		_, err := s.CompleteKey(ctx, c)
		return err
	})
	e := &CompleteKey{c: c, claim: cl, cell: &tokenCell{}}
	if cl != nil {
		e.cell = cl.token
	}
	e.expectation = m.begin("CompleteKey", func() mockspec.Statement {
		return withTokens(m.gen.CompleteKey(c, mockspec.CompleteStale, durable.KeyRecord{}), e.cell)[0]
	})
	m.track(&e.expectation)
	return e
}

// record is the key's record: completed with the completion's outcome now
// (done) or still claimed.
func (e *CompleteKey) record(done bool) durable.KeyRecord {
	now := e.m.now()
	rec := durable.KeyRecord{KeyRef: e.c.KeyRef, State: durable.KeyClaimed, CreatedAt: now, LeaseUntil: now.Add(time.Minute)}
	if cl := e.m.claimOf(e.c.KeyRef); cl != nil {
		rec.Fingerprint, rec.WorkflowID, rec.CreatedAt = cl.req.Fingerprint, cl.req.WorkflowID, cl.created
		rec.LeaseUntil = now.Add(cl.req.TTL)
	}
	if done {
		o := e.c.Outcome
		rec.State, rec.LeaseUntil, rec.Outcome = durable.KeyCompleted, time.Time{}, &o
		rec.CompletedAt, rec.ExpiresAt, rec.ForgetAt = now, now.Add(e.c.Retain), now.Add(max(e.c.Retain, e.c.Tombstone))
	}
	return rec
}

func (e *CompleteKey) outcome(o mockspec.CompleteOutcome, done bool) durable.KeyRecord {
	rec := e.record(done)
	gen := e.m.gen.CompleteKey
	if e.tx {
		gen = e.m.gen.CompleteKeyTx
	}
	e.finish(withTokens(gen(e.c, o, rec), e.cell))
	return rec
}

// Stores: the claim is held and the outcome is stored. It returns the
// record the Store returns (its fingerprint, workflow id and creation time
// are those of the key's last expected claim, if any).
func (e *CompleteKey) Stores() durable.KeyRecord { return e.outcome(mockspec.CompleteApplied, true) }

// AlreadyStored: this token already stored its outcome (a retry after a
// lost reply), and the Store returns that record, as Stores does.
func (e *CompleteKey) AlreadyStored() durable.KeyRecord {
	return e.outcome(mockspec.CompleteReplayed, true)
}

// Fenced: the token no longer holds the claim: it was taken over,
// released, or it expired (ErrFenced).
func (e *CompleteKey) Fenced() { e.outcome(mockspec.CompleteStale, false) }

// FenceInvalid: the completion's lease fence is not valid (ErrFenced).
// The completion must have a fence.
func (e *CompleteKey) FenceInvalid() { e.outcome(mockspec.CompleteFenceInvalid, false) }

// ExpectBeginTx expects the backend's BeginTx (contract.TxCompleter) on
// the mocked *sql.DB: a BEGIN. The transaction's end is the code's own:
// register it with the sqlmock's ExpectCommit or ExpectRollback, after
// the expectations of the statements in it.
func (m *Mock) ExpectBeginTx() {
	e := m.begin("BeginTx", func() mockspec.Statement { panic("pgmock: BeginTx sends no statement that can fail") })
	e.finish(m.gen.BeginTx())
}

// ExpectCompleteKeyTx expects CompleteKeyTx(ctx, tx, c) inside a
// transaction on the mocked *sql.DB (one from BeginTx, or the code's own
// *sql.Tx): one statement, with the outcomes of ExpectCompleteKey (Stores,
// AlreadyStored, Fenced, FenceInvalid, FailsWith). c is completed with the
// Store's defaults as ExpectCompleteKey does (a zero Token: the last
// expected claim's; a zero Retain: the Store's key retention). The
// transaction's begin and end are registered apart (ExpectBeginTx, the
// sqlmock's ExpectBegin, ExpectCommit, ExpectRollback).
func (m *Mock) ExpectCompleteKeyTx(c durable.Completion) *CompleteKey {
	var cl *claim
	c.Token, cl = m.heldToken("CompleteKeyTx", c.KeyRef, c.Token)
	c = capture[durable.Completion](m, "CompleteKeyTx", func(ctx context.Context, s *durable.Store) error {
		_, err := s.CompleteKey(ctx, c) // the same defaults and validation
		return err
	})
	e := &CompleteKey{c: c, claim: cl, cell: &tokenCell{}, tx: true}
	if cl != nil {
		e.cell = cl.token
	}
	e.expectation = m.begin("CompleteKeyTx", func() mockspec.Statement {
		return withTokens(m.gen.CompleteKeyTx(c, mockspec.CompleteStale, durable.KeyRecord{}), e.cell)[0]
	})
	m.track(&e.expectation)
	return e
}

// RenewKey is the expectation of Store.RenewKey (and of Store.Do's
// renewals of its claim).
type RenewKey struct {
	expectation
	r    renewKeyReq
	cell *tokenCell
}

// ExpectRenewKey expects Store.RenewKey(ctx, k, token, ttl). A zero token
// stands for the token of the last expected claim of k; a zero ttl is the
// Store's default claim TTL.
func (m *Mock) ExpectRenewKey(k durable.KeyRef, token string, ttl time.Duration) *RenewKey {
	token, cl := m.heldToken("RenewKey", k, token)
	r := capture[renewKeyReq](m, "RenewKey", func(ctx context.Context, s *durable.Store) error {
		_, err := s.RenewKey(ctx, k, token, ttl)
		return err
	})
	e := &RenewKey{r: r, cell: &tokenCell{}}
	if cl != nil {
		e.cell = cl.token
	}
	e.expectation = m.begin("RenewKey", func() mockspec.Statement {
		return withTokens(m.gen.RenewKey(r.k, r.token, r.ttl, nil), e.cell)[0]
	})
	m.track(&e.expectation)
	return e
}

// Renewed: the token holds the claim, which now lasts ttl from the
// server's time. It returns the record the Store returns.
func (e *RenewKey) Renewed() durable.KeyRecord {
	now := e.m.now()
	rec := durable.KeyRecord{KeyRef: e.r.k, State: durable.KeyClaimed, CreatedAt: now, LeaseUntil: now.Add(e.r.ttl)}
	if cl := e.m.claimOf(e.r.k); cl != nil {
		rec.Fingerprint, rec.WorkflowID, rec.CreatedAt = cl.req.Fingerprint, cl.req.WorkflowID, cl.created
	}
	e.finish(withTokens(e.m.gen.RenewKey(e.r.k, e.r.token, e.r.ttl, &rec), e.cell))
	return rec
}

// Fenced: the token no longer holds the claim (ErrFenced).
func (e *RenewKey) Fenced() {
	e.finish(withTokens(e.m.gen.RenewKey(e.r.k, e.r.token, e.r.ttl, nil), e.cell))
}

// ReleaseKey is the expectation of Store.ReleaseKey (and of Store.Do's
// release when its function fails).
type ReleaseKey struct {
	expectation
	r    keyTokenReq
	cell *tokenCell
}

// ExpectReleaseKey expects Store.ReleaseKey(ctx, k, token). A zero token
// stands for the token of the last expected claim of k.
func (m *Mock) ExpectReleaseKey(k durable.KeyRef, token string) *ReleaseKey {
	token, cl := m.heldToken("ReleaseKey", k, token)
	r := capture[keyTokenReq](m, "ReleaseKey", func(ctx context.Context, s *durable.Store) error {
		_, err := s.ReleaseKey(ctx, k, token)
		return err
	})
	e := &ReleaseKey{r: r, cell: &tokenCell{}}
	if cl != nil {
		e.cell = cl.token
	}
	e.expectation = m.begin("ReleaseKey", func() mockspec.Statement {
		return withTokens(m.gen.ReleaseKey(r.k, r.token, false), e.cell)[0]
	})
	m.track(&e.expectation)
	return e
}

// Released: the token held the claim, which is deleted (true).
func (e *ReleaseKey) Released() {
	e.finish(withTokens(e.m.gen.ReleaseKey(e.r.k, e.r.token, true), e.cell))
}

// NotHeld: the token did not hold the claim (false).
func (e *ReleaseKey) NotHeld() {
	e.finish(withTokens(e.m.gen.ReleaseKey(e.r.k, e.r.token, false), e.cell))
}

// GetKey is the expectation of Store.GetKey (and of each poll of
// Store.WaitKey on a sqlmock *sql.DB).
type GetKey struct {
	expectation
	k durable.KeyRef
}

// ExpectGetKey expects Store.GetKey(ctx, k).
func (m *Mock) ExpectGetKey(k durable.KeyRef) *GetKey {
	k = capture[durable.KeyRef](m, "GetKey", func(ctx context.Context, s *durable.Store) error {
		_, err := s.GetKey(ctx, k)
		return err
	})
	e := &GetKey{k: k}
	e.expectation = m.begin("GetKey", func() mockspec.Statement { return m.gen.GetKey(k, nil)[0] })
	m.track(&e.expectation)
	return e
}

// Returns: the key's record is rec (its KeyRef is the request's; a zero
// State is claimed; a zero CreatedAt is the server's time). It returns the
// record the Store returns.
func (e *GetKey) Returns(rec durable.KeyRecord) durable.KeyRecord {
	rec = e.m.storedKey(e.k, rec)
	e.finish(e.m.gen.GetKey(e.k, &rec))
	return rec
}

// storedKey is rec as the server stores it under k: a zero State is
// claimed, a zero CreatedAt the server's time, times cut to the
// microsecond, a completed record's zero ForgetAt its ExpiresAt; a
// completed record always has an outcome (empty if none is given), an
// expired one (a tombstone) its status code alone, a claimed one none, as
// the Store returns them.
func (m *Mock) storedKey(k durable.KeyRef, rec durable.KeyRecord) durable.KeyRecord {
	rec.KeyRef = k
	if rec.State == "" {
		rec.State = durable.KeyClaimed
	}
	switch {
	case (rec.State == durable.KeyCompleted || rec.State == contract.KeyExpired) && rec.Outcome == nil:
		rec.Outcome = &durable.Outcome{}
	case rec.State == durable.KeyClaimed:
		rec.Outcome = nil
	}
	rec.CreatedAt = m.orNow(rec.CreatedAt)
	rec.LeaseUntil, rec.CompletedAt, rec.ExpiresAt = dbTime(rec.LeaseUntil), dbTime(rec.CompletedAt), dbTime(rec.ExpiresAt)
	switch {
	case rec.State == durable.KeyClaimed:
		rec.ForgetAt = time.Time{}
	case rec.ForgetAt.IsZero():
		rec.ForgetAt = rec.ExpiresAt // no tombstone period
	default:
		rec.ForgetAt = dbTime(rec.ForgetAt)
	}
	if rec.State == contract.KeyExpired {
		rec.Outcome = &durable.Outcome{Code: rec.Outcome.Code} // a tombstone keeps the status code alone
	}
	return rec
}

// NotFound: the key has no record, or one past its retention
// (ErrNotFound).
func (e *GetKey) NotFound() { e.finish(e.m.gen.GetKey(e.k, nil)) }

// ListKeys is the expectation of Store.ListKeys.
type ListKeys struct {
	expectation
	q durable.KeyListQuery
}

// ExpectListKeys expects Store.ListKeys(ctx, q). A zero q.Limit is the
// Store's default page size.
func (m *Mock) ExpectListKeys(q durable.KeyListQuery) *ListKeys {
	q = capture[durable.KeyListQuery](m, "ListKeys", func(ctx context.Context, s *durable.Store) error {
		_, err := s.ListKeys(ctx, q)
		return err
	})
	e := &ListKeys{q: q}
	e.expectation = m.begin("ListKeys", func() mockspec.Statement { return m.gen.ListKeys(q, nil)[0] })
	m.track(&e.expectation)
	return e
}

// Returns: the page is page, in order (each in the query's scope, with
// the defaults of GetKey's Returns; keys in byte order after the cursor,
// at most the limit, in the state asked for, else it panics). It returns
// what the Store returns (nil for an empty page).
func (e *ListKeys) Returns(page ...durable.KeyRecord) []durable.KeyRecord {
	var out []durable.KeyRecord
	for _, rec := range page {
		out = append(out, e.m.storedKey(durable.KeyRef{Scope: e.q.Scope, Key: rec.Key}, rec))
	}
	e.finish(e.m.gen.ListKeys(e.q, out))
	return out
}
