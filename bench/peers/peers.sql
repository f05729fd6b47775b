-- Named queries of the peers benchmark (bench/peers/). {schema} is this run's own schema, quoted by
-- the caller; nothing else is ever put into a query's text.

-- name: create_schema
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: drop_schema
DROP SCHEMA IF EXISTS {schema} CASCADE;

-- name: server
-- The server's version and durability settings, for the report.
SELECT current_setting('server_version') AS version, current_setting('synchronous_commit') AS synchronous_commit,
       current_setting('fsync') AS fsync;

-- name: pg_create_table
-- The bare loop's table: the least a job queue needs (state, lease token, run time, payload).
CREATE TABLE {schema}.jobs (
    id bigserial PRIMARY KEY,
    payload text NOT NULL,
    state text NOT NULL DEFAULT 'queued',
    lease text,
    run_at double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp())
);
CREATE INDEX ON {schema}.jobs (run_at, id) WHERE state = 'queued';

-- name: pg_insert
INSERT INTO {schema}.jobs (payload) VALUES (%s);

-- name: pg_notify
-- Wake the listener; the payload is the enqueue time.
SELECT pg_notify(%s, %s);

-- name: pg_claim
-- Claim the oldest runnable row under a lease token, skipping rows other transactions hold.
UPDATE {schema}.jobs SET state = 'running', lease = %(token)s
WHERE id = (SELECT id FROM {schema}.jobs WHERE state = 'queued' AND run_at <= extract(epoch FROM clock_timestamp())
            ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, payload;

-- name: pg_complete
-- Complete a claimed row, fenced on its lease token.
UPDATE {schema}.jobs SET state = 'succeeded', lease = NULL WHERE id = %(id)s AND lease = %(token)s;

-- name: sqlite_create_table
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'queued',
    lease TEXT,
    run_at REAL NOT NULL
);
CREATE INDEX jobs_runnable ON jobs (run_at, id) WHERE state = 'queued';

-- name: sqlite_insert
INSERT INTO jobs (payload, run_at) VALUES (?, ?);

-- name: sqlite_claim
UPDATE jobs SET state = 'running', lease = :token
WHERE id = (SELECT id FROM jobs WHERE state = 'queued' AND run_at <= :now ORDER BY run_at, id LIMIT 1)
RETURNING id, payload;

-- name: sqlite_complete
UPDATE jobs SET state = 'succeeded', lease = NULL WHERE id = :id AND lease = :token;
