package postgres

import (
	"strings"

	"github.com/durable-go/durable/contract"
)

// The SQL of the backend: one source for every client library. Each
// template is turned into final text once, when a Backend is built, by
// replacing {s} with the quoted schema and {terminal} with the list of
// terminal statuses. The texts use only $n placeholders with explicit casts,
// timestamptz values, and durations as float8 seconds through
// make_interval(secs => …), so that pgx and database/sql drivers (lib/pq)
// send and read them the same way.
//
// Parameter $1 of every statement that reads the clock is the injected
// clock (NULL means the database's now()); $2, where present, is the clock
// tolerance in seconds.

// nowCTE is the clock of one statement: the injected time or now(), and the
// tolerance.
const nowCTE = `c AS (SELECT coalesce($1::timestamptz, now()) AS now, make_interval(secs => $2::float8) AS tol)`

// payloadExpr is the NOTIFY payload for a key row aliased k: the hex SHA-256
// of scope "/" key (see notifyPayload, which computes the same in Go).
const payloadExpr = `encode(sha256(convert_to(k.scope || '/' || k.key, 'UTF8')), 'hex')`

const workflowCols = `w.scope, w.id, w.request_id, w.status, w.revision, w.snapshot, w.created_at, w.updated_at`

const keyCols = `k.scope, k.key, k.fingerprint, k.workflow_id, k.state, k.lease_until, k.created_at, ` +
	`k.completed_at, k.expires_at, k.outcome_code, k.outcome_header, k.outcome_body, k.outcome_ref`

const leaseCols = `l.owner, l.token, l.acquired_at, l.expires_at`

// fenceCTE selects, and share-locks, the lease row that proves a fence given
// as $fr (resource), $fo (owner), $ft (token); it is empty when the fence is
// not valid or not given. The share lock makes the check atomic with the
// write: a takeover (an UPDATE of that row) waits until the write commits,
// and a takeover that committed first is seen (READ COMMITTED re-checks a
// locked row's latest version).
const fenceCTE = `f AS (
  SELECT 1 FROM {s}.leases l, c
  WHERE $fr::text IS NOT NULL AND l.scope = $3::text AND l.resource = $fr::text
    AND l.owner = $fo::text AND l.token = $ft::bigint
    AND NOT l.released AND l.expires_at > c.now + c.tol
  FOR SHARE OF l)`

