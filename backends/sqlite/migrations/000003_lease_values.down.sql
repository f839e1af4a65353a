-- Reverts 000003_lease_values: the leases stay (holders, tokens, times),
-- their values are gone.
ALTER TABLE leases DROP COLUMN value;
