-- Durable signals: what was sent to a job under a name, kept once per (job, signal name).

-- name: signal_job
-- The job a signal is sent to, by key: its id, its state, and whether it is parked waiting for this
-- signal (queued or scheduled, not due yet, with a wait for this name, the step 'signal:NAME', whose
-- deadline has not passed).
-- PostgreSQL differs: the row is locked (FOR UPDATE) until the send commits, so no claim or finish
-- moves the job between this answer and signal_wake; the deadline is read with ->> on jsonb.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now)
SELECT j.id, j.key, j.state,
       j.state IN ('queued', 'scheduled') AND j.run_at > c.now AND EXISTS (
           SELECT 1 FROM {schema}.firesafe_steps s
           WHERE s.job_id = j.id AND s.name = %(step)s
             AND CASE WHEN jsonb_typeof(s.result::jsonb -> 'until') = 'number'
                      THEN (s.result::jsonb ->> 'until')::float8 END > c.now) AS waiting
FROM {schema}.firesafe_jobs j CROSS JOIN clock c WHERE j.key = %(key)s
FOR UPDATE OF j;

-- name: signal_insert
-- Keep a signal once per (job, name): a second send of the same name inserts nothing. Returns the
-- signal kept, if this send kept it.
INSERT INTO {schema}.firesafe_signals (job_id, name, data, actor, reason, sent_at)
VALUES (%(job_id)s, %(name)s, %(data)s, %(actor)s, %(reason)s,
        coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8))
ON CONFLICT (job_id, name) DO NOTHING
RETURNING name, data, actor, reason, sent_at;

-- name: signal_get
-- The signal a job was sent under a name, if any.
SELECT name, data, actor, reason, sent_at FROM {schema}.firesafe_signals
WHERE job_id = %(job_id)s AND name = %(name)s;

-- name: signal_list
-- Every signal a job was sent, oldest first.
SELECT name, data, actor, reason, sent_at FROM {schema}.firesafe_signals
WHERE job_id = %(job_id)s ORDER BY sent_at, name;

-- name: signal_wake
-- Note the signal on the job's row (a running job's finish reads it) and, if it was parked waiting
-- for it (:wake, from signal_job in the same transaction), make it due now. Nothing for a job that
-- has finished.
-- PostgreSQL differs: a job made due wakes the workers listening on the store's channel (NOTIFY), as
-- an enqueue does.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
moved AS (
    UPDATE {schema}.firesafe_jobs j
    SET signaled_at = c.now, run_at = CASE WHEN %(wake)s THEN c.now ELSE j.run_at END, updated_at = c.now
    FROM clock c
    WHERE j.id = %(job_id)s AND j.state IN ('queued', 'scheduled', 'running')
    RETURNING j.queue)
SELECT CASE WHEN %(wake)s THEN pg_notify(%(channel)s, queue) END AS notified FROM moved;