var templates = statements{
	// $1 now, $2 scope, $3 id, $4 request id, $5 status, $6 snapshot.
	createWorkflow: `INSERT INTO {s}.workflows AS w
  (scope, id, request_id, status, revision, snapshot, created_at, updated_at)
SELECT $2::text, $3::text, $4::text, $5::text, 1, $6::bytea, c.now, c.now
FROM (SELECT coalesce($1::timestamptz, now()) AS now) c
ON CONFLICT (scope, id) DO NOTHING
RETURNING w.created_at`,

	// $1 scope, $2 id.
	getWorkflow: `SELECT ` + workflowCols + ` FROM {s}.workflows w WHERE w.scope = $1::text AND w.id = $2::text`,

	// $1 now, $2 tol, $3 scope, $4 id, $5 expected status, $6 expected
	// revision (0 = any), $7 fence resource (NULL = no fence), $8 fence
	// owner, $9 fence token, $10 new status, $11 request id, $12 snapshot.
	//
	// One row: applied = true and the new record; or applied = false, the
	// current record as of the statement's snapshot and whether the fence
	// held, so the caller can say why. No row: the workflow does not exist.
	updateWorkflow: `WITH ` + nowCTE + `,
` + fenceCTE + `,
u AS (
  UPDATE {s}.workflows w
  SET status = $10::text, request_id = $11::text, snapshot = $12::bytea,
      revision = w.revision + 1, updated_at = c.now
  FROM c
  WHERE w.scope = $3::text AND w.id = $4::text AND w.status = $5::text
    AND ($6::bigint = 0 OR w.revision = $6::bigint)
    AND w.status NOT IN ({terminal})
    AND ($7::text IS NULL OR EXISTS (SELECT 1 FROM f))
  RETURNING ` + workflowCols + `)
SELECT true, true, ` + strings.ReplaceAll(workflowCols, "w.", "u.") + ` FROM u
UNION ALL
SELECT false, ($7::text IS NULL OR EXISTS (SELECT 1 FROM f)), ` + workflowCols + `
FROM {s}.workflows w
WHERE w.scope = $3::text AND w.id = $4::text AND NOT EXISTS (SELECT 1 FROM u)`,

	// The second read after a compare-and-set failed for a reason its
	// snapshot did not show. Same parameters as updateWorkflow minus the
	// new values: $1 now, $2 tol, $3 scope, $4 id, $5 fence resource,
	// $6 fence owner, $7 fence token.
	whyWorkflow: `WITH ` + nowCTE + `
SELECT false, ($5::text IS NULL OR EXISTS (
    SELECT 1 FROM {s}.leases l
    WHERE l.scope = $3::text AND l.resource = $5::text AND l.owner = $6::text AND l.token = $7::bigint
      AND NOT l.released AND l.expires_at > c.now + c.tol)), ` + workflowCols + `
FROM {s}.workflows w, c
WHERE w.scope = $3::text AND w.id = $4::text`,

	// $1 scope, $2 after, $3 limit.
	listWorkflows: `SELECT ` + workflowCols + ` FROM {s}.workflows w
WHERE w.scope = $1::text AND w.id > $2::text ORDER BY w.id LIMIT $3::int`,

	// $1 scope, $2 after, $3 limit, $4 status.
	listWorkflowsByStatus: `SELECT ` + workflowCols + ` FROM {s}.workflows w
WHERE w.scope = $1::text AND w.status = $4::text AND w.id > $2::text ORDER BY w.id LIMIT $3::int`,

	// $1 now, $2 tol, $3 scope, $4 key, $5 fingerprint, $6 workflow id,
	// $7 new token, $8 ttl seconds.
	//
	// The INSERT takes the key when it is free, when a completed record is
	// past its retention (it counts as absent: a new claim), or when a claim
	// of the same request expired more than the tolerance ago (a reclaim:
	// same created_at, new token). Its row says fresh = (created_at = now),
	// which holds exactly for a new claim: a reclaimed claim was created at
	// least one TTL (≥ 1 s) before now.
	//
	// Otherwise the existing row is returned as the statement's snapshot saw
	// it, with live / reclaimable / same-request flags. Under READ COMMITTED
	// that snapshot can miss a row committed after it began (the INSERT's
	// conflict check sees it, the SELECT does not); then no row, or a row
	// that looks takeable, comes back and the caller runs the statement
	// again.
	claimKey: `WITH ` + nowCTE + `,
ins AS (
  INSERT INTO {s}.idempotency_keys AS k
    (scope, key, fingerprint, workflow_id, state, token, lease_until, created_at)
  SELECT $3::text, $4::text, $5::text, $6::text, 'claimed', $7::text,
         c.now + make_interval(secs => $8::float8), c.now
  FROM c
  ON CONFLICT (scope, key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    workflow_id = CASE WHEN k.state = 'completed' THEN excluded.workflow_id ELSE k.workflow_id END,
    state = 'claimed',
    token = excluded.token,
    lease_until = excluded.lease_until,
    created_at = CASE WHEN k.state = 'completed' THEN excluded.created_at ELSE k.created_at END,
    completed_at = NULL, expires_at = NULL, outcome_code = NULL,
    outcome_header = NULL, outcome_body = NULL, outcome_ref = NULL
  WHERE (k.state = 'completed' AND k.expires_at <= excluded.created_at)
     OR (k.state = 'claimed' AND k.fingerprint = excluded.fingerprint
         AND (excluded.workflow_id = '' OR excluded.workflow_id = k.workflow_id)
         AND k.lease_until < excluded.created_at - make_interval(secs => $2::float8))
  RETURNING ` + keyCols + `)
SELECT 1, (k.created_at = c.now), true, false, true, ` + keyCols + ` FROM ins k, c
UNION ALL
SELECT 2, false,
       NOT (k.state = 'completed' AND k.expires_at <= c.now),
       (k.state = 'claimed' AND k.lease_until < c.now - c.tol),
       (k.fingerprint = $5::text AND ($6::text = '' OR $6::text = k.workflow_id)),
       ` + keyCols + `
FROM {s}.idempotency_keys k, c
WHERE k.scope = $3::text AND k.key = $4::text AND NOT EXISTS (SELECT 1 FROM ins)`,

	// $1 now, $2 tol, $3 scope, $4 key, $5 token, $6 code, $7 header,
	// $8 body, $9 ref, $10 retain seconds, $11 fence resource (NULL = no
	// fence), $12 fence owner, $13 fence token, $14 NOTIFY channel.
	//
	// One row: applied and the completed record; or not applied, the record
	// as the snapshot saw it, whether the token matches, whether it is live,
	// and whether the fence held. No row: no record.
	completeKey: `WITH ` + nowCTE + `,
` + strings.NewReplacer("$fr", "$11", "$fo", "$12", "$ft", "$13").Replace(fenceCTE) + `,
u AS (
  UPDATE {s}.idempotency_keys k
  SET state = 'completed', outcome_code = $6::int, outcome_header = $7::bytea,
      outcome_body = $8::bytea, outcome_ref = $9::text, completed_at = c.now,
      expires_at = c.now + make_interval(secs => $10::float8), lease_until = NULL
  FROM c
  WHERE k.scope = $3::text AND k.key = $4::text AND k.token = $5::text AND k.state = 'claimed'
    AND ($11::text IS NULL OR EXISTS (SELECT 1 FROM f))
  RETURNING ` + keyCols + `, pg_notify($14::text, ` + payloadExpr + `))
SELECT true, true, true, true, ` + keyCols + ` FROM u k
UNION ALL
SELECT false, (k.token = $5::text), NOT (k.state = 'completed' AND k.expires_at <= c.now),
       ($11::text IS NULL OR EXISTS (SELECT 1 FROM f)), ` + keyCols + `
FROM {s}.idempotency_keys k, c
WHERE k.scope = $3::text AND k.key = $4::text AND NOT EXISTS (SELECT 1 FROM u)`,

	// $1 now, $2 scope, $3 key, $4 token, $5 ttl seconds.
	renewKey: `UPDATE {s}.idempotency_keys k SET lease_until = c.now + make_interval(secs => $5::float8)
FROM (SELECT coalesce($1::timestamptz, now()) AS now) c
WHERE k.scope = $2::text AND k.key = $3::text AND k.token = $4::text AND k.state = 'claimed'
RETURNING ` + keyCols,

	// $1 scope, $2 key, $3 token, $4 NOTIFY channel.
	releaseKey: `WITH d AS (
  DELETE FROM {s}.idempotency_keys k
  WHERE k.scope = $1::text AND k.key = $2::text AND k.token = $3::text AND k.state = 'claimed'
  RETURNING k.scope, k.key)
SELECT count(pg_notify($4::text, ` + payloadExpr + `)) FROM d k`,

	// $1 now, $2 scope, $3 key.
	getKey: `SELECT ` + keyCols + ` FROM {s}.idempotency_keys k
WHERE k.scope = $2::text AND k.key = $3::text
  AND NOT (k.state = 'completed' AND k.expires_at <= coalesce($1::timestamptz, now()))`,

	// $1 now, $2 tol, $3 scope, $4 resource, $5 owner, $6 ttl seconds.
	//
	// A free resource is inserted with the next token. A stored lease that
	// was released or expired more than the tolerance ago is taken over in
	// the DO UPDATE branch, which draws its token after locking the row, so
	// the token is greater than the one it replaces. See AcquireLease for
	// the one residual hazard of the insert branch.
	acquireLease: `INSERT INTO {s}.leases AS l (scope, resource, owner, token, acquired_at, expires_at, released)
SELECT $3::text, $4::text, $5::text, nextval('{s}.lease_tokens'::regclass), c.now,
       c.now + make_interval(secs => $6::float8), false
FROM (SELECT coalesce($1::timestamptz, now()) AS now) c
ON CONFLICT (scope, resource) DO UPDATE SET
  owner = excluded.owner, token = nextval('{s}.lease_tokens'::regclass),
  acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, released = false
WHERE l.released OR l.expires_at < excluded.acquired_at - make_interval(secs => $2::float8)
RETURNING ` + leaseCols,

	// $1 now, $2 tol, $3 scope, $4 resource, $5 owner, $6 token, $7 ttl.
	renewLease: `UPDATE {s}.leases l SET expires_at = c.now + make_interval(secs => $7::float8)
FROM (SELECT coalesce($1::timestamptz, now()) AS now, make_interval(secs => $2::float8) AS tol) c
WHERE l.scope = $3::text AND l.resource = $4::text AND l.owner = $5::text AND l.token = $6::bigint
  AND NOT l.released AND l.expires_at > c.now + c.tol
RETURNING ` + leaseCols,

	// $1 now, $2 scope, $3 resource, $4 owner, $5 token. The row stays
	// (released) so that tokens keep growing; Cleanup deletes it later.
	releaseLease: `UPDATE {s}.leases l SET released = true, expires_at = least(l.expires_at, c.now)
FROM (SELECT coalesce($1::timestamptz, now()) AS now) c
WHERE l.scope = $2::text AND l.resource = $3::text AND l.owner = $4::text AND l.token = $5::bigint
  AND NOT l.released
RETURNING l.token`,

	// $1 scope, $2 resource.
	getLease: `SELECT ` + leaseCols + ` FROM {s}.leases l
WHERE l.scope = $1::text AND l.resource = $2::text AND NOT l.released`,

	// $1 now, $2 tol, $3 terminal age seconds, $4 limit, $5 NOTIFY channel.
	// Each kind: pick up to limit+1 candidates, delete the first limit of
	// them while re-checking the condition on the row's latest version (so
	// a concurrent reclaim or renewal is never deleted), and report More
	// when there was a candidate beyond the limit. Released leases are
	// deleted too but not counted: the contract's ReleaseLease already
	// deleted them.
	cleanup: `WITH ` + nowCTE + `,
wc AS (
  SELECT w.scope, w.id FROM {s}.workflows w, c
  WHERE w.status IN ({terminal}) AND w.updated_at <= c.now - make_interval(secs => $3::float8)
  LIMIT $4::int + 1),
wd AS (
  DELETE FROM {s}.workflows w USING (SELECT * FROM wc LIMIT $4::int) x, c
  WHERE w.scope = x.scope AND w.id = x.id
    AND w.status IN ({terminal}) AND w.updated_at <= c.now - make_interval(secs => $3::float8)
  RETURNING 1),
kc AS (
  SELECT k.scope, k.key FROM {s}.idempotency_keys k, c
  WHERE (k.state = 'completed' AND k.expires_at <= c.now)
     OR (k.state = 'claimed' AND k.lease_until < c.now - c.tol)
  LIMIT $4::int + 1),
kd AS (
  DELETE FROM {s}.idempotency_keys k USING (SELECT * FROM kc LIMIT $4::int) x, c
  WHERE k.scope = x.scope AND k.key = x.key
    AND ((k.state = 'completed' AND k.expires_at <= c.now)
      OR (k.state = 'claimed' AND k.lease_until < c.now - c.tol))
  RETURNING k.scope, k.key),
lc AS (
  SELECT l.scope, l.resource FROM {s}.leases l, c
  WHERE l.expires_at < c.now - c.tol
  LIMIT $4::int + 1),
ld AS (
  DELETE FROM {s}.leases l USING (SELECT * FROM lc LIMIT $4::int) x, c
  WHERE l.scope = x.scope AND l.resource = x.resource AND l.expires_at < c.now - c.tol
  RETURNING l.released)
SELECT (SELECT count(*) FROM wd), (SELECT count(*) FROM kd),
       (SELECT count(*) FROM ld WHERE NOT ld.released),
       (SELECT count(*) FROM wc) > $4::int OR (SELECT count(*) FROM kc) > $4::int
         OR (SELECT count(*) FROM lc) > $4::int,
       (SELECT count(pg_notify($5::text, ` + payloadExpr + `)) FROM kd k)`,

	// $1 kind (workflow, key or lease), $2 scope, $3 id, $4 NOTIFY channel.
	// Deletes one record whatever its state (the operator's way out for a
	// record that cannot be decoded). Whether a live record existed (a
	// released lease row does not count), and the NOTIFY of a deleted key.
	deleteRecord: `WITH wd AS (
  DELETE FROM {s}.workflows w
  WHERE $1::text = 'workflow' AND w.scope = $2::text AND w.id = $3::text
  RETURNING 1),
kd AS (
  DELETE FROM {s}.idempotency_keys k
  WHERE $1::text = 'key' AND k.scope = $2::text AND k.key = $3::text
  RETURNING k.scope, k.key),
ld AS (
  DELETE FROM {s}.leases l
  WHERE $1::text = 'lease' AND l.scope = $2::text AND l.resource = $3::text
  RETURNING l.released)
SELECT (SELECT count(*) FROM wd) + (SELECT count(*) FROM kd)
         + (SELECT count(*) FROM ld WHERE NOT ld.released) > 0,
       (SELECT count(pg_notify($4::text, ` + payloadExpr + `)) FROM kd k)`,

	// $1 now, $2 tol, $3 terminal age seconds, $4 limit. Counts, each up to
	// limit+1, what cleanup would delete (released leases excepted).
	countCleanup: `WITH ` + nowCTE + `
SELECT
  (SELECT count(*) FROM (SELECT 1 FROM {s}.workflows w, c
     WHERE w.status IN ({terminal}) AND w.updated_at <= c.now - make_interval(secs => $3::float8)
     LIMIT $4::int + 1) x),
  (SELECT count(*) FROM (SELECT 1 FROM {s}.idempotency_keys k, c
     WHERE (k.state = 'completed' AND k.expires_at <= c.now)
        OR (k.state = 'claimed' AND k.lease_until < c.now - c.tol)
     LIMIT $4::int + 1) x),
  (SELECT count(*) FROM (SELECT 1 FROM {s}.leases l, c
     WHERE NOT l.released AND l.expires_at < c.now - c.tol
     LIMIT $4::int + 1) x)`,

	// $1 now, $2 tol, $3 scope, $4 resource, $5 owner, $6 token. Runs inside
	// the caller's transaction, so the clock is statement_timestamp(), not
	// the transaction's start.
	fenceTx: `SELECT l.token FROM {s}.leases l
WHERE l.scope = $3::text AND l.resource = $4::text AND l.owner = $5::text AND l.token = $6::bigint
  AND NOT l.released
  AND l.expires_at > coalesce($1::timestamptz, statement_timestamp()) + make_interval(secs => $2::float8)
FOR SHARE OF l`,

	schemaVersion: `SELECT version, dirty FROM {s}.schema_migrations LIMIT 1`,
}

