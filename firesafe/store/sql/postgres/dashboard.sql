-- Dashboard and metrics (part 9): read-only views over jobs and attempts. Nothing here writes.
-- Every filter value is a parameter; the dashboard validates them before they get here.

-- name: dash_attempt_buckets
-- Attempts that ended in [:since, :until), counted per bucket of :bucket seconds and per outcome.
-- PostgreSQL differs: floor() then a cast, since a float-to-int cast rounds instead of truncating.
SELECT floor((ended_at - %(since)s::float8) / %(bucket)s::float8)::int AS bucket, outcome, count(*) AS n
FROM {schema}.firesafe_attempts
WHERE ended_at >= %(since)s::float8 AND ended_at < %(until)s::float8 AND outcome IS NOT NULL
GROUP BY 1, 2 ORDER BY 1, 2;

-- name: dash_dead_groups
-- Dead jobs grouped by job name and error type, largest group first.
SELECT name, error_type, count(*) AS n, min(finished_at) AS first_at, max(finished_at) AS last_at
FROM {schema}.firesafe_jobs WHERE state = 'dead'
GROUP BY name, error_type ORDER BY n DESC, name, error_type LIMIT %(limit)s;

-- name: dash_queue_lags
-- Per queue: how many jobs are runnable now and how long the oldest of them has waited.
-- PostgreSQL differs: now is the database's clock unless a test injected one (see postgres.sql).
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now)
SELECT j.queue, count(*) AS runnable, min(c.now) - min(j.run_at) AS lag
FROM {schema}.firesafe_jobs j CROSS JOIN clock c
WHERE j.state IN ('queued', 'scheduled') AND j.run_at <= c.now
GROUP BY j.queue ORDER BY j.queue;

-- name: dash_attempt_counts
-- Attempts recorded in the store by job name and outcome, with the attempts running now as 'running'
-- (their entries are written when they end: see attempts_of_job).
SELECT name, outcome, count(*) AS n FROM (
    SELECT j.name, coalesce(a.outcome, 'running') AS outcome
    FROM {schema}.firesafe_attempts a JOIN {schema}.firesafe_jobs j ON j.id = a.job_id
    UNION ALL
    SELECT j.name, 'running' FROM {schema}.firesafe_jobs j
    WHERE j.state = 'running'
      AND NOT EXISTS (SELECT 1 FROM {schema}.firesafe_attempts a WHERE a.job_id = j.id AND a.seq = j.runs)) t
GROUP BY 1, 2 ORDER BY 1, 2;
