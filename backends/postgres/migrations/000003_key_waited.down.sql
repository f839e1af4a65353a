-- durable: undo 000003_key_waited. Code of a version before 3 notifies on
-- every completion and never reads the column.
ALTER TABLE {schema}.idempotency_keys
    DROP COLUMN waited;
