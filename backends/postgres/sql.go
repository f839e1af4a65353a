package postgres

import (
	"database/sql"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/claimrule"
)

// The SQL of the backend: one source for every client library. Each
// statement is one query value below (see query in queries.go): its kind,
// its text with named parameters (@scope::text), its parameter struct and
// its row. The texts use explicit casts, timestamptz values and durations
// as float8 seconds through make_interval(secs => …), so that pgx and
// database/sql drivers (lib/pq) send and read them the same way.
//
// Every statement that reads the clock takes @now, the injected clock
// (NULL means the database's now()), and, where it needs one, @tol, the
// clock tolerance.

// --- shared fragments ---

// clockOr is the statement's time: the injected clock, or fallback when
// @now is NULL.
func clockOr(fallback string) string { return `coalesce(@now::timestamptz, ` + fallback + `)` }

// clock is the time of a statement outside a transaction of the caller.
var clock = clockOr(`now()`)

// tolerance is the clock tolerance as an interval.
const tolerance = `make_interval(secs => @tol::float8)`

// clockCols are the columns of c, the clock of one statement: c.now and
// c.tol.
var clockCols = clock + ` AS now, ` + tolerance + ` AS tol`

// rowsClock and rowsTolerance are clock and tolerance in a many-rows form
// (see rowsForm): each call's own @now and @tol, as p.now and p.tol.
const (
	rowsClock     = `coalesce(p.now, now())`
	rowsTolerance = `make_interval(secs => p.tol)`
)

// clockCTE is c as a common table expression.
var clockCTE = `c AS (SELECT ` + clockCols + `)`

// clockFrom is c for a FROM list, with c.now only (statements without a
// tolerance).
var clockFrom = `(SELECT ` + clock + ` AS now) c`

// qualified lists names qualified by the table alias a.
func qualified(a string, names []string) string {
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(a + "." + n)
	}
	return b.String()
}

// payload is the NOTIFY payload for the key row aliased k: the hex SHA-256
// of scope "/" key (see notifyPayload, which computes the same in Go).
func payload(k string) string {
	return `encode(sha256(convert_to(` + k + `.scope || '/' || ` + k + `.key, 'UTF8')), 'hex')`
}

// notifyIfWaited is the NOTIFY of the key row k (a row a statement locked:
// updated or deleted) when a WaitKey marked it waited, else NULL. Commits
// that notify are serialized by PostgreSQL (one lock on the notification
// queue, held through the commit's WAL flush), so a completion nobody
// waits for must not notify. The mark is read from the locked row's latest
// version, so a WaitKey that marked it before this statement locked the
// row is always notified (see qWaitKey).
func notifyIfWaited(k string) string {
	return `CASE WHEN ` + k + `.waited THEN pg_notify(@channel::text, ` + payload(k) + `) END`
}

// terminal is the list of terminal statuses, as SQL literals.
var terminal = terminalList()

func terminalList() string {
	q := make([]string, len(contract.TerminalStatuses))
	for i, s := range contract.TerminalStatuses {
		q[i] = "'" + string(s) + "'"
	}
	return strings.Join(q, ", ")
}

// leaseHeld: the lease row l is held at now: not released, and it expires
// more than tol after now.
func leaseHeld(l, now, tol string) string {
	return `NOT ` + l + `.released AND ` + l + `.expires_at > ` + now + ` + ` + tol
}

// leaseExpired: the lease row l expired more than tol before now.
func leaseExpired(l, now, tol string) string { return l + `.expires_at < ` + now + ` - ` + tol }

// leasePayload is the NOTIFY payload of the lease row l: the hex SHA-256
// of scope "/" the token resource "#" (see leaseNotifyPayload, which
// computes the same in Go). A permit's row ("name#n") notifies the payload
// of its semaphore's resource, so a watch on the resource hears every
// permit; an identifier holds no "#", so the part before the first "#" is
// contract.TokenResource. The trailing "#" keeps a lease's payload apart
// from a key's (payload), whose key holds no "#".
func leasePayload(l string) string {
	return `encode(sha256(convert_to(` + l + `.scope || '/' || split_part(` + l + `.resource, '#', 1) || '#', 'UTF8')), 'hex')`
}

// leaseWatched: a WatchLease's mark on the lease row l is live (false,
// never NULL, without a mark). Marks are on the database's clock (now()),
// never the injected one: they belong to the NOTIFY plumbing, not to the
// leases' time.
func leaseWatched(l string) string {
	return `(` + l + `.watched_until IS NOT NULL AND ` + l + `.watched_until > now())`
}

// semaphoreWatched: the lease row l is a permit's ("name#n") and a
// WatchLease's mark on its semaphore's row ("name") is live, as the
// statement's snapshot shows it.
func semaphoreWatched(l string) string {
	return `strpos(` + l + `.resource, '#') > 0 AND EXISTS (SELECT 1 FROM {schema}.leases w
    WHERE w.scope = ` + l + `.scope AND w.resource = split_part(` + l + `.resource, '#', 1) AND ` + leaseWatched("w") + `)`
}

// leaseNotified: a statement that changes the lease row l notifies it:
// l's own mark is live (read on the row the statement locked, its latest
// version), or l is a permit whose semaphore is watched (read in the
// statement's snapshot). See WatchLease for why the two together never
// miss a change that commits after WatchLease returned, bar one kind.
func leaseNotified(l string) string {
	return `(` + leaseWatched(l) + ` OR ` + semaphoreWatched(l) + `)`
}

// notified is the boolean column notified of a statement that changes
// the one lease row l of its parameters (@scope, @resource): whether it
// sent the NOTIFY, which it does when l's own mark is live (read on the
// row it locked) and, with semaphore (the SQL of the semaphore's resource,
// for a permit's row), when the semaphore's mark is live in its snapshot
// (leaseNotified, written for one known row). The payload is @payload,
// leaseNotifyPayload of the lease, computed by the caller: the statements
// on the hot path carry no hashing and, for a plain lease, no subquery.
// pg_notify returns void, which IS NOT NULL.
func notified(l, semaphore string) string {
	cond := l + `.watched_until > now()`
	if semaphore != "" {
		cond += ` OR EXISTS (SELECT 1 FROM {schema}.leases w WHERE w.scope = @scope::text AND w.resource = ` + semaphore + `
      AND ` + leaseWatched("w") + `)`
	}
	return `(CASE WHEN ` + cond + ` THEN pg_notify(@channel::text, @payload::text) END) IS NOT NULL AS notified`
}

// placeholderTimes are the acquired_at and expires_at of a row that only
// holds a watch's mark (the empty owner, token 0, released): expired on every
// clock, so Cleanup deletes it as soon as its mark lapses.
const placeholderTimes = `'-infinity'::timestamptz, '-infinity'::timestamptz`

// keyExpired: the key row k is completed and past its outcome's retention
// at now: only its tombstone is left (claimrule.Expired; reads report it as
// expired, without the outcome's payload).
func keyExpired(k, now string) string {
	return k + `.state = 'completed' AND ` + k + `.expires_at <= ` + now
}

// keyForgotten: the key row k is completed and past its tombstone at now
// (it counts as absent: claimrule.Live does not hold). A key completed by
// code older than migration 5 has no forget_at: its tombstone ends at
// expires_at.
func keyForgotten(k, now string) string {
	return k + `.state = 'completed' AND ` + forgetAt(k) + ` <= ` + now
}

// forgetAt is the end of the key row k's tombstone.
func forgetAt(k string) string { return `coalesce(` + k + `.forget_at, ` + k + `.expires_at)` }

// keyPayloadStored: the completed key row k still holds its outcome's
// payload (Cleanup sets outcome_ref, never NULL before, to NULL with the
// header and body when it drops them).
func keyPayloadStored(k string) string { return k + `.outcome_ref IS NOT NULL` }

// claimExpired: the key row k is a claim whose lease expired more than tol
// before now (claimrule.Lapsed).
func claimExpired(k, now, tol string) string { return claimed(k) + ` AND ` + leaseLapsed(k, now, tol) }

// claimed: the key row k is a claim.
func claimed(k string) string { return k + `.state = 'claimed'` }

// leaseLapsed: the lease of the claim k expired more than tol before now.
func leaseLapsed(k, now, tol string) string { return k + `.lease_until < ` + now + ` - ` + tol }

// keyDeletable: what Cleanup deletes of the key row k (at c): a tombstone
// past its end, or an abandoned claim.
func keyDeletable(k string) string {
	return `(` + keyForgotten(k, `c.now`) + `) OR (` + claimExpired(k, `c.now`, `c.tol`) + `)`
}

