-- Reverts 000001_init: every record and the token counter are gone, so
-- fencing tokens restart at 1 afterwards.
DROP TABLE leases;
DROP TABLE idempotency_keys;
DROP TABLE workflows;
DROP TABLE lease_tokens;
