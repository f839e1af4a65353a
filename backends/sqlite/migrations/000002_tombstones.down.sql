-- Reverts 000002_tombstones: the tombstones stay as completed rows past
-- expires_at, which the code of 000001 counts as absent and its Cleanup
-- deletes.
DROP INDEX idempotency_keys_completed_forget_at;
DROP INDEX idempotency_keys_outcome_expires_at;
ALTER TABLE idempotency_keys DROP COLUMN forget_at;
CREATE INDEX idempotency_keys_completed_expires_at ON idempotency_keys (expires_at)
    WHERE state = 'completed';
