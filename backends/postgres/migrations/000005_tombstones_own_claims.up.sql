-- durable: two-tier retention (tombstones) and claims that their own caller
-- recovers (ClaimRequest.Token).
--
-- Plain SQL with every object named with its schema, like 000001 (see
-- there).
--
-- forget_at: a completed key keeps its outcome until expires_at
-- (Completion.Retain) and stays bound to its request until forget_at
-- (Completion.Tombstone, never before expires_at). Between the two only a
-- tombstone is left: Cleanup sets the outcome's header, body and ref to
-- NULL (keeping its status code), reads report the key as expired, and a
-- claim of the same request is answered OutcomeExpired instead of running
-- it again. Keys completed before this migration have no tombstone period:
-- forget_at = expires_at. Adding a NULLable column rewrites nothing; the
-- UPDATE writes every completed row once.
--
-- Every statement can run again (IF NOT EXISTS, IF EXISTS, forget_at IS
-- NULL): a schema at this version whose function was lost (see the
-- repair of 000004) is repaired by applying this migration again.
ALTER TABLE {schema}.idempotency_keys ADD COLUMN IF NOT EXISTS forget_at timestamptz;
UPDATE {schema}.idempotency_keys SET forget_at = expires_at WHERE state = 'completed' AND forget_at IS NULL;

-- Cleanup deletes the tombstones past forget_at, and drops the outcomes
-- past expires_at that are still stored (outcome_ref is NULL exactly when
-- the outcome was dropped: CompleteKey always stores a ref, '' if none).
-- The index of the second kind leaves the tombstones out, so a cleanup
-- pass does not walk every tombstone of the last days to find the few
-- outcomes to drop. Building the indexes locks writes to the table for the
-- time it takes: on large tables, migrate in a quiet period.
DROP INDEX IF EXISTS {schema}.idempotency_keys_completed_expires_at;
CREATE INDEX IF NOT EXISTS idempotency_keys_stored_expires_at ON {schema}.idempotency_keys (expires_at)
    WHERE state = 'completed' AND outcome_ref IS NOT NULL;
CREATE INDEX IF NOT EXISTS idempotency_keys_completed_forget_at ON {schema}.idempotency_keys (forget_at)
    WHERE state = 'completed';

-- durable_claim_key, as in 000004 (see there), with two changes:
--
--   * a completed key counts as absent only past forget_at (its tombstone),
--     no longer past expires_at; a key completed by code older than this
--     migration has no forget_at and counts as absent past expires_at;
--   * the caller's own claim (ClaimRequest.Token: the same token, the same
--     request, still claimed: nobody reclaimed or completed it) is handed
--     back with a new lease. ClaimKey's statement calls the function for it
--     only when the row it read is that claim (p_seen_token = p_token); the
--     UPDATE re-checks it on the latest version of the row, locked, and the
--     function returns 3. When the UPDATE finds no such claim any more (it
--     was released, or the row it read was a completed key of the same
--     token past its tombstone), the INSERT … ON CONFLICT decides as
--     before. A random token (no ClaimRequest.Token) never equals a stored
--     one, so older callers never take this branch.
--
-- The signature is 000004's, so code of version 4 calling the function
-- keeps working against this schema.
CREATE OR REPLACE FUNCTION {schema}.durable_claim_key(
    p_now timestamptz, p_tol float8, p_scope text, p_key text, p_fingerprint text,
    p_workflow_id text, p_token text, p_ttl float8, p_seen_token text)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $function$
#variable_conflict use_column
DECLARE
    v_now  timestamptz := coalesce(p_now, now());
    v_kind integer;
BEGIN
    IF p_seen_token = p_token THEN
        UPDATE {schema}.idempotency_keys AS k
        SET lease_until = v_now + make_interval(secs => p_ttl)
        WHERE k.scope = p_scope AND k.key = p_key
          AND k.state = 'claimed' AND k.token = p_token AND k.fingerprint = p_fingerprint AND (p_workflow_id = '' OR p_workflow_id = k.workflow_id)
        RETURNING 3 INTO v_kind;
        IF FOUND THEN
            RETURN v_kind;
        END IF;
    END IF;
    INSERT INTO {schema}.idempotency_keys AS k
        (scope, key, fingerprint, workflow_id, state, token, lease_until, created_at)
    VALUES (p_scope, p_key, p_fingerprint, p_workflow_id, 'claimed', p_token,
            v_now + make_interval(secs => p_ttl), v_now)
    ON CONFLICT (scope, key) DO UPDATE SET
        fingerprint = excluded.fingerprint,
        workflow_id = CASE WHEN k.state = 'completed' THEN excluded.workflow_id ELSE k.workflow_id END,
        state = 'claimed',
        token = excluded.token,
        lease_until = excluded.lease_until,
        created_at = CASE WHEN k.state = 'completed' THEN excluded.created_at ELSE k.created_at END,
        completed_at = NULL, expires_at = NULL, forget_at = NULL, outcome_code = NULL,
        outcome_header = NULL, outcome_body = NULL, outcome_ref = NULL,
        waited = k.waited AND k.state = 'claimed'
    WHERE (k.state = 'completed' AND coalesce(k.forget_at, k.expires_at) <= excluded.created_at)
       OR (k.state = 'claimed' AND k.token = p_seen_token
           AND k.lease_until < excluded.created_at - make_interval(secs => p_tol)
           AND k.fingerprint = excluded.fingerprint
           AND (excluded.workflow_id = '' OR excluded.workflow_id = k.workflow_id))
    RETURNING CASE WHEN k.created_at = v_now THEN 1 ELSE 2 END INTO v_kind;
    RETURN coalesce(v_kind, 0);
END
$function$;
