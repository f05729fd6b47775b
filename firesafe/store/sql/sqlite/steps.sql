-- Durable steps (part 4): records keyed (job, step name), fenced on the attempt's lease.
-- name: step_list
-- The recorded steps of a job, in the order they first completed.
SELECT name, position, result, run_seq, recorded_at FROM firesafe_steps WHERE job_id = :job_id ORDER BY position;

-- name: step_record
-- Record a completed step, only while the attempt still holds the job's lease (fencing).
INSERT INTO firesafe_steps (job_id, name, position, result, run_seq, recorded_at)
SELECT id, :name, :position, :result, runs, :now FROM firesafe_jobs
WHERE id = :job_id AND state = 'running' AND lease_token = :token
ON CONFLICT (job_id, name) DO NOTHING;

-- name: step_divergence_event
-- Record that a running attempt's code differs from its recorded steps (it forgets them from there),
-- only while the attempt still holds the job's lease (fencing): no row written, nothing forgotten.
INSERT INTO firesafe_events (job_id, at, kind, actor, detail)
SELECT id, :now, 'divergence', 'worker', :detail FROM firesafe_jobs
WHERE id = :job_id AND state = 'running' AND lease_token = :token;

-- name: step_delete_from
-- Forget the steps at or after a position (rerun --from-step, a divergence rerun), or all of them.
DELETE FROM firesafe_steps WHERE job_id = :job_id AND position >= :position;

-- name: job_rerun
-- Rerun a finished job on purpose under its key: dead, cancelled or succeeded back to queued.
UPDATE firesafe_jobs
SET state = 'queued', attempt = 0, deferrals = 0, lost = 0, run_at = :now, reason = NULL, result = NULL,
    finished_at = NULL, cancel_requested = 0, updated_at = :now
WHERE id = :job_id AND state IN ('dead', 'cancelled', 'succeeded');
