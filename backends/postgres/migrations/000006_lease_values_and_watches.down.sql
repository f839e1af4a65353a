-- durable: undo 000006_lease_values_and_watches. The values of the leases
-- are dropped with the column. The released rows that held a watch's mark
-- (owner '', token 0) stay until Cleanup deletes them, as code of version 5
-- deletes every released row; to that code they are released leases, like
-- the permits' rows ("resource#n") are leases like any other.
ALTER TABLE {schema}.leases
    DROP COLUMN IF EXISTS watched_until,
    DROP COLUMN IF EXISTS value;
