-- Limiters (part 5): shared token buckets, waiting lines, pauses, breakers and concurrency slots.
-- Lists arrive as JSON text (json_each); the PostgreSQL file holds the same names over arrays.

-- name: limiter_insert
-- Record a limiter not seen before, with a full bucket; an existing row is left as it is.
INSERT INTO firesafe_limiters (name, rate, burst, concurrency, breaker_after, cooldown, tokens, tokens_at, line_at,
                               breaker, failures, created_at, updated_at)
VALUES (:name, :rate, :burst, :concurrency, :breaker_after, :cooldown, :burst, :now, :now, 'closed', 0, :now, :now)
ON CONFLICT (name) DO NOTHING;

-- name: limiter_upsert
-- Record a limiter's declared settings (last writer wins); its state is kept, the bucket clipped to the burst.
INSERT INTO firesafe_limiters (name, rate, burst, concurrency, breaker_after, cooldown, tokens, tokens_at, line_at,
                               breaker, failures, created_at, updated_at)
VALUES (:name, :rate, :burst, :concurrency, :breaker_after, :cooldown, :burst, :now, :now, 'closed', 0, :now, :now)
ON CONFLICT (name) DO UPDATE SET
    rate = excluded.rate, burst = excluded.burst, concurrency = excluded.concurrency,
    breaker_after = excluded.breaker_after, cooldown = excluded.cooldown,
    tokens = min(firesafe_limiters.tokens, excluded.burst), updated_at = excluded.updated_at;

-- name: limiter_lock
-- The rows of some limiters, in name order. SQLite differs: no FOR UPDATE; the caller's BEGIN IMMEDIATE
-- already holds the only write lock, so no other transaction can change them before it commits.
SELECT * FROM firesafe_limiters WHERE name IN (SELECT value FROM json_each(:names)) ORDER BY name;

-- name: limiter_names
-- The names of every recorded limiter.
SELECT name FROM firesafe_limiters ORDER BY name;

-- name: limiter_save
-- Write a limiter's state back (the caller holds its row).
UPDATE firesafe_limiters
SET tokens = :tokens, tokens_at = :tokens_at, line_at = :line_at, paused_until = :paused_until,
    pause_reason = :pause_reason, breaker = :breaker, failures = :failures, opened_at = :opened_at,
    retry_at = :retry_at, probe_job = :probe_job, probe_token = :probe_token, updated_at = :now
WHERE name = :name;

-- name: limiter_slots_prune
-- Forget the concurrency slots of some limiters whose job no longer runs under that lease (finished,
-- rescued, or its worker died and the lease expired): that is how a slot is released.
DELETE FROM firesafe_limiter_slots
WHERE limiter IN (SELECT value FROM json_each(:names))
  AND NOT EXISTS (SELECT 1 FROM firesafe_jobs j
                  WHERE j.id = firesafe_limiter_slots.job_id AND j.state = 'running'
                    AND j.lease_token = firesafe_limiter_slots.token AND j.lease_expires >= :now);

-- name: limiter_slots_count
-- Slots in use per limiter (after limiter_slots_prune in the same transaction).
SELECT limiter, count(*) AS n FROM firesafe_limiter_slots
WHERE limiter IN (SELECT value FROM json_each(:names)) GROUP BY limiter;

-- name: limiter_slot_take
-- Hold a concurrency slot for a job's current lease.
INSERT INTO firesafe_limiter_slots (limiter, job_id, token) VALUES (:limiter, :job_id, :token)
ON CONFLICT (limiter, job_id) DO UPDATE SET token = excluded.token;

-- name: limiter_slot_release
-- Give a slot back before the attempt ends (the end of a `with ctx.limit(...)` block).
DELETE FROM firesafe_limiter_slots WHERE limiter = :limiter AND job_id = :job_id AND token = :token;

-- name: limiter_job_live
-- Whether a job still runs under a lease token (the breaker's probe).
SELECT count(*) AS n FROM firesafe_jobs
WHERE id = :job_id AND state = 'running' AND lease_token = :token AND lease_expires >= :now;

-- name: limiter_job_wait
-- Give a running attempt back to wait for a limiter: scheduled at its turn, the attempt not used and
-- not counted as a deferral; fenced on the lease token. The job's error stays its last failed
-- attempt's: a wait is not a failure (its message and error are in its trace entry).
UPDATE firesafe_jobs
SET state = 'scheduled', lease_token = NULL, lease_expires = NULL, run_at = :now + :delay,
    attempt = attempt - 1, reason = :reason, updated_at = :now
WHERE id = :job_id AND state = 'running' AND lease_token = :token;

-- name: limiter_jobs_release
-- Resume: bring the jobs waiting for a limiter forward, one spacing apart from now, in their claim order
-- (by priority: see job_claim).
UPDATE firesafe_jobs
SET run_at = :now + :spacing * (r.n - 1), updated_at = :now
FROM (SELECT id, row_number() OVER (ORDER BY run_at - 60.0 * priority, run_at, id) AS n FROM firesafe_jobs
      WHERE state = 'scheduled' AND reason = :reason AND run_at > :now) AS r
WHERE firesafe_jobs.id = r.id AND firesafe_jobs.state = 'scheduled';

-- name: limiter_event_insert
-- Record a limiter event (paused, resumed, breaker_opened, breaker_closed).
INSERT INTO firesafe_limiter_events (limiter, at, kind, actor, detail) VALUES (:limiter, :now, :kind, :actor, :detail);

-- name: limiter_event_list
-- Limiter events after an id, oldest first, optionally of one limiter.
SELECT * FROM firesafe_limiter_events
WHERE id > :after AND (:limiter IS NULL OR limiter = :limiter)
ORDER BY id LIMIT :limit;

-- name: limiter_event_latest
-- The latest limiter events after an id, newest first, optionally of one limiter.
SELECT * FROM firesafe_limiter_events
WHERE id > :after AND (:limiter IS NULL OR limiter = :limiter)
ORDER BY id DESC LIMIT :limit;

-- name: limiter_list
-- Every limiter with its slots in use and the jobs waiting for it.
SELECT l.*,
    (SELECT count(*) FROM firesafe_limiter_slots s JOIN firesafe_jobs j ON j.id = s.job_id
     WHERE s.limiter = l.name AND j.state = 'running' AND j.lease_token = s.token
       AND j.lease_expires >= :now) AS in_flight,
    (SELECT count(*) FROM firesafe_jobs j
     WHERE j.state = 'scheduled' AND j.reason = 'limiter:' || l.name) AS waiting
FROM firesafe_limiters l ORDER BY l.name;
