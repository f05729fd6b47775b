-- Named queries of bench/bench_postgres.py. {schema} is the benchmark's own schema (quoted).

-- name: seed
-- Rows for the bare loop, straight into firesafe's own jobs table (the very schema and indexes).
INSERT INTO {schema}.firesafe_jobs (key, name, queue, fingerprint, payload, arg_names, state, max_attempts,
                                    run_at, created_at, updated_at)
SELECT 'bare:' || g, 'noop', 'bare', md5(g::text), '{"args": [' || g || '], "kwargs": {}}', '["i"]', 'queued', 5,
       extract(epoch FROM clock_timestamp()) - 1, extract(epoch FROM clock_timestamp()),
       extract(epoch FROM clock_timestamp())
FROM generate_series(1, %(n)s::int) AS g;

-- name: analyze
-- Fresh statistics for the bare loop's claim (see bare_loop).
ANALYZE {schema}.firesafe_jobs;

-- name: claim_one
-- The bare loop's claim: the first runnable row in firesafe's order (by rank, run_at - 60 x priority,
-- as the runnable index holds them), skipping rows another transaction holds.
UPDATE {schema}.firesafe_jobs
SET state = 'running', lease_token = %(token)s, lease_expires = extract(epoch FROM clock_timestamp()) + 30,
    attempt = attempt + 1, runs = runs + 1, updated_at = extract(epoch FROM clock_timestamp())
WHERE id = (SELECT id FROM {schema}.firesafe_jobs
            WHERE queue = 'bare' AND state IN ('queued', 'scheduled')
              AND run_at - 60.0::float8 * priority <= extract(epoch FROM clock_timestamp()) + 6000.0::float8
              AND run_at <= extract(epoch FROM clock_timestamp())
            ORDER BY run_at - 60.0::float8 * priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id;

-- name: complete_one
-- The bare loop's completion, fenced on the lease token like firesafe's.
UPDATE {schema}.firesafe_jobs
SET state = 'succeeded', lease_token = NULL, lease_expires = NULL, result = 'null',
    finished_at = extract(epoch FROM clock_timestamp()), updated_at = extract(epoch FROM clock_timestamp())
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s;

-- name: drain_window
-- How many jobs whose key matches the patterns succeeded, from their first claim to their last finish
-- (the database's clock).
SELECT count(*) FILTER (WHERE j.state = 'succeeded') AS succeeded, count(*) AS total,
       (SELECT min(a.started_at) FROM {schema}.firesafe_attempts a
        JOIN {schema}.firesafe_jobs x ON x.id = a.job_id WHERE x.key LIKE ANY(%(patterns)s::text[])) AS first_claim,
       max(j.finished_at) AS last_finish
FROM {schema}.firesafe_jobs j WHERE j.key LIKE ANY(%(patterns)s::text[]);

-- name: started_at
-- When the first attempt of a job started (DB clock), NULL while it has not.
SELECT min(a.started_at) AS started FROM {schema}.firesafe_attempts a
JOIN {schema}.firesafe_jobs j ON j.id = a.job_id WHERE j.key = %(key)s;

-- name: listening
-- Whether a backend of the given application_name is LISTENing (the idle worker is ready).
SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = %(app)s AND query LIKE 'LISTEN %%';

-- name: server
-- The server's version and durability settings, for the report.
SELECT current_setting('server_version') AS version, current_setting('synchronous_commit') AS synchronous_commit,
       current_setting('fsync') AS fsync;
