-- Dashboard and metrics (part 9): read-only views over jobs and attempts. Nothing here writes.
-- Every filter value is a parameter; the dashboard validates them before they get here.

-- name: dash_attempt_buckets
-- Attempts that ended in [:since, :until), counted per bucket of :bucket seconds and per outcome.
SELECT CAST((ended_at - :since) / :bucket AS INTEGER) AS bucket, outcome, count(*) AS n
FROM firesafe_attempts
WHERE ended_at >= :since AND ended_at < :until AND outcome IS NOT NULL
GROUP BY 1, 2 ORDER BY 1, 2;

-- name: dash_dead_groups
-- Dead jobs grouped by job name and error type, largest group first.
SELECT name, error_type, count(*) AS n, min(finished_at) AS first_at, max(finished_at) AS last_at
FROM firesafe_jobs WHERE state = 'dead'
GROUP BY name, error_type ORDER BY n DESC, name, error_type LIMIT :limit;

-- name: dash_queue_lags
-- Per queue: how many jobs are runnable now and how long the oldest of them has waited.
SELECT queue, count(*) AS runnable, :now - min(run_at) AS lag
FROM firesafe_jobs WHERE state IN ('queued', 'scheduled') AND run_at <= :now
GROUP BY queue ORDER BY queue;

-- name: dash_attempt_counts
-- Attempts recorded in the store by job name and outcome, with the attempts running now as 'running'
-- (their entries are written when they end: see attempts_of_job).
SELECT name, outcome, count(*) AS n FROM (
    SELECT j.name AS name, coalesce(a.outcome, 'running') AS outcome
    FROM firesafe_attempts a JOIN firesafe_jobs j ON j.id = a.job_id
    UNION ALL
    SELECT j.name, 'running' FROM firesafe_jobs j
    WHERE j.state = 'running'
      AND NOT EXISTS (SELECT 1 FROM firesafe_attempts a WHERE a.job_id = j.id AND a.seq = j.runs))
GROUP BY 1, 2 ORDER BY 1, 2;
