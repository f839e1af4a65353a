-- durable: a value on each lease, and the marks of the leases that a
-- WatchLease listens for.
--
-- Plain SQL with every table named with its schema, like 000001 (see
-- there).
--
-- value: LeaseRequest.Value as the grant stored it, byte for byte (any
-- bytes, so bytea, not text); NULL is the empty value, which is what the
-- rows granted before this migration hold.
--
-- watched_until: a WatchLease on the lease (or, for a semaphore's
-- resource, on any of its permits) is listening until then, on the
-- database's clock. The statements that grant, release or delete a lease
-- send a NOTIFY only while the row's mark is in the future, so leases
-- nobody watches never notify (PostgreSQL serializes the commits of
-- transactions that notify, as 000003 explains). A watch sets the mark a
-- few minutes ahead and renews it while it lasts; a mark nobody renews
-- (its watcher ended or died) lapses by itself. A watch on a lease that has
-- no row inserts a released row to hold the mark (owner '', token 0: a
-- released row is no lease to any operation), which Cleanup deletes once
-- the mark has lapsed.
--
-- Adding NULLable columns without a default rewrites nothing: only a brief
-- ACCESS EXCLUSIVE lock on leases.
ALTER TABLE {schema}.leases
    ADD COLUMN IF NOT EXISTS value bytea,
    ADD COLUMN IF NOT EXISTS watched_until timestamptz;