// keyDroppable: a completed key row k (at c) whose payload Cleanup drops:
// past its retention, its payload still stored, and not past its tombstone
// (which Cleanup deletes instead).
func keyDroppable(k string) string {
	return keyExpired(k, `c.now`) + ` AND ` + keyPayloadStored(k) + ` AND ` + forgetAt(k) + ` > c.now`
}

// keyColumnsAt are keyColumns of the key row k as a read at now reports
// them: a completed key past its retention has the state 'expired' and no
// payload (header, body, ref), only its status code, whether or not
// Cleanup dropped the payload yet.
func keyColumnsAt(k, now string) string {
	cols := make([]string, len(keyColumns))
	for i, c := range keyColumns {
		switch c {
		case "state":
			cols[i] = `CASE WHEN ` + keyExpired(k, now) + ` THEN '` + string(contract.KeyExpired) + `' ELSE ` + k + `.state END AS state`
		case "outcome_header", "outcome_body", "outcome_ref":
			cols[i] = `CASE WHEN ` + keyExpired(k, now) + ` THEN NULL ELSE ` + k + `.` + c + ` END AS ` + c
		default:
			cols[i] = k + `.` + c
		}
	}
	return strings.Join(cols, ", ")
}

// terminalAged: the workflow row w is terminal and was not updated for
// @terminal_age (at c).
func terminalAged(w string) string {
	return w + `.status IN (` + terminal + `) AND ` + w + `.updated_at <= c.now - make_interval(secs => @terminal_age::float8)`
}

// fenceParams are a fence as the parameters of a statement: all NULL when
// there is no fence.
type fenceParams struct {
	FenceResource sql.Null[string]
	FenceOwner    sql.Null[string]
	FenceToken    sql.Null[int64]
}

func fenceOf(f *contract.Fence) fenceParams {
	if f == nil {
		return fenceParams{}
	}
	return fenceParams{
		FenceResource: sql.Null[string]{V: f.Resource, Valid: true},
		FenceOwner:    sql.Null[string]{V: f.Owner, Valid: true},
		FenceToken:    sql.Null[int64]{V: f.Token, Valid: true},
	}
}

// fenceMatch: the lease row l is the one of the fence (@scope,
// @fence_resource, @fence_owner, @fence_token) and is held at now.
func fenceMatch(l, now, tol string) string {
	return l + `.scope = @scope::text AND ` + l + `.resource = @fence_resource::text AND ` +
		l + `.owner = @fence_owner::text AND ` + l + `.token = @fence_token::bigint
    AND ` + leaseHeld(l, now, tol)
}

// fenceCTE selects, and share-locks, the lease row that proves the fence;
// it is empty when the fence is not valid or not given. The share lock
// makes the check atomic with the write: a takeover (an UPDATE of that row)
// waits until the write commits, and a takeover that committed first is
// seen (READ COMMITTED re-checks a locked row's latest version).
var fenceCTE = `f AS (
  SELECT 1 FROM {schema}.leases l, c
  WHERE @fence_resource::text IS NOT NULL AND ` + fenceMatch("l", "c.now", "c.tol") + `
  FOR SHARE OF l)`

// fenceOK is whether the fence, if any, held (needs fenceCTE).
const fenceOK = `(@fence_resource::text IS NULL OR EXISTS (SELECT 1 FROM f))`

// --- workflows ---

type createWorkflowParams struct {
	Now       sql.Null[time.Time]
	Scope     contract.Scope
	ID        string
	RequestID string
	Status    contract.Status
	Snapshot  []byte
}

func (p createWorkflowParams) args() []any {
	return []any{null(p.Now), string(p.Scope), p.ID, p.RequestID, string(p.Status), p.Snapshot}
}

type createdRow struct{ created time.Time }

func (r *createdRow) dest() []any { return []any{&r.created} }

// No row: the workflow exists.
var qCreateWorkflow = newQuery(write, "CreateWorkflow", `INSERT INTO {schema}.workflows AS w
  (scope, id, request_id, status, revision, snapshot, created_at, updated_at)
SELECT @scope::text, @id::text, @request_id::text, @status::text, 1, @snapshot::bytea, c.now, c.now
FROM `+clockFrom+`
ON CONFLICT (scope, id) DO NOTHING
RETURNING w.created_at`, createWorkflowParams.args, (*createdRow).dest)

type workflowIDParams struct {
	Scope contract.Scope
	ID    string
}

func (p workflowIDParams) args() []any { return []any{string(p.Scope), p.ID} }

var qGetWorkflow = newQuery(read, "GetWorkflow", `SELECT `+qualified("w", workflowColumns)+` FROM {schema}.workflows w WHERE w.scope = @scope::text AND w.id = @id::text`,
	workflowIDParams.args, (*workflowRow).dest)

type updateWorkflowParams struct {
	Now            sql.Null[time.Time]
	Tol            time.Duration
	Scope          contract.Scope
	ID             string
	ExpectStatus   contract.Status
	ExpectRevision int64 // 0: any
	fenceParams
	Status    contract.Status // the new values
	RequestID string
	Snapshot  []byte
}

func (p updateWorkflowParams) args() []any {
	return []any{null(p.Now), p.Tol.Seconds(), string(p.Scope), p.ID, string(p.ExpectStatus), p.ExpectRevision,
		null(p.FenceResource), null(p.FenceOwner), null(p.FenceToken), string(p.Status), p.RequestID, p.Snapshot}
}

// updateWorkflowRow is whether the update applied, whether the fence held,
// and the record.
type updateWorkflowRow struct {
	applied, fenceOK bool
	workflowRow
}

func (r *updateWorkflowRow) dest() []any { return r.workflowRow.destAfter(&r.applied, &r.fenceOK) }

// One row: applied = true and the new record; or applied = false, the
// current record as of the statement's snapshot and whether the fence held,
// so the caller can say why. No row: the workflow does not exist.
var qUpdateWorkflow = newQuery(write, "UpdateWorkflow", `WITH `+clockCTE+`,
`+fenceCTE+`,
u AS (
  UPDATE {schema}.workflows w
  SET status = @status::text, request_id = @request_id::text, snapshot = @snapshot::bytea,
      revision = w.revision + 1, updated_at = c.now
  FROM c
  WHERE w.scope = @scope::text AND w.id = @id::text AND w.status = @expect_status::text
    AND (@expect_revision::bigint = 0 OR w.revision = @expect_revision::bigint)
    AND w.status NOT IN (`+terminal+`)
    AND `+fenceOK+`
  RETURNING `+qualified("w", workflowColumns)+`)
SELECT true, true, `+qualified("u", workflowColumns)+` FROM u
UNION ALL
SELECT false, `+fenceOK+`, `+qualified("w", workflowColumns)+`
FROM {schema}.workflows w
WHERE w.scope = @scope::text AND w.id = @id::text AND NOT EXISTS (SELECT 1 FROM u)`,
	updateWorkflowParams.args, (*updateWorkflowRow).dest).coalesced(func(p updateWorkflowParams) (lockKey, bool) {
	return lockKey{lockWorkflows, p.Scope, p.ID}, !p.FenceResource.Valid
}).withRows(`WITH p AS MATERIALIZED (SELECT * FROM {rows}),
u AS (
  UPDATE {schema}.workflows w
  SET status = p.status, request_id = p.request_id, snapshot = p.snapshot,
      revision = w.revision + 1, updated_at = ` + rowsClock + `
  FROM p
  WHERE w.scope = p.scope AND w.id = p.id AND w.status = p.expect_status
    AND (p.expect_revision = 0 OR w.revision = p.expect_revision)
    AND w.status NOT IN (` + terminal + `)
  RETURNING p.ord, ` + qualified("w", workflowColumns) + `)
SELECT u.ord, true, true, ` + qualified("u", workflowColumns) + ` FROM u
UNION ALL
SELECT p.ord, false, true, ` + qualified("w", workflowColumns) + `
FROM p JOIN {schema}.workflows w ON w.scope = p.scope AND w.id = p.id
WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.ord = p.ord)`)

type whyWorkflowParams struct {
	Now   sql.Null[time.Time]
	Tol   time.Duration
	Scope contract.Scope
	ID    string
	fenceParams
}

func (p whyWorkflowParams) args() []any {
	return []any{null(p.Now), p.Tol.Seconds(), string(p.Scope), p.ID,
		null(p.FenceResource), null(p.FenceOwner), null(p.FenceToken)}
}

// The second read after UpdateWorkflow failed for a reason its snapshot
// did not show: UpdateWorkflow's row when it does not apply, read in a new
// snapshot, without locks.
var qWhyWorkflow = newQuery(read, "WhyWorkflow", `WITH `+clockCTE+`
SELECT false, (@fence_resource::text IS NULL OR EXISTS (
    SELECT 1 FROM {schema}.leases l
    WHERE `+fenceMatch("l", "c.now", "c.tol")+`)), `+qualified("w", workflowColumns)+`
FROM {schema}.workflows w, c
WHERE w.scope = @scope::text AND w.id = @id::text`,
	whyWorkflowParams.args, (*updateWorkflowRow).dest)

