-- durable: undo 000005_tombstones_own_claims: durable_claim_key as 000004
-- defined it, the index of 000001 back, forget_at dropped. Tombstones (completed
-- keys past expires_at whose outcome Cleanup dropped) are left as they are:
-- code of version 4 counts a completed key past expires_at as absent.
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
DROP INDEX {schema}.idempotency_keys_completed_forget_at;
DROP INDEX {schema}.idempotency_keys_stored_expires_at;
CREATE INDEX idempotency_keys_completed_expires_at ON {schema}.idempotency_keys (expires_at)
    WHERE state = 'completed';
ALTER TABLE {schema}.idempotency_keys DROP COLUMN forget_at;
