-- durable: mark the idempotency keys that a WaitKey listens for.
--
-- Plain SQL with every table named with its schema, like 000001 (see
-- there).
--
-- CompleteKey, ReleaseKey, Cleanup and DeleteRecord used to send a NOTIFY
-- for every key they completed or deleted, and PostgreSQL serializes the
-- commits of transactions that notify (one lock on the database's
-- notification queue, held through the commit's WAL flush): completions
-- could not share a flush. Now a WaitKey that listens sets waited on the
-- claim it waits for (after its LISTEN is active, in the statement that
-- also reads the record), and those statements notify only when the row
-- they lock says waited. A boolean column with a constant default is
-- added without rewriting the table (PostgreSQL 11 and later): only a
-- brief ACCESS EXCLUSIVE lock on idempotency_keys.
ALTER TABLE {schema}.idempotency_keys
    ADD COLUMN waited boolean NOT NULL DEFAULT false;