type listWorkflowsParams struct {
	Scope contract.Scope
	After string
	Limit sql.Null[int] // NULL: no limit
}

func (p listWorkflowsParams) args() []any { return []any{string(p.Scope), p.After, null(p.Limit)} }

var qListWorkflows = newQuery(read, "ListWorkflows", `SELECT `+qualified("w", workflowColumns)+` FROM {schema}.workflows w
WHERE w.scope = @scope::text AND w.id > @after::text ORDER BY w.id LIMIT @limit::int`,
	listWorkflowsParams.args, (*workflowRow).dest)

type listWorkflowsByStatusParams struct {
	Scope  contract.Scope
	After  string
	Limit  sql.Null[int] // NULL: no limit
	Status contract.Status
}

func (p listWorkflowsByStatusParams) args() []any {
	return []any{string(p.Scope), p.After, null(p.Limit), string(p.Status)}
}

var qListWorkflowsByStatus = newQuery(read, "ListWorkflowsByStatus", `SELECT `+qualified("w", workflowColumns)+` FROM {schema}.workflows w
WHERE w.scope = @scope::text AND w.status = @status::text AND w.id > @after::text ORDER BY w.id LIMIT @limit::int`,
	listWorkflowsByStatusParams.args, (*workflowRow).dest)

// --- idempotency keys ---

type claimKeyParams struct {
	Now         sql.Null[time.Time]
	Tol         time.Duration
	Scope       contract.Scope
	Key         string
	Fingerprint string
	WorkflowID  string
	Token       string // the new claim's
	TTL         time.Duration
}

func (p claimKeyParams) args() []any {
	return []any{null(p.Now), p.Tol.Seconds(), string(p.Scope), p.Key, p.Fingerprint, p.WorkflowID, p.Token, p.TTL.Seconds()}
}

// claimKeyRow: what durable_claim_key did (taken: claimTakenNone when it
// took nothing or was not called, claimTakenNew, claimTakenReclaim,
// claimTakenHeld); the key as the statement's snapshot saw it, with the
// facts of the claim rule (flags: the sum of claimConds, one int, as a
// column each would cost the replay measurably; the row's state gives
// claimrule.Completed); the statement's clock with the new claim's
// lease_until, which the caller needs to build a claim it took; and
// keyRow, which holds empty values when the snapshot had no row.
//
// ClaimKey's locked form (qClaimKeyLock) returns the same row: taken is
// claimTakenNew when it inserted the claim, and the facts and the record
// are those of the latest version of the row, locked.
type claimKeyRow struct {
	taken, flags int64
	now, until   time.Time
	keyRow
}

// What durable_claim_key returns (migrations 000004 and 000005), in
// claimKeyRow.taken.
const (
	claimTakenNone    = 0 // nothing taken (or the function not called)
	claimTakenNew     = 1 // a new claim, created now
	claimTakenReclaim = 2 // the claim the statement read, reclaimed
	claimTakenHeld    = 3 // the caller's own claim the statement read (its token), handed back with a new lease
)

// facts are the claim rule's facts of the row the statement read.
func (r *claimKeyRow) facts() claimrule.Facts {
	f := claimrule.Facts(r.flags)
	if f&claimrule.Found != 0 && r.state == string(contract.KeyCompleted) {
		f |= claimrule.Completed
	}
	return f
}

func (r *claimKeyRow) dest() []any {
	return r.keyRow.destAfter(&r.taken, &r.flags, &r.now, &r.until)
}

// claimFrame is what the predicates of the claim rule are written over:
// the key row k, the claim's time and clock tolerance, and the claiming
// request's fingerprint, workflow ID and token, as SQL expressions.
// ClaimKey's statement (claimInStatement), durable_claim_key's DO UPDATE
// (claimInFunction) and its UPDATE of the caller's own claim (claimInHold)
// write the same predicates over different expressions.
type claimFrame struct{ k, now, tol, fingerprint, workflowID, token string }

// claimInStatement: ClaimKey's statement, over the key row k of its read.
var claimInStatement = claimFrame{k: "k", now: clock, tol: tolerance,
	fingerprint: "@fingerprint::text", workflowID: "@workflow_id::text", token: "@token::text"}

// claimInFunction: durable_claim_key's INSERT … ON CONFLICT DO UPDATE
// (migration 000005, whose text cannot change), over the stored row k and
// the row it would insert, excluded, created at the claim's time. The
// migration's WHERE is claimTakeover(claimInFunction, "p_seen_token"),
// which TestClaimKeyFunctionIsTheRule checks.
var claimInFunction = claimFrame{k: "k", now: "excluded.created_at", tol: "make_interval(secs => p_tol)",
	fingerprint: "excluded.fingerprint", workflowID: "excluded.workflow_id", token: "excluded.token"}

// claimInHold: durable_claim_key's UPDATE of the caller's own claim
// (migration 000005), over the stored row k and the function's
// parameters. Its WHERE, after the key, is claimHeld(claimInHold).
var claimInHold = claimFrame{k: "k", now: "v_now", tol: "make_interval(secs => p_tol)",
	fingerprint: "p_fingerprint", workflowID: "p_workflow_id", token: "p_token"}

// claimInLock: ClaimKey's locked form (qClaimKeyLock), over the row i that
// its INSERT … ON CONFLICT inserted or locked, at the clock c.
var claimInLock = claimFrame{k: "i", now: "c.now", tol: "c.tol",
	fingerprint: "@fingerprint::text", workflowID: "@workflow_id::text", token: "@token::text"}

// sameRequest: the key row of fr is bound to fr's request (an empty
// workflow ID matches any): claimrule.SameRequest in SQL.
func sameRequest(fr claimFrame) string {
	return fr.k + `.fingerprint = ` + fr.fingerprint + ` AND (` + fr.workflowID + ` = '' OR ` + fr.workflowID + ` = ` + fr.k + `.workflow_id)`
}

// ownClaim: the key row of fr is a claim of fr's token (claimrule.Own). The
// token is ClaimRequest.Token, or else a fresh random one that no stored
// row has.
func ownClaim(fr claimFrame) string { return claimed(fr.k) + ` AND ` + fr.k + `.token = ` + fr.token }

// claimConds are the facts of the claim rule that ClaimKey's statement
// reads, each as a predicate on frame fr (NULL when fr's row is the NULL
// side of an outer join). Its flags column is their sum
// (claimFlags): claimrule.Facts without Completed.
var claimConds = []struct {
	fact claimrule.Facts
	sql  func(fr claimFrame) string
}{
	{claimrule.Found, func(fr claimFrame) string { return fr.k + `.key IS NOT NULL` }},
	{claimrule.Live, func(fr claimFrame) string { return `NOT (` + keyForgotten(fr.k, fr.now) + `)` }},
	{claimrule.Lapsed, func(fr claimFrame) string { return claimExpired(fr.k, fr.now, fr.tol) }},
	{claimrule.Match, sameRequest},
	{claimrule.Expired, func(fr claimFrame) string { return keyExpired(fr.k, fr.now) }},
	{claimrule.Own, ownClaim},
}

// claimFlags is the flags column of ClaimKey's statement: the facts of
// claimConds that hold on fr's row, as the sum of their bits.
func claimFlags(fr claimFrame) string {
	terms := make([]string, len(claimConds))
	for i, c := range claimConds {
		terms[i] = `coalesce(` + c.sql(fr) + `, false)::int * ` + strconv.Itoa(int(c.fact))
	}
	return strings.Join(terms, "\n    + ")
}

// claimFree: fr has no stored row (claimrule.Found does not hold).
func claimFree(fr claimFrame) string { return fr.k + `.key IS NULL` }

// claimTakeover: the stored row of fr can be taken by fr's request as a
// new claim or a reclaim (claimrule.Decide says New or Reclaim on a found
// row): a completed record past its tombstone (New), or an abandoned claim
// of the same request (Reclaim: claimed, lapsed, same request; and, when
// seen is not empty, still the claim of the token seen).
func claimTakeover(fr claimFrame, seen string) string {
	reclaim := claimed(fr.k)
	if seen != "" {
		reclaim += ` AND ` + fr.k + `.token = ` + seen
	}
	reclaim += ` AND ` + leaseLapsed(fr.k, fr.now, fr.tol) + ` AND ` + sameRequest(fr)
	return `(` + keyForgotten(fr.k, fr.now) + `) OR (` + reclaim + `)`
}

// claimHeld: the stored row of fr is the caller's own claim of the same
// request (claimrule.Decide says Held): it is handed back.
func claimHeld(fr claimFrame) string { return ownClaim(fr) + ` AND ` + sameRequest(fr) }

