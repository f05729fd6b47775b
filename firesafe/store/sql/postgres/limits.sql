-- Limiters (part 5): shared token buckets, waiting lines, pauses, breakers and concurrency slots.
-- The SQLite file holds the same names. Lists arrive as arrays. :now is always given: the limits
-- part reads the clock once per transaction (the database's clock unless a test injected one, read
-- after the limiter rows are locked) and every statement of that transaction uses the same instant.

-- name: limiter_insert
-- Record a limiter not seen before, with a full bucket; an existing row is left as it is.
INSERT INTO {schema}.firesafe_limiters (name, rate, burst, concurrency, breaker_after, cooldown, tokens, tokens_at,
                                        line_at, breaker, failures, created_at, updated_at)
VALUES (%(name)s, %(rate)s, %(burst)s, %(concurrency)s, %(breaker_after)s, %(cooldown)s, %(burst)s, %(now)s,
        %(now)s, 'closed', 0, %(now)s, %(now)s)
ON CONFLICT (name) DO NOTHING;

-- name: limiter_upsert
-- Record a limiter's declared settings (last writer wins); its state is kept, the bucket clipped to the burst.
INSERT INTO {schema}.firesafe_limiters AS l (name, rate, burst, concurrency, breaker_after, cooldown, tokens,
                                             tokens_at, line_at, breaker, failures, created_at, updated_at)
VALUES (%(name)s, %(rate)s, %(burst)s, %(concurrency)s, %(breaker_after)s, %(cooldown)s, %(burst)s, %(now)s,
        %(now)s, 'closed', 0, %(now)s, %(now)s)
ON CONFLICT (name) DO UPDATE SET
    rate = excluded.rate, burst = excluded.burst, concurrency = excluded.concurrency,
    breaker_after = excluded.breaker_after, cooldown = excluded.cooldown,
    tokens = least(l.tokens, excluded.burst), updated_at = excluded.updated_at;

