-- durable on SQLite: initial schema.
--
-- Times are INTEGER microseconds since the Unix epoch (UTC) on the
-- backend's clock. Text compares with the default BINARY collation, so
-- every ORDER BY and keyset cursor is in byte order.

-- Fencing tokens: one counter for every resource, never reset (not by
-- Cleanup, DeleteRecord, release or takeover), so a token is greater than
-- every token issued before it.
CREATE TABLE lease_tokens (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL CHECK (last >= 0)
);
INSERT INTO lease_tokens (id, last) VALUES (1, 0);

CREATE TABLE workflows (
    scope      TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    request_id TEXT    NOT NULL DEFAULT '',
    status     TEXT    NOT NULL,
    revision   INTEGER NOT NULL,
    snapshot   BLOB,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (scope, id)
);
-- ListWorkflows with a status filter.
CREATE INDEX workflows_scope_status_id ON workflows (scope, status, id);
-- Cleanup of terminal workflows.
CREATE INDEX workflows_terminal_updated_at ON workflows (updated_at)
    WHERE status IN ('succeeded', 'failed', 'closed');

-- Idempotency keys. token is the claim token; it stays after completion so
-- that a retried completion with the same token is recognized.
-- outcome_header is the header map in the backend's length-prefixed
-- binary encoding (byte-exact for any value); NULL for a nil map.
CREATE TABLE idempotency_keys (
    scope          TEXT    NOT NULL,
    key            TEXT    NOT NULL,
    fingerprint    TEXT    NOT NULL,
    workflow_id    TEXT    NOT NULL DEFAULT '',
    state          TEXT    NOT NULL CHECK (state IN ('claimed', 'completed')),
    token          TEXT    NOT NULL,
    lease_until    INTEGER,
    created_at     INTEGER NOT NULL,
    completed_at   INTEGER,
    expires_at     INTEGER,
    outcome_code   INTEGER,
    outcome_header BLOB,
    outcome_body   BLOB,
    outcome_ref    TEXT,
    PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_completed_expires_at ON idempotency_keys (expires_at)
    WHERE state = 'completed';
CREATE INDEX idempotency_keys_claimed_lease_until ON idempotency_keys (lease_until)
    WHERE state = 'claimed';

-- Leases. A released lease is deleted; the next grant's token comes from
-- lease_tokens, never from this table.
CREATE TABLE leases (
    scope       TEXT    NOT NULL,
    resource    TEXT    NOT NULL,
    owner       TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (scope, resource)
) WITHOUT ROWID;
CREATE INDEX leases_expires_at ON leases (expires_at);