// keyColumnsOrEmpty are keyColumns of k, the NOT NULL ones with an empty
// value when k is the NULL side of an outer join.
func keyColumnsOrEmpty(k string) string {
	cols := make([]string, len(keyColumns))
	for i, c := range keyColumns {
		switch c {
		case "scope", "key", "fingerprint", "workflow_id", "state":
			cols[i] = `coalesce(` + k + `.` + c + `, '')`
		case "created_at":
			cols[i] = `coalesce(` + k + `.` + c + `, 'epoch'::timestamptz)`
		default:
			cols[i] = k + `.` + c
		}
	}
	return strings.Join(cols, ", ")
}

// A plain read of the key (one row, also when there is none), with the
// facts of the claim rule (claimFlags). Only when that row says the key
// can be taken (claimrule: absent, completed past its tombstone, a claim
// of the same request that expired more than the tolerance ago, or the
// caller's own claim) does the CASE call durable_claim_key (migration
// 000005), which decides on the latest version of the row, locked, by the
// same predicates (claimTakeover, claimHeld): exactly one of racing claims
// or reclaims wins. Otherwise (the replay of a completed key, a tombstone,
// a live claim, another request's key) the statement is a SELECT: it
// locks nothing and writes nothing, and PostgreSQL sets up no insert (an
// INSERT that inserts nothing still opens the table's indexes and takes
// ROW EXCLUSIVE on the table, which cost the replay about 1.4 times a
// primary-key read).
//
// The function reclaims, or hands back, only the claim this row shows
// (its token), so the caller builds such a record from this row; a new
// claim's record is the request's, created at now, leased until until. The
// function computes the same clock in the same transaction.
//
// Under READ COMMITTED the read can miss a row committed after the
// statement began (the function's INSERT sees it and takes nothing): then
// taken = claimTakenNone on a row that looks takeable, and the caller runs
// the statement again, and after a few such rounds takes the locked form
// (qClaimKeyLock), which cannot miss.
//
// It may be coalesced (see coalesce.go): it locks the key's row only, and
// durable_claim_key has no exception block (no subtransaction) and ends
// nothing, so in a batch's transaction a claim sees the rows the earlier
// statements of the batch wrote, as if it ran after them: of two claims of
// one key in one batch, the first takes it and the second finds it live.
var qClaimKey = newQuery(write, "ClaimKey", `SELECT
  CASE WHEN `+claimFree(claimInStatement)+` OR `+claimTakeover(claimInStatement, "")+`
         OR `+claimHeld(claimInStatement)+`
       THEN {schema}.durable_claim_key(@now::timestamptz, @tol::float8, @scope::text, @key::text,
              @fingerprint::text, @workflow_id::text, @token::text, @ttl::float8, k.token)
       ELSE `+strconv.Itoa(claimTakenNone)+` END,
  `+claimFlags(claimInStatement)+`,
  `+clock+`, `+clock+` + make_interval(secs => @ttl::float8),
  `+keyColumnsOrEmpty("k")+`
FROM (SELECT) one LEFT JOIN {schema}.idempotency_keys k ON k.scope = @scope::text AND k.key = @key::text`,
	claimKeyParams.args, (*claimKeyRow).dest).coalesced(func(p claimKeyParams) (lockKey, bool) { return lockKey{lockKeys, p.Scope, p.Key}, true })

// ClaimKey's locked form, the first statement of a transaction (see
// Backend.claimLocked): it inserts the new claim, or else locks the stored
// row (ON CONFLICT DO UPDATE, setting nothing new: PostgreSQL guarantees
// one of the two even under concurrency, waiting for a concurrent writer of
// the row, so it cannot miss a row or lose a race) and returns its latest
// version with the facts of the claim rule, for the caller to decide on
// with claimrule.Decide. taken is claimTakenNew when it inserted (a row
// version no transaction updated has xmax 0). The clock is the statement's
// (statement_timestamp(), or @now), returned for qClaimKeyTake.
var qClaimKeyLock = newQuery(write, "ClaimKeyLock", `WITH c AS (SELECT `+clockOr(`statement_timestamp()`)+` AS now, `+tolerance+` AS tol),
i AS (
  INSERT INTO {schema}.idempotency_keys AS k (scope, key, fingerprint, workflow_id, state, token, lease_until, created_at)
  SELECT @scope::text, @key::text, @fingerprint::text, @workflow_id::text, 'claimed', @token::text,
         c.now + make_interval(secs => @ttl::float8), c.now
  FROM c
  ON CONFLICT (scope, key) DO UPDATE SET key = k.key
  RETURNING k.xmax = 0 AS inserted, `+qualified("k", append(slices.Clone(keyColumns), "token"))+`)
SELECT CASE WHEN i.inserted THEN `+strconv.Itoa(claimTakenNew)+` ELSE `+strconv.Itoa(claimTakenNone)+` END,
  `+claimFlags(claimInLock)+`,
  c.now, c.now + make_interval(secs => @ttl::float8),
  `+qualified("i", keyColumns)+`
FROM i, c`,
	claimKeyParams.args, (*claimKeyRow).dest)

// claimTakeParams: Now is the time qClaimKeyLock returned.
type claimTakeParams struct {
	Now         time.Time
	Scope       contract.Scope
	Key         string
	Fingerprint string
	WorkflowID  string
	Token       string
	TTL         time.Duration
}

func (p claimTakeParams) args() []any {
	return []any{p.Now, string(p.Scope), p.Key, p.Fingerprint, p.WorkflowID, p.Token, p.TTL.Seconds()}
}

// The write of ClaimKey's locked form, in the transaction that
// qClaimKeyLock locked the row in, when claimrule.Decide said the row can
// be taken: the assignments of durable_claim_key's DO UPDATE (a completed
// record is replaced by a new claim; a claim, reclaimed or handed back,
// keeps its workflow ID, creation time and waited mark).
var qClaimKeyTake = newQuery(write, "ClaimKeyTake", `UPDATE {schema}.idempotency_keys k SET
  fingerprint = @fingerprint::text,
  workflow_id = CASE WHEN k.state = 'completed' THEN @workflow_id::text ELSE k.workflow_id END,
  state = 'claimed', token = @token::text, lease_until = @now::timestamptz + make_interval(secs => @ttl::float8),
  created_at = CASE WHEN k.state = 'completed' THEN @now::timestamptz ELSE k.created_at END,
  completed_at = NULL, expires_at = NULL, forget_at = NULL, outcome_code = NULL,
  outcome_header = NULL, outcome_body = NULL, outcome_ref = NULL,
  waited = k.waited AND k.state = 'claimed'
WHERE k.scope = @scope::text AND k.key = @key::text
RETURNING `+qualified("k", keyColumns),
	claimTakeParams.args, (*keyRow).dest)

type completeKeyParams struct {
	Now       sql.Null[time.Time]
	Tol       time.Duration
	Scope     contract.Scope
	Key       string
	Token     string // the claim's
	Code      int64
	Header    []byte // encodeHeader's
	Body      []byte
	Ref       string
	Retain    time.Duration
	Tombstone time.Duration // ForgetAt = CompletedAt + max(Retain, Tombstone)
	fenceParams
	Channel string // NOTIFY
}

func (p completeKeyParams) args() []any {
	return []any{null(p.Now), p.Tol.Seconds(), string(p.Scope), p.Key, p.Token, p.Code, p.Header,
		p.Body, p.Ref, p.Retain.Seconds(), p.Tombstone.Seconds(), null(p.FenceResource), null(p.FenceOwner), null(p.FenceToken), p.Channel}
}

// completeKeyRow: whether the completion applied, whether the token
// matches, whether the record is live (not past its tombstone), whether
// the fence held, and the record.
type completeKeyRow struct {
	applied, tokenOK, live, fenceOK bool
	keyRow
}

func (r *completeKeyRow) dest() []any {
	return r.keyRow.destAfter(&r.applied, &r.tokenOK, &r.live, &r.fenceOK)
}

