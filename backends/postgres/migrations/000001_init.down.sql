-- durable: undo 000001_init. Destroys every record and the token sequence.
DROP TABLE IF EXISTS leases;
DROP TABLE IF EXISTS idempotency_keys;
DROP TABLE IF EXISTS workflows;
DROP SEQUENCE IF EXISTS lease_tokens;
