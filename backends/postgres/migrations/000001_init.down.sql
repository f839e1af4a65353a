-- durable: undo 000001_init. Destroys every record and the token sequence.
DROP TABLE IF EXISTS {schema}.leases;
DROP TABLE IF EXISTS {schema}.idempotency_keys;
DROP TABLE IF EXISTS {schema}.workflows;
DROP SEQUENCE IF EXISTS {schema}.lease_tokens;