// completeKeySQL is CompleteKey's statement with the time clk. One row:
// applied and the completed record; or not applied and the record as the
// snapshot saw it (a tombstone reported as expired). No row: no record. It
// notifies only a key that a WaitKey marked (notifyIfWaited).
//
// Being an UPDATE, it keeps the row locked until its transaction ends:
// at once for CompleteKey, at the caller's COMMIT for CompleteKeyTx, so
// that a reclaim waits for that commit.
func completeKeySQL(clk string) string {
	return `WITH c AS (SELECT ` + clk + ` AS now, ` + tolerance + ` AS tol),
` + fenceCTE + `,
u AS (
  UPDATE {schema}.idempotency_keys k
  SET state = 'completed', outcome_code = @code::int, outcome_header = @header::bytea,
      outcome_body = @body::bytea, outcome_ref = @ref::text, completed_at = c.now,
      expires_at = c.now + make_interval(secs => @retain::float8),
      forget_at = c.now + make_interval(secs => greatest(@retain::float8, @tombstone::float8)), lease_until = NULL
  FROM c
  WHERE k.scope = @scope::text AND k.key = @key::text AND k.token = @token::text AND k.state = 'claimed'
    AND ` + fenceOK + `
  RETURNING ` + keyColumnsAt("k", "c.now") + `, ` + notifyIfWaited("k") + `)
SELECT true, true, true, true, ` + qualified("k", keyColumns) + ` FROM u k
UNION ALL
SELECT false, (k.token = @token::text), NOT (` + keyForgotten("k", "c.now") + `),
       ` + fenceOK + `, ` + keyColumnsAt("k", "c.now") + `
FROM {schema}.idempotency_keys k, c
WHERE k.scope = @scope::text AND k.key = @key::text AND NOT EXISTS (SELECT 1 FROM u)`
}

var qCompleteKey = newQuery(write, "CompleteKey", completeKeySQL(clock), completeKeyParams.args, (*completeKeyRow).dest).coalesced(func(p completeKeyParams) (lockKey, bool) {
	return lockKey{lockKeys, p.Scope, p.Key}, !p.FenceResource.Valid
})

// CompleteKey's statement inside a transaction (CompleteKeyTx): the clock
// is statement_timestamp(), not the transaction's start, as for FenceTx.
var qCompleteKeyTx = newQuery(write, "CompleteKeyTx", completeKeySQL(clockOr(`statement_timestamp()`)),
	completeKeyParams.args, (*completeKeyRow).dest)

type renewKeyParams struct {
	Now   sql.Null[time.Time]
	Scope contract.Scope
	Key   string
	Token string
	TTL   time.Duration
}

func (p renewKeyParams) args() []any {
	return []any{null(p.Now), string(p.Scope), p.Key, p.Token, p.TTL.Seconds()}
}

// No row: the token does not hold the claim.
var qRenewKey = newQuery(write, "RenewKey", `UPDATE {schema}.idempotency_keys k SET lease_until = c.now + make_interval(secs => @ttl::float8)
FROM `+clockFrom+`
WHERE k.scope = @scope::text AND k.key = @key::text AND k.token = @token::text AND k.state = 'claimed'
RETURNING `+qualified("k", keyColumns),
	renewKeyParams.args, (*keyRow).dest).coalesced(func(p renewKeyParams) (lockKey, bool) { return lockKey{lockKeys, p.Scope, p.Key}, true })

type releaseKeyParams struct {
	Scope   contract.Scope
	Key     string
	Token   string
	Channel string // NOTIFY
}

func (p releaseKeyParams) args() []any { return []any{string(p.Scope), p.Key, p.Token, p.Channel} }

type countRow struct{ n int64 }

func (r *countRow) dest() []any { return []any{&r.n} }

// The number of claims deleted: 0 or 1 (notified when a WaitKey marked it).
var qReleaseKey = newQuery(write, "ReleaseKey", `WITH d AS (
  DELETE FROM {schema}.idempotency_keys k
  WHERE k.scope = @scope::text AND k.key = @key::text AND k.token = @token::text AND k.state = 'claimed'
  RETURNING `+notifyIfWaited("k")+`)
SELECT count(*) FROM d`,
	releaseKeyParams.args, (*countRow).dest).coalesced(func(p releaseKeyParams) (lockKey, bool) { return lockKey{lockKeys, p.Scope, p.Key}, true })

type getKeyParams struct {
	Now   sql.Null[time.Time]
	Scope contract.Scope
	Key   string
}

func (p getKeyParams) args() []any { return []any{null(p.Now), string(p.Scope), p.Key} }

// No row: no record, or a tombstone past its end. A completed key past its
// retention reads as expired, its payload left out (keyColumnsAt).
var qGetKey = newQuery(read, "GetKey", `SELECT `+keyColumnsAt("k", clock)+` FROM {schema}.idempotency_keys k
WHERE k.scope = @scope::text AND k.key = @key::text
  AND NOT (`+keyForgotten("k", clock)+`)`,
	getKeyParams.args, (*keyRow).dest)

// waitKeyRow: whether this statement marked the claim waited, whether the
// row was marked in the statement's snapshot, and the record as that
// snapshot saw it (or as marked).
type waitKeyRow struct {
	marked, waited bool
	keyRow
}

func (r *waitKeyRow) dest() []any { return r.keyRow.destAfter(&r.marked, &r.waited) }

// WaitKey's read while its LISTEN connection is up: GetKey's, and it marks
// a claim waited, so that the statement that completes or deletes it
// notifies (notifyIfWaited). The mark is written only when the snapshot
// shows an unmarked claim; a claim already marked, a completed record or
// no record is only read.
//
// It is sent only after LISTEN is active, so a completion that commits
// after the mark notifies a listening session. A completion that commits
// first is seen: either in the snapshot (state completed), or by the
// UPDATE, which waits for the completion's lock and then re-checks its
// WHERE on the completed row and leaves it alone; the row then says
// marked = false over an unmarked claim in the snapshot, and the caller
// reads again. No row: no record (or a tombstone past its end).
var qWaitKey = newQuery(write, "WaitKey", `WITH u AS (
  UPDATE {schema}.idempotency_keys k SET waited = true
  WHERE k.scope = @scope::text AND k.key = @key::text AND k.state = 'claimed' AND NOT k.waited
  RETURNING `+qualified("k", keyColumns)+`)
SELECT true, true, `+qualified("u", keyColumns)+` FROM u
UNION ALL
SELECT false, k.waited, `+keyColumnsAt("k", clock)+`
FROM {schema}.idempotency_keys k
WHERE k.scope = @scope::text AND k.key = @key::text
  AND NOT (`+keyForgotten("k", clock)+`) AND NOT EXISTS (SELECT 1 FROM u)`,
	getKeyParams.args, (*waitKeyRow).dest)

// --- leases ---

type acquireLeaseParams struct {
	Now      sql.Null[time.Time]
	Tol      time.Duration
	Scope    contract.Scope
	Resource string
	Owner    string
	TTL      time.Duration
	Value    []byte // nil: the empty value (NULL)
	Channel  string // NOTIFY
	Payload  string // leaseNotifyPayload(Scope, Resource)
}

func (p acquireLeaseParams) args() []any {
	return []any{null(p.Now), p.Tol.Seconds(), string(p.Scope), p.Resource, p.Owner, p.TTL.Seconds(), p.Value, p.Channel, p.Payload}
}

// acquirePermitLeaseParams: AcquireLease on a permit's resource, whose
// semaphore's resource is Semaphore.
type acquirePermitLeaseParams struct {
	acquireLeaseParams
	Semaphore string
}

func (p acquirePermitLeaseParams) args() []any {
	return append(p.acquireLeaseParams.args(), p.Semaphore)
}

// grantRow is a granted lease and whether its statement notified it.
type grantRow struct {
	leaseRow
	notified bool
}

func (r *grantRow) dest() []any { return append(r.leaseRow.dest(), &r.notified) }

// grantSet is the DO UPDATE of a grant: the takeover of a released lease
// or one that expired more than the tolerance ago, which draws its token
// after locking the row, so the token is greater than the one it
// replaces. The row's mark stays (a watch lasts across grants).
var grantSet = `ON CONFLICT (scope, resource) DO UPDATE SET
  owner = excluded.owner, token = nextval('{schema}.lease_tokens'::regclass),
  acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, released = false, value = excluded.value
WHERE l.released OR ` + leaseExpired("l", "excluded.acquired_at", tolerance)

// grantSQL is AcquireLease's statement, with notify the notified column: a
// free resource is inserted with the next token; a stored lease that was
// released or expired more than the tolerance ago is taken over
// (grantSet). See AcquireLease for the one residual hazard of the insert
// branch. No row: the lease is held.
func grantSQL(notify string) string {
	return `INSERT INTO {schema}.leases AS l (scope, resource, owner, token, acquired_at, expires_at, released, value)
SELECT @scope::text, @resource::text, @owner::text, nextval('{schema}.lease_tokens'::regclass), c.now,
       c.now + make_interval(secs => @ttl::float8), false, @value::bytea
FROM ` + clockFrom + `
` + grantSet + `
RETURNING ` + qualified("l", leaseColumns) + `, ` + notify
}

// AcquireLease of a plain resource: the grant notifies when the lease is
// watched.
var qAcquireLease = newQuery(write, "AcquireLease", grantSQL(notified("l", "")),
	acquireLeaseParams.args, (*grantRow).dest)