// statements holds the SQL text of every statement: the templates above,
// and the final text of one schema (see newStatements).
type statements struct {
	createWorkflow, getWorkflow, updateWorkflow, whyWorkflow    string
	listWorkflows, listWorkflowsByStatus                        string
	claimKey, completeKey, renewKey, releaseKey, getKey         string
	acquireLease, renewLease, releaseLease, getLease            string
	cleanup, countCleanup, deleteRecord, fenceTx, schemaVersion string
}

// all returns every statement, for building and checking them.
func (st *statements) all() []*string {
	return []*string{&st.createWorkflow, &st.getWorkflow, &st.updateWorkflow, &st.whyWorkflow,
		&st.listWorkflows, &st.listWorkflowsByStatus, &st.claimKey, &st.completeKey, &st.renewKey,
		&st.releaseKey, &st.getKey, &st.acquireLease, &st.renewLease, &st.releaseLease, &st.getLease,
		&st.cleanup, &st.countCleanup, &st.deleteRecord, &st.fenceTx, &st.schemaVersion}
}

// quoteIdent quotes a validated schema name.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func terminalList() string {
	q := make([]string, len(contract.TerminalStatuses))
	for i, s := range contract.TerminalStatuses {
		q[i] = "'" + string(s) + "'"
	}
	return strings.Join(q, ", ")
}

// newStatements builds the SQL text for schema, which must be valid.
func newStatements(schema string) *statements {
	st := templates
	st.updateWorkflow = strings.NewReplacer("$fr", "$7", "$fo", "$8", "$ft", "$9").Replace(st.updateWorkflow)
	r := strings.NewReplacer("{s}", quoteIdent(schema), "{terminal}", terminalList())
	for _, p := range st.all() {
		*p = r.Replace(*p)
	}
	return &st
}
