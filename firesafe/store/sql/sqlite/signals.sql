-- Durable signals: what was sent to a job under a name, kept once per (job, signal name).

-- name: signal_job
-- The job a signal is sent to, by key: its id, its state, and whether it is parked waiting for this
-- signal (queued or scheduled, not due yet, with a wait for this name, the step 'signal:NAME', whose
-- deadline has not passed).
SELECT id, key, state,
       state IN ('queued', 'scheduled') AND run_at > :now AND EXISTS (
           SELECT 1 FROM firesafe_steps s
           WHERE s.job_id = firesafe_jobs.id AND s.name = :step
             AND json_extract(s.result, '$.until') > :now) AS waiting
FROM firesafe_jobs WHERE key = :key;

-- name: signal_insert
-- Keep a signal once per (job, name): a second send of the same name inserts nothing. Returns the
-- signal kept, if this send kept it.
INSERT INTO firesafe_signals (job_id, name, data, actor, reason, sent_at)
VALUES (:job_id, :name, :data, :actor, :reason, :now)
ON CONFLICT (job_id, name) DO NOTHING
RETURNING name, data, actor, reason, sent_at;

-- name: signal_get
-- The signal a job was sent under a name, if any.
SELECT name, data, actor, reason, sent_at FROM firesafe_signals WHERE job_id = :job_id AND name = :name;

-- name: signal_list
-- Every signal a job was sent, oldest first.
SELECT name, data, actor, reason, sent_at FROM firesafe_signals WHERE job_id = :job_id ORDER BY sent_at, name;

-- name: signal_wake
-- Note the signal on the job's row (a running job's finish reads it) and, if it was parked waiting
-- for it (:wake, from signal_job in the same transaction), make it due now. Nothing for a job that
-- has finished.
UPDATE firesafe_jobs
SET signaled_at = :now, run_at = CASE WHEN :wake THEN :now ELSE run_at END, updated_at = :now
WHERE id = :job_id AND state IN ('queued', 'scheduled', 'running');