// AcquireLease of a permit's resource (a Store without PermitAcquirer
// grants permits so): also when the semaphore is watched.
var qAcquireLeaseOnPermit = newQuery(write, "AcquireLeaseOnPermit", grantSQL(notified("l", "@semaphore::text")),
	acquirePermitLeaseParams.args, (*grantRow).dest)

type acquirePermitParams struct {
	Now      sql.Null[time.Time]
	Tol      time.Duration
	Scope    contract.Scope
	Resource string // the semaphore's
	Owner    string
	TTL      time.Duration
	Value    []byte // nil: the empty value (NULL)
	Permits  int
	Channel  string // NOTIFY
	Payload  string // leaseNotifyPayload(Scope, Resource): the semaphore's
}

func (p acquirePermitParams) args() []any {
	return []any{null(p.Now), p.Tol.Seconds(), string(p.Scope), p.Resource, p.Owner, p.TTL.Seconds(), p.Value, p.Permits, p.Channel, p.Payload}
}

// permitRow: whether a permit was granted, whether the snapshot showed a
// free one, and the grant (its resource, the lease, whether it notified);
// the grant's columns hold placeholders when nothing was granted.
type permitRow struct {
	granted, free bool
	resource      string
	grantRow
}

func (r *permitRow) dest() []any {
	return append([]any{&r.granted, &r.free, &r.resource}, r.grantRow.dest()...)
}

// The permits' rows of a semaphore are "resource#n": in the byte order of
// the resource column (COLLATE "C") they lie between "resource#" and
// "resource#:" (":" follows the digits), one range of the primary key. h is the
// numbers of the permits held in the statement's snapshot (not released,
// not expired more than the tolerance ago: what AcquireLease would
// refuse), f the lowest number within @permits that h lacks: 1, or one
// past a held number (the lowest free number m is 1 or follows the held
// m-1). The grant is AcquireLease's on that permit. One row: granted and
// the grant; or not granted, and
// free says whether the snapshot showed a free permit: then a concurrent
// grant took it first (its row was inserted after the snapshot, or taken
// over before this statement's DO UPDATE locked it), and the caller runs
// the statement again.
var qAcquirePermit = newQuery(write, "AcquirePermit", `WITH `+clockCTE+`,
h AS (
  SELECT substr(l.resource, length(@resource::text) + 2)::int AS n
  FROM {schema}.leases l, c
  WHERE l.scope = @scope::text AND l.resource > @resource::text || '#' AND l.resource < @resource::text || '#:'
    AND substr(l.resource, length(@resource::text) + 2) SIMILAR TO '[1-9][0-9]*' AND length(l.resource) <= length(@resource::text) + 5
    AND NOT l.released AND NOT (`+leaseExpired("l", "c.now", "c.tol")+`)),
f AS (
  SELECT min(x.n) AS n FROM (SELECT 1 AS n UNION ALL SELECT h.n + 1 FROM h) x
  WHERE x.n <= @permits::int AND NOT EXISTS (SELECT 1 FROM h WHERE h.n = x.n)),
g AS (
  INSERT INTO {schema}.leases AS l (scope, resource, owner, token, acquired_at, expires_at, released, value)
  SELECT @scope::text, @resource::text || '#' || f.n, @owner::text, nextval('{schema}.lease_tokens'::regclass), c.now,
         c.now + make_interval(secs => @ttl::float8), false, @value::bytea
  FROM f, c
  WHERE f.n IS NOT NULL
  `+strings.ReplaceAll(grantSet, "\n", "\n  ")+`
  RETURNING l.resource, `+qualified("l", leaseColumns)+`, `+notified("l", "@resource::text")+`)
SELECT true, true, g.* FROM g
UNION ALL
SELECT false, f.n IS NOT NULL, '', '', 0::bigint, c.now, c.now, NULL::bytea, false
FROM f, c
WHERE NOT EXISTS (SELECT 1 FROM g)`,
	acquirePermitParams.args, (*permitRow).dest)

type renewLeaseParams struct {
	Now      sql.Null[time.Time]
	Tol      time.Duration
	Scope    contract.Scope
	Resource string
	Owner    string
	Token    int64
	TTL      time.Duration
}

func (p renewLeaseParams) args() []any {
	return []any{null(p.Now), p.Tol.Seconds(), string(p.Scope), p.Resource, p.Owner, p.Token, p.TTL.Seconds()}
}

// No row: the lease is no longer held. The value stays.
var qRenewLease = newQuery(write, "RenewLease", `UPDATE {schema}.leases l SET expires_at = c.now + make_interval(secs => @ttl::float8)
FROM (SELECT `+clockCols+`) c
WHERE l.scope = @scope::text AND l.resource = @resource::text AND l.owner = @owner::text AND l.token = @token::bigint
  AND `+leaseHeld("l", "c.now", "c.tol")+`
RETURNING `+qualified("l", leaseColumns),
	renewLeaseParams.args, (*leaseRow).dest).coalesced(func(p renewLeaseParams) (lockKey, bool) { return lockKey{lockLeases, p.Scope, p.Resource}, true }).
	withRows(`UPDATE {schema}.leases l SET expires_at = ` + rowsClock + ` + make_interval(secs => p.ttl)
FROM {rows}
WHERE l.scope = p.scope AND l.resource = p.resource AND l.owner = p.owner AND l.token = p.token
  AND ` + leaseHeld("l", rowsClock, rowsTolerance) + `
RETURNING p.ord, ` + qualified("l", leaseColumns))

type releaseLeaseParams struct {
	Now      sql.Null[time.Time]
	Scope    contract.Scope
	Resource string
	Owner    string
	Token    int64
	Channel  string // NOTIFY
	Payload  string // leaseNotifyPayload(Scope, Resource)
}

func (p releaseLeaseParams) args() []any {
	return []any{null(p.Now), string(p.Scope), p.Resource, p.Owner, p.Token, p.Channel, p.Payload}
}

// releasePermitParams: ReleaseLease of a permit, whose semaphore's
// resource is Semaphore.
type releasePermitParams struct {
	releaseLeaseParams
	Semaphore string
}

func (p releasePermitParams) args() []any { return append(p.releaseLeaseParams.args(), p.Semaphore) }

type tokenRow struct{ token int64 }

func (r *tokenRow) dest() []any { return []any{&r.token} }

// releaseRow is the released lease's token and whether the release
// notified.
type releaseRow struct {
	token    int64
	notified bool
}

func (r *releaseRow) dest() []any { return []any{&r.token, &r.notified} }

// releaseSQL is ReleaseLease's statement, with notify the notified
// column. The row stays (released, its value dropped) so that tokens keep
// growing and a watch's mark stays; Cleanup deletes it later. No row:
// nothing was held.
func releaseSQL(notify string) string {
	return `UPDATE {schema}.leases l SET released = true, expires_at = least(l.expires_at, c.now), value = NULL
FROM ` + clockFrom + `
WHERE l.scope = @scope::text AND l.resource = @resource::text AND l.owner = @owner::text AND l.token = @token::bigint
  AND NOT l.released
RETURNING l.token, ` + notify
}

// ReleaseLease of a plain lease: it notifies when the lease is watched.
var qReleaseLease = newQuery(write, "ReleaseLease", releaseSQL(notified("l", "")),
	releaseLeaseParams.args, (*releaseRow).dest).coalesced(func(p releaseLeaseParams) (lockKey, bool) { return lockKey{lockLeases, p.Scope, p.Resource}, true })

// ReleaseLease of a permit: also when its semaphore is watched.
var qReleasePermit = newQuery(write, "ReleasePermit", releaseSQL(notified("l", "@semaphore::text")),
	releasePermitParams.args, (*releaseRow).dest).coalesced(func(p releasePermitParams) (lockKey, bool) { return lockKey{lockLeases, p.Scope, p.Resource}, true })

type getLeaseParams struct {
	Scope    contract.Scope
	Resource string
}

func (p getLeaseParams) args() []any { return []any{string(p.Scope), p.Resource} }

var qGetLease = newQuery(read, "GetLease", `SELECT `+qualified("l", leaseColumns)+` FROM {schema}.leases l
WHERE l.scope = @scope::text AND l.resource = @resource::text AND NOT l.released`,
	getLeaseParams.args, (*leaseRow).dest)

type watchLeaseParams struct {
	Scope    contract.Scope
	Resource string
	MarkTTL  time.Duration
}

func (p watchLeaseParams) args() []any {
	return []any{string(p.Scope), p.Resource, p.MarkTTL.Seconds()}
}

