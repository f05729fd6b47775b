-- Named queries of the benchmark's bare sqlite3 baseline (bench/throughput.py).
-- The baseline runs on a copy of firesafe's own schema, so the table, its indexes and its row shape
-- are those firesafe claims from; only the two-statements-per-transaction loop is "bare".

-- name: seed
-- One runnable row, shaped like a no-op job.
INSERT INTO firesafe_jobs (key, name, queue, fingerprint, payload, arg_names, state, max_attempts,
                           run_at, created_at, updated_at)
VALUES (:key, 'noop', 'default', :fingerprint, :payload, '["i"]', 'queued', 5, :now, :now, :now);

-- name: claim_one
-- Claim the first runnable row under a lease token (the same predicate and order as firesafe's claim:
-- by rank, run_at - 60 x priority, as its runnable index holds them).
UPDATE firesafe_jobs
SET state = 'running', lease_token = :token, lease_expires = :now + 30, worker = 'bare',
    attempt = attempt + 1, runs = runs + 1, updated_at = :now
WHERE id = (
    SELECT id FROM firesafe_jobs
    WHERE state IN ('queued', 'scheduled') AND run_at - 60.0 * priority <= :now + 6000.0 AND run_at <= :now
      AND queue = 'default'
    ORDER BY run_at - 60.0 * priority, run_at, id LIMIT 1)
RETURNING id;

-- name: complete_one
-- Complete the claimed row, fenced on its state and lease token.
UPDATE firesafe_jobs
SET state = 'succeeded', lease_token = NULL, lease_expires = NULL, finished_at = :now, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token;

-- name: drain_window
-- First claim and last finish of every attempt in a store, and how many attempts succeeded.
SELECT min(started_at) AS first_claim, max(ended_at) AS last_finish,
       sum(outcome = 'succeeded') AS succeeded, count(*) AS attempts
FROM firesafe_attempts;

-- name: jobs_by_state
-- How many jobs are in each state.
SELECT state, count(*) AS n FROM firesafe_jobs GROUP BY state ORDER BY state;

-- name: synchronous_full
-- firesafe's default durability: every commit is on disk before it returns.
PRAGMA synchronous = FULL;

-- name: synchronous_normal
-- WAL's lighter mode: a power cut may lose the last commits (never corrupts).
PRAGMA synchronous = NORMAL;
