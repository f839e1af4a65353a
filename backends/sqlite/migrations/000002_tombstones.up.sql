-- Two-tier retention: a completed key keeps its outcome until expires_at
-- and a tombstone until forget_at (never before expires_at), when the key
-- is free again. Between the two the row is the key's tombstone: Cleanup
-- sets outcome_header, outcome_body and outcome_ref to NULL and keeps
-- outcome_code. CompleteKey always writes outcome_ref (the empty string
-- for none), so outcome_ref IS NULL on a completed row marks a tombstone.
--
-- Rows completed before this migration keep their key exactly as long as
-- before: forget_at = expires_at.
ALTER TABLE idempotency_keys ADD COLUMN forget_at INTEGER;
UPDATE idempotency_keys SET forget_at = expires_at WHERE state = 'completed';

-- Cleanup's two scans: outcomes past expires_at whose payload is still
-- there (tombstones are out of this index, so a pass never walks the
-- tombstones it left before), and completed rows past forget_at.
DROP INDEX idempotency_keys_completed_expires_at;
CREATE INDEX idempotency_keys_outcome_expires_at ON idempotency_keys (expires_at)
    WHERE state = 'completed' AND outcome_ref IS NOT NULL;
CREATE INDEX idempotency_keys_completed_forget_at ON idempotency_keys (forget_at)
    WHERE state = 'completed';