// WatchLease's mark on the watched lease's row: until now() + @mark_ttl,
// on a released row that holds only the mark (placeholderTimes) when the
// lease has none. A mark with more than half its time left is not written
// again, so that watches of one lease from many waiters do not all write
// its row; the row is locked all the same (ON CONFLICT DO UPDATE locks the
// row it finds), so a grant, release or delete of it in flight commits
// before the watch returns, and one that comes later reads the mark. No
// row: nothing needed writing.
var qWatchLease = newQuery(write, "WatchLease", `INSERT INTO {schema}.leases AS l (scope, resource, owner, token, acquired_at, expires_at, released, watched_until)
VALUES (@scope::text, @resource::text, '', 0, `+placeholderTimes+`, true, now() + make_interval(secs => @mark_ttl::float8))
ON CONFLICT (scope, resource) DO UPDATE SET watched_until = excluded.watched_until
WHERE l.watched_until IS NULL OR l.watched_until < now() + make_interval(secs => @mark_ttl::float8) / 2
RETURNING 1`,
	watchLeaseParams.args, (*countRow).dest)

// watchPermitsParams: Last is the last resource a watch of the semaphore
// Resource covers (see watchRange).
type watchPermitsParams struct {
	Scope    contract.Scope
	Resource string
	Last     string
	MarkTTL  time.Duration
}

func (p watchPermitsParams) args() []any {
	return []any{string(p.Scope), p.Resource, p.Last, p.MarkTTL.Seconds()}
}

// A watch of a semaphore's resource also marks the rows of its permits
// that exist (those in (Resource, Last]), in a statement of its own that
// runs after qWatchLease committed the semaphore's mark (see WatchLease);
// a row whose mark has more than half its time left is left as it is. The
// number of rows marked.
var qWatchPermits = newQuery(write, "WatchPermits", `WITH m AS (
  UPDATE {schema}.leases l SET watched_until = now() + make_interval(secs => @mark_ttl::float8)
  WHERE l.scope = @scope::text AND l.resource > @resource::text AND l.resource <= @last::text
    AND (l.watched_until IS NULL OR l.watched_until < now() + make_interval(secs => @mark_ttl::float8) / 2)
  RETURNING 1)
SELECT count(*) FROM m`,
	watchPermitsParams.args, (*countRow).dest)

type leaseStateParams struct {
	Scope    contract.Scope
	Resource string
	Last     string
}

func (p leaseStateParams) args() []any { return []any{string(p.Scope), p.Resource, p.Last} }

type stateRow struct{ state string }

func (r *stateRow) dest() []any { return []any{&r.state} }

// The state of the rows a watch covers ([Resource, Last]) as one digest
// of every row's resource, token and released flag, for a watch that polls
// (no LISTEN): a grant changes its row's token (a new one from the
// sequence), a release its flag, a deletion the set of rows, so every
// change the watch must report changes the digest. Renewals do not.
var qLeaseState = newQuery(read, "LeaseState", `SELECT coalesce(encode(sha256(convert_to(
  string_agg(l.resource || ' ' || l.token || ' ' || l.released, ',' ORDER BY l.resource), 'UTF8')), 'hex'), '')
FROM {schema}.leases l
WHERE l.scope = @scope::text AND l.resource >= @resource::text AND l.resource <= @last::text`,
	leaseStateParams.args, (*stateRow).dest)

// fenceTxParams: the fence is always given.
type fenceTxParams struct {
	Now           sql.Null[time.Time]
	Tol           time.Duration
	Scope         contract.Scope
	FenceResource string
	FenceOwner    string
	FenceToken    int64
}

func (p fenceTxParams) args() []any {
	return []any{null(p.Now), p.Tol.Seconds(), string(p.Scope), p.FenceResource, p.FenceOwner, p.FenceToken}
}

// Runs inside the caller's transaction, so the clock is
// statement_timestamp(), not the transaction's start. No row: the fence is
// not valid.
var qFenceTx = newQuery(read, "FenceTx", `SELECT l.token FROM {schema}.leases l
WHERE `+fenceMatch("l", clockOr("statement_timestamp()"), tolerance)+`
FOR SHARE OF l`,
	fenceTxParams.args, (*tokenRow).dest)

// --- cleanup ---

type cleanupParams struct {
	Now         sql.Null[time.Time]
	Tol         time.Duration
	TerminalAge time.Duration
	Limit       int
	Channel     string // NOTIFY
}

func (p cleanupParams) args() []any {
	return []any{null(p.Now), p.Tol.Seconds(), p.TerminalAge.Seconds(), p.Limit, p.Channel}
}

type cleanupRow struct {
	workflows, keys, leases int64
	more                    bool
	notified                int64
	outcomes                int64
	leasesNotified          int64
}

func (r *cleanupRow) dest() []any {
	return []any{&r.workflows, &r.keys, &r.leases, &r.more, &r.notified, &r.outcomes, &r.leasesNotified}
}

// leaseDeletable: what Cleanup deletes of the lease row l (at c): a lease
// expired more than the tolerance ago (a released one too), except a
// released row that holds a live watch's mark (a watched lease's
// placeholder: see placeholderRows).
func leaseDeletable(l string) string {
	return leaseExpired(l, "c.now", "c.tol") + ` AND NOT (` + l + `.released AND ` + leaseWatched(l) + `)`
}

// placeholderRows re-inserts, in the statement that deleted them, the
// deleted lease rows d (scope, resource, watched_until) whose watch's
// mark is live, as released rows that hold only the mark: the mark
// survives the deletion, so the lease's next grant notifies. The statement
// deleted the old row, which no longer counts as a conflict.
func placeholderRows(d string) string {
	return `INSERT INTO {schema}.leases (scope, resource, owner, token, acquired_at, expires_at, released, watched_until)
  SELECT ` + d + `.scope, ` + d + `.resource, '', 0, ` + placeholderTimes + `, true, ` + d + `.watched_until
  FROM ` + d + ` WHERE ` + leaseWatched(d) + `
  ON CONFLICT (scope, resource) DO NOTHING`
}

// Each kind: pick up to limit+1 candidates, delete the first limit of them
// while re-checking the condition on the row's latest version (so a
// concurrent reclaim or renewal is never deleted), and report more when
// there was a candidate beyond the limit. Completed keys past their
// retention and not past their tombstone are a kind of their own: their
// payload (header, body, ref) is set to NULL, the row stays as the
// tombstone (outcomes counts them); the rows it updates and the rows kd
// deletes are disjoint (before and past forget_at at the same c.now). Released leases are deleted too
// but not counted: the contract's ReleaseLease already deleted them. The
// deleted keys that a WaitKey marked are notified (notified counts them),
// and so are the deleted leases that a WatchLease marks (leases_notified);
// their rows come back as the marks' placeholders (placeholderRows), which
// Cleanup leaves alone until the marks lapse.
var qCleanup = newQuery(write, "Cleanup", `WITH `+clockCTE+`,
wc AS (
  SELECT w.scope, w.id FROM {schema}.workflows w, c
  WHERE `+terminalAged("w")+`
  LIMIT @limit::int + 1),
wd AS (
  DELETE FROM {schema}.workflows w USING (SELECT * FROM wc LIMIT @limit::int) x, c
  WHERE w.scope = x.scope AND w.id = x.id
    AND `+terminalAged("w")+`
  RETURNING 1),
kc AS (
  SELECT k.scope, k.key FROM {schema}.idempotency_keys k, c
  WHERE `+keyDeletable("k")+`
  LIMIT @limit::int + 1),
kd AS (
  DELETE FROM {schema}.idempotency_keys k USING (SELECT * FROM kc LIMIT @limit::int) x, c
  WHERE k.scope = x.scope AND k.key = x.key
    AND (`+keyDeletable("k")+`)
  RETURNING k.scope, k.key, k.waited),
oc AS (
  SELECT k.scope, k.key FROM {schema}.idempotency_keys k, c
  WHERE `+keyDroppable("k")+`
  LIMIT @limit::int + 1),
od AS (
  UPDATE {schema}.idempotency_keys k SET outcome_header = NULL, outcome_body = NULL, outcome_ref = NULL
  FROM (SELECT * FROM oc LIMIT @limit::int) x, c
  WHERE k.scope = x.scope AND k.key = x.key
    AND `+keyDroppable("k")+`
  RETURNING 1),
lc AS (
  SELECT l.scope, l.resource FROM {schema}.leases l, c
  WHERE `+leaseDeletable("l")+`
  LIMIT @limit::int + 1),
ld AS (
  DELETE FROM {schema}.leases l USING (SELECT * FROM lc LIMIT @limit::int) x, c
  WHERE l.scope = x.scope AND l.resource = x.resource AND `+leaseDeletable("l")+`
  RETURNING l.scope, l.resource, l.released, l.watched_until),
lp AS (
  `+placeholderRows("ld")+`)
SELECT (SELECT count(*) FROM wd), (SELECT count(*) FROM kd),
       (SELECT count(*) FROM ld WHERE NOT ld.released),
       (SELECT count(*) FROM wc) > @limit::int OR (SELECT count(*) FROM kc) > @limit::int
         OR (SELECT count(*) FROM lc) > @limit::int OR (SELECT count(*) FROM oc) > @limit::int,
       (SELECT count(pg_notify(@channel::text, `+payload("k")+`)) FROM kd k WHERE k.waited),
       (SELECT count(*) FROM od),
       (SELECT count(pg_notify(@channel::text, `+leasePayload("l")+`)) FROM ld l WHERE NOT l.released AND `+leaseNotified("l")+`)`,
	cleanupParams.args, (*cleanupRow).dest)

