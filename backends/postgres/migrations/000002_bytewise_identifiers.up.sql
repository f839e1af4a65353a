-- durable: identifiers sort and compare byte-wise, whatever the database's
-- collation.
--
-- Plain SQL with every table named with its schema, like 000001 (see
-- there). The collation is qualified too (pg_catalog."C"), so no collation
-- of that name in a schema on the search_path can stand in for it.
--
-- ListWorkflows orders by id and pages with id > the last id seen. Under
-- the database's collation that order depends on how the database was
-- created: with ICU en-US, a, a-b, ab, B; in bytes (every other backend,
-- and the contract), B, a, a-b, ab. The columns that lead an index or are
-- ordered by (scope, id, status, key, resource) therefore use the "C"
-- collation: byte order (UTF-8 byte order is code point order), also the
-- cheapest to compare. Equality needs no change: a database's default
-- collation is always deterministic, so equal means byte-equal, and the
-- other text columns are only compared for equality.
--
-- Changing only the collation rewrites no table (the stored values stay),
-- but every index on these columns, the primary keys included, is rebuilt
-- under an ACCESS EXCLUSIVE lock on its table: on large tables, migrate in
-- a quiet period.
ALTER TABLE {schema}.workflows
    ALTER COLUMN scope  TYPE text COLLATE pg_catalog."C",
    ALTER COLUMN id     TYPE text COLLATE pg_catalog."C",
    ALTER COLUMN status TYPE text COLLATE pg_catalog."C";

ALTER TABLE {schema}.idempotency_keys
    ALTER COLUMN scope TYPE text COLLATE pg_catalog."C",
    ALTER COLUMN key   TYPE text COLLATE pg_catalog."C";

ALTER TABLE {schema}.leases
    ALTER COLUMN scope    TYPE text COLLATE pg_catalog."C",
    ALTER COLUMN resource TYPE text COLLATE pg_catalog."C";