-- name: limiter_lock
-- The rows of some limiters, locked in name order until the transaction ends. PostgreSQL differs:
-- FOR UPDATE serialises the workers deciding on the same limiter (SQLite's BEGIN IMMEDIATE does);
-- the name order keeps two transactions locking overlapping sets from deadlocking.
SELECT * FROM {schema}.firesafe_limiters WHERE name = ANY(%(names)s::text[]) ORDER BY name FOR UPDATE;

-- name: limiter_names
-- The names of every recorded limiter.
SELECT name FROM {schema}.firesafe_limiters ORDER BY name;

-- name: limiter_save
-- Write a limiter's state back (the caller holds its row).
UPDATE {schema}.firesafe_limiters
SET tokens = %(tokens)s, tokens_at = %(tokens_at)s, line_at = %(line_at)s, paused_until = %(paused_until)s,
    pause_reason = %(pause_reason)s, breaker = %(breaker)s, failures = %(failures)s, opened_at = %(opened_at)s,
    retry_at = %(retry_at)s, probe_job = %(probe_job)s, probe_token = %(probe_token)s, updated_at = %(now)s
WHERE name = %(name)s;

-- name: limiter_slots_prune
-- Forget the concurrency slots of some limiters whose job no longer runs under that lease (finished,
-- rescued, or its worker died and the lease expired): that is how a slot is released.
DELETE FROM {schema}.firesafe_limiter_slots s
WHERE s.limiter = ANY(%(names)s::text[])
  AND NOT EXISTS (SELECT 1 FROM {schema}.firesafe_jobs j
                  WHERE j.id = s.job_id AND j.lease_token = s.token
                    AND j.lease_expires >= %(now)s::float8);

-- name: limiter_slots_count
-- Slots in use per limiter (after limiter_slots_prune in the same transaction).
SELECT limiter, count(*) AS n FROM {schema}.firesafe_limiter_slots
WHERE limiter = ANY(%(names)s::text[]) GROUP BY limiter;

-- name: limiter_slot_take
-- Hold a concurrency slot for a job's current lease.
INSERT INTO {schema}.firesafe_limiter_slots (limiter, job_id, token) VALUES (%(limiter)s, %(job_id)s, %(token)s)
ON CONFLICT (limiter, job_id) DO UPDATE SET token = excluded.token;

-- name: limiter_slot_release
-- Give a slot back before the attempt ends (the end of a `with ctx.limit(...)` block).
DELETE FROM {schema}.firesafe_limiter_slots
WHERE limiter = %(limiter)s AND job_id = %(job_id)s AND token = %(token)s;

-- name: limiter_job_live
-- Whether a job still runs under a lease token (the breaker's probe).
SELECT count(*) AS n FROM {schema}.firesafe_jobs
WHERE id = %(job_id)s AND lease_token = %(token)s AND lease_expires >= %(now)s::float8;

-- name: limiter_job_wait
-- Give running attempts back to wait for a limiter: scheduled at their turns, the attempts not used
-- and not counted as deferrals; fenced on the lease token. PostgreSQL differs: the batch is one
-- statement over arrays that also writes the trace entries (attempt_close's work) and returns
-- the ids that applied. The job's error stays its last failed attempt's: a wait is not a failure
-- (its message and error are in its trace entry).
WITH w AS MATERIALIZED (
    SELECT * FROM unnest(%(job_id)s::bigint[], %(token)s::text[], %(seq)s::int[], %(delay)s::float8[],
                         %(reason)s::text[], %(error_type)s::text[], %(message)s::text[],
                         %(traceback)s::text[], %(detail)s::text[])
        AS w(job_id, token, seq, delay, reason, error_type, message, traceback, detail)),
moved AS (
    UPDATE {schema}.firesafe_jobs j
    SET state = 'scheduled', lease_token = NULL, lease_expires = NULL, run_at = %(now)s::float8 + w.delay,
        attempt = j.attempt - 1, reason = w.reason, updated_at = %(now)s::float8
    FROM w
    WHERE j.id = w.job_id AND j.lease_token = w.token
    RETURNING j.id, j.attempt, j.worker, j.started_at),
closed AS (
    INSERT INTO {schema}.firesafe_attempts AS a (job_id, seq, attempt, worker, started_at, ended_at, outcome,
                                                 error_type, message, traceback, detail)
    SELECT w.job_id, w.seq, m.attempt + 1, m.worker, coalesce(m.started_at, %(now)s::float8), %(now)s::float8,
           'deferred', w.error_type, w.message, w.traceback, w.detail
    FROM w JOIN moved m ON m.id = w.job_id
    ON CONFLICT (job_id, seq) DO UPDATE
    SET ended_at = excluded.ended_at, outcome = excluded.outcome, error_type = excluded.error_type,
        message = excluded.message, traceback = excluded.traceback, detail = excluded.detail
    WHERE a.outcome IS NULL)
SELECT id FROM moved;

-- name: limiter_jobs_release
-- Resume: bring the jobs waiting for a limiter forward, one spacing apart from now, in their claim order
-- (by priority: see job_claim).
UPDATE {schema}.firesafe_jobs j
SET run_at = %(now)s::float8 + %(spacing)s::float8 * (r.n - 1), updated_at = %(now)s::float8
FROM (SELECT id, row_number() OVER (ORDER BY run_at - 60.0::float8 * priority, run_at, id) AS n FROM {schema}.firesafe_jobs
      WHERE state = 'scheduled' AND reason = %(reason)s AND run_at > %(now)s::float8) AS r
WHERE j.id = r.id AND j.state = 'scheduled';

-- name: limiter_event_insert
-- Record a limiter event (paused, resumed, breaker_opened, breaker_closed).
INSERT INTO {schema}.firesafe_limiter_events (limiter, at, kind, actor, detail)
VALUES (%(limiter)s, %(now)s, %(kind)s, %(actor)s, %(detail)s);

-- name: limiter_event_list
-- Limiter events after an id, oldest first, optionally of one limiter.
SELECT * FROM {schema}.firesafe_limiter_events
WHERE id > %(after)s AND (%(limiter)s::text IS NULL OR limiter = %(limiter)s::text)
ORDER BY id LIMIT %(limit)s;

-- name: limiter_event_latest
-- The latest limiter events after an id, newest first, optionally of one limiter.
SELECT * FROM {schema}.firesafe_limiter_events
WHERE id > %(after)s AND (%(limiter)s::text IS NULL OR limiter = %(limiter)s::text)
ORDER BY id DESC LIMIT %(limit)s;

-- name: limiter_list
-- Every limiter with its slots in use and the jobs waiting for it.
SELECT l.*,
    (SELECT count(*) FROM {schema}.firesafe_limiter_slots s JOIN {schema}.firesafe_jobs j ON j.id = s.job_id
     WHERE s.limiter = l.name AND j.lease_token = s.token
       AND j.lease_expires >= %(now)s::float8) AS in_flight,
    (SELECT count(*) FROM {schema}.firesafe_jobs j
     WHERE j.state = 'scheduled' AND j.reason = 'limiter:' || l.name) AS waiting
FROM {schema}.firesafe_limiters l ORDER BY l.name;