type countCleanupParams struct {
	Now         sql.Null[time.Time]
	Tol         time.Duration
	TerminalAge time.Duration
	Limit       int
}

func (p countCleanupParams) args() []any {
	return []any{null(p.Now), p.Tol.Seconds(), p.TerminalAge.Seconds(), p.Limit}
}

type countCleanupRow struct{ workflows, keys, leases, outcomes int64 }

func (r *countCleanupRow) dest() []any {
	return []any{&r.workflows, &r.keys, &r.leases, &r.outcomes}
}

// Counts, each up to limit+1, what Cleanup would delete (released leases
// excepted) and the outcomes it would drop.
var qCountCleanup = newQuery(read, "CountCleanup", `WITH `+clockCTE+`
SELECT
  (SELECT count(*) FROM (SELECT 1 FROM {schema}.workflows w, c
     WHERE `+terminalAged("w")+`
     LIMIT @limit::int + 1) x),
  (SELECT count(*) FROM (SELECT 1 FROM {schema}.idempotency_keys k, c
     WHERE `+keyDeletable("k")+`
     LIMIT @limit::int + 1) x),
  (SELECT count(*) FROM (SELECT 1 FROM {schema}.leases l, c
     WHERE NOT l.released AND `+leaseExpired("l", "c.now", "c.tol")+`
     LIMIT @limit::int + 1) x),
  (SELECT count(*) FROM (SELECT 1 FROM {schema}.idempotency_keys k, c
     WHERE `+keyDroppable("k")+`
     LIMIT @limit::int + 1) x)`,
	countCleanupParams.args, (*countCleanupRow).dest)

type deleteRecordParams struct {
	Kind    contract.RecordKind // workflow, key or lease
	Scope   contract.Scope
	ID      string
	Channel string // NOTIFY
}

func (p deleteRecordParams) args() []any {
	return []any{string(p.Kind), string(p.Scope), p.ID, p.Channel}
}

type deleteRecordRow struct {
	found    bool
	notified int64
}

func (r *deleteRecordRow) dest() []any { return []any{&r.found, &r.notified} }

// Deletes one record whatever its state (the operator's way out for a
// record that cannot be decoded). Whether a live record existed (a released
// lease row does not count), and the NOTIFYs (counted) of a deleted key
// that a WaitKey marked or of a deleted lease that a WatchLease marks,
// whose row comes back as the mark's placeholder (placeholderRows).
var qDeleteRecord = newQuery(write, "DeleteRecord", `WITH wd AS (
  DELETE FROM {schema}.workflows w
  WHERE @kind::text = 'workflow' AND w.scope = @scope::text AND w.id = @id::text
  RETURNING 1),
kd AS (
  DELETE FROM {schema}.idempotency_keys k
  WHERE @kind::text = 'key' AND k.scope = @scope::text AND k.key = @id::text
  RETURNING k.scope, k.key, k.waited),
ld AS (
  DELETE FROM {schema}.leases l
  WHERE @kind::text = 'lease' AND l.scope = @scope::text AND l.resource = @id::text
  RETURNING l.scope, l.resource, l.released, l.watched_until),
lp AS (
  `+placeholderRows("ld")+`)
SELECT (SELECT count(*) FROM wd) + (SELECT count(*) FROM kd)
         + (SELECT count(*) FROM ld WHERE NOT ld.released) > 0,
       (SELECT count(pg_notify(@channel::text, `+payload("k")+`)) FROM kd k WHERE k.waited)
         + (SELECT count(pg_notify(@channel::text, `+leasePayload("l")+`)) FROM ld l WHERE NOT l.released AND `+leaseNotified("l")+`)`,
	deleteRecordParams.args, (*deleteRecordRow).dest)

// --- operator lists (contract.RecordLister) ---
//
// Like ListWorkflows: keyset pages in byte order (key and resource are
// COLLATE "C" columns since migration 2), each read in the order of the
// primary key, (scope, key) or (scope, resource), so that a page is an
// index range scan stopped at the limit, never a sort. A NULL @limit is no
// limit.

type listKeysParams struct {
	Now   sql.Null[time.Time]
	Scope contract.Scope
	After string
	Limit sql.Null[int]     // NULL: no limit
	State contract.KeyState // "": every state
}

func (p listKeysParams) args() []any {
	return []any{null(p.Now), string(p.Scope), p.After, null(p.Limit), string(p.State)}
}

// One statement for both the unfiltered and the state-filtered list: no
// index leads with the state, so either way the plan is the same scan of
// idempotency_keys_pkey in order, the state being a filter on its rows
// (two statements would differ only in text). Keys are listed as GetKey
// reads them: a completed key past its retention as expired, without its
// payload (keyColumnsAt; the filter is on that state, written on the
// stored state so that the planner estimates it as before), a tombstone past
// its end not at all (keyForgotten); a claim is listed, live or abandoned,
// until Cleanup deletes it.
var qListKeys = newQuery(read, "ListKeys", `SELECT `+keyColumnsAt("k", clock)+` FROM {schema}.idempotency_keys k
WHERE k.scope = @scope::text AND k.key > @after::text
  AND (@state::text = '' OR k.state = CASE WHEN @state::text = '`+string(contract.KeyExpired)+`' THEN 'completed' ELSE @state::text END
    AND (`+keyExpired("k", clock)+`) = (@state::text = '`+string(contract.KeyExpired)+`'))
  AND NOT (`+keyForgotten("k", clock)+`)
ORDER BY k.key LIMIT @limit::int`,
	listKeysParams.args, (*keyRow).dest)

// listedLeaseRow is a lease with its scope and resource, which
// leaseColumns leave out (GetLease and the lease writes know them from the
// request).
type listedLeaseRow struct {
	scope, resource string
	leaseRow
}

func (r *listedLeaseRow) dest() []any {
	return append([]any{&r.scope, &r.resource}, r.leaseRow.dest()...)
}

type listLeasesParams struct {
	Scope contract.Scope
	After string
	Limit sql.Null[int] // NULL: no limit
}

func (p listLeasesParams) args() []any { return []any{string(p.Scope), p.After, null(p.Limit)} }

// The leases GetLease would return: released ones never. Without the held
// filter the statement reads no clock.
var qListLeases = newQuery(read, "ListLeases", `SELECT l.scope, l.resource, `+qualified("l", leaseColumns)+` FROM {schema}.leases l
WHERE l.scope = @scope::text AND l.resource > @after::text AND NOT l.released
ORDER BY l.resource LIMIT @limit::int`,
	listLeasesParams.args, (*listedLeaseRow).dest)

type listLeasesHeldParams struct {
	Now   sql.Null[time.Time]
	Scope contract.Scope
	After string
	Limit sql.Null[int] // NULL: no limit
}

func (p listLeasesHeldParams) args() []any {
	return []any{null(p.Now), string(p.Scope), p.After, null(p.Limit)}
}

// Only the leases that expire after the store clock's now (no tolerance:
// this is a listing, not a fence check). A statement of its own rather
// than a filter on ListLeases: a parameter can only switch the clock
// condition off through a boolean, which the statement parameters do not
// carry; the plan is the same scan of leases_pkey in order, with the expiry
// as a filter (leases_expires_at would need a sort).
var qListLeasesHeld = newQuery(read, "ListLeasesHeld", `SELECT l.scope, l.resource, `+qualified("l", leaseColumns)+` FROM {schema}.leases l
WHERE l.scope = @scope::text AND l.resource > @after::text AND NOT l.released
  AND l.expires_at > `+clock+`
ORDER BY l.resource LIMIT @limit::int`,
	listLeasesHeldParams.args, (*listedLeaseRow).dest)

// --- migrations ---

type schemaVersionRow struct {
	version int64
	dirty   bool
}

func (r *schemaVersionRow) dest() []any { return []any{&r.version, &r.dirty} }

var qSchemaVersion = newQuery(read, "SchemaVersion", `SELECT version, dirty FROM {schema}.schema_migrations LIMIT 1`,
	noParams.args, (*schemaVersionRow).dest)
