-- durable: undo 000002_bytewise_identifiers: the columns go back to the
-- database's default collation (as 000001 created them), and their indexes
-- are rebuilt. No data changes.
ALTER TABLE {schema}.workflows
    ALTER COLUMN scope  TYPE text COLLATE pg_catalog."default",
    ALTER COLUMN id     TYPE text COLLATE pg_catalog."default",
    ALTER COLUMN status TYPE text COLLATE pg_catalog."default";

ALTER TABLE {schema}.idempotency_keys
    ALTER COLUMN scope TYPE text COLLATE pg_catalog."default",
    ALTER COLUMN key   TYPE text COLLATE pg_catalog."default";

ALTER TABLE {schema}.leases
    ALTER COLUMN scope    TYPE text COLLATE pg_catalog."default",
    ALTER COLUMN resource TYPE text COLLATE pg_catalog."default";
