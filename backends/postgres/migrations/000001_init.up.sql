-- durable: initial schema.
--
-- Plain SQL in which every object is named with its schema, written as a
-- placeholder that postgres.MigrationFiles replaces with the quoted schema
-- name (default "durable"). Nothing depends on search_path, so the files run
-- the same through a transaction pooler. Any other migration tool can apply
-- the files MigrationFiles returns.

-- Fencing tokens. One global sequence that never cycles, so a token is
-- greater than every token issued before it, for every resource.
CREATE SEQUENCE {schema}.lease_tokens AS bigint START WITH 1 INCREMENT BY 1 NO CYCLE;

CREATE TABLE {schema}.workflows (
    scope      text        NOT NULL,
    id         text        NOT NULL,
    request_id text        NOT NULL DEFAULT '',
    status     text        NOT NULL,
    revision   bigint      NOT NULL,
    snapshot   bytea,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (scope, id)
);
-- ListWorkflows with a status filter.
CREATE INDEX workflows_scope_status_id ON {schema}.workflows (scope, status, id);
-- Cleanup of terminal workflows.
CREATE INDEX workflows_terminal_updated_at ON {schema}.workflows (updated_at)
    WHERE status IN ('succeeded', 'failed', 'closed');

-- Idempotency keys. token is the claim token; it stays on the row after
-- completion so that a retried completion with the same token is recognized.
-- outcome_header is the outcome's header map in the backend's own
-- length-prefixed binary encoding (byte-exact for any value).
CREATE TABLE {schema}.idempotency_keys (
    scope          text        NOT NULL,
    key            text        NOT NULL,
    fingerprint    text        NOT NULL,
    workflow_id    text        NOT NULL DEFAULT '',
    state          text        NOT NULL CHECK (state IN ('claimed', 'completed')),
    token          text        NOT NULL,
    lease_until    timestamptz,
    created_at     timestamptz NOT NULL,
    completed_at   timestamptz,
    expires_at     timestamptz,
    outcome_code   integer,
    outcome_header bytea,
    outcome_body   bytea,
    outcome_ref    text,
    PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_completed_expires_at ON {schema}.idempotency_keys (expires_at)
    WHERE state = 'completed';
CREATE INDEX idempotency_keys_claimed_lease_until ON {schema}.idempotency_keys (lease_until)
    WHERE state = 'claimed';

-- Leases. A released lease keeps its row (released = true) until Cleanup
-- deletes it, so the next grant goes through the row-locked update path.
CREATE TABLE {schema}.leases (
    scope       text        NOT NULL,
    resource    text        NOT NULL,
    owner       text        NOT NULL,
    token       bigint      NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    released    boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (scope, resource)
);
CREATE INDEX leases_expires_at ON {schema}.leases (expires_at);
