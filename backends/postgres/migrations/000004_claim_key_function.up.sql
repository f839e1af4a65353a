-- durable: the write half of ClaimKey, as a function that ClaimKey's
-- statement calls only when the key is free or can be taken.
--
-- Plain SQL with every object named with its schema, like 000001 (see
-- there); the function's body names its table with the schema too, so it
-- does not depend on search_path either.
--
-- Before, ClaimKey was one INSERT … ON CONFLICT DO UPDATE statement. Even
-- when it inserted nothing (the replay of a completed key, the answer that
-- a claim is in flight, a key bound to another request), PostgreSQL set up
-- the insert, opened the table's indexes and took ROW EXCLUSIVE on the
-- table: the replay that every client retry takes cost about 1.4 times a
-- primary-key read on the server. Now ClaimKey's statement is a SELECT of
-- the key that calls this function from a CASE only when the row it read
-- (its snapshot) is absent, completed past its retention, or a claim of the
-- same request that expired more than the tolerance ago; the answers that
-- change nothing stay a plain read.
--
-- The function runs the same INSERT … ON CONFLICT DO UPDATE as before, so
-- exactly one of racing claims wins; the DO UPDATE's WHERE decides on the
-- latest version of the row, locked. A reclaim also requires that the
-- claim is still the one the caller's snapshot saw (p_seen_token, the
-- token of the row the statement read; NULL when it read none), so the
-- caller can build the reclaimed record from that row. It returns 1 when
-- it took the key as a new claim (created now), 2 when it reclaimed it,
-- and 0 when it took nothing (a concurrent commit changed the row: the
-- caller reads again). A new claim over a completed record clears the
-- waited mark (its waiters had their answer); a reclaim keeps it (they
-- still wait for that key). p_now NULL means now(), as in every statement
-- of the backend; the caller's statement computes the same time in the same
-- transaction.
--
-- CREATE OR REPLACE: the function is not one of the tables and sequences
-- whose absence marks a partial schema, so a schema whose tables were
-- dropped (to let migrate up rebuild it) may still hold it.
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
        completed_at = NULL, expires_at = NULL, outcome_code = NULL,
        outcome_header = NULL, outcome_body = NULL, outcome_ref = NULL,
        waited = k.waited AND k.state = 'claimed'
    WHERE (k.state = 'completed' AND k.expires_at <= excluded.created_at)
       OR (k.state = 'claimed' AND k.token = p_seen_token
           AND k.lease_until < excluded.created_at - make_interval(secs => p_tol)
           AND k.fingerprint = excluded.fingerprint
           AND (excluded.workflow_id = '' OR excluded.workflow_id = k.workflow_id))
    RETURNING CASE WHEN k.created_at = v_now THEN 1 ELSE 2 END INTO v_kind;
    RETURN coalesce(v_kind, 0);
END
$function$;
