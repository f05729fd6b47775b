-- Durable steps (part 4): records keyed (job, step name), fenced on the attempt's lease.

-- name: step_list
-- The recorded steps of a job, in the order they first completed.
SELECT name, position, result, run_seq, recorded_at FROM {schema}.firesafe_steps
WHERE job_id = %(job_id)s ORDER BY position;

-- name: step_record
-- Record a completed step, only while the attempt still holds the job's lease (fencing).
-- PostgreSQL differs: FOR SHARE holds the job row so a concurrent rescue cannot slip in between.
INSERT INTO {schema}.firesafe_steps (job_id, name, position, result, run_seq, recorded_at)
SELECT id, %(name)s, %(position)s, %(result)s, runs,
       coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
FROM (SELECT id, runs FROM {schema}.firesafe_jobs
      WHERE id = %(job_id)s AND lease_token = %(token)s FOR SHARE) j
ON CONFLICT (job_id, name) DO NOTHING;

-- name: step_divergence_event
-- Record that a running attempt's code differs from its recorded steps (it forgets them from there),
-- only while the attempt still holds the job's lease (fencing): no row written, nothing forgotten.
-- PostgreSQL differs: FOR SHARE holds the job row until the forgetting commits, so no rescue slips in.
INSERT INTO {schema}.firesafe_events (job_id, at, kind, actor, detail)
SELECT id, coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8), 'divergence', 'worker',
       %(detail)s
FROM (SELECT id FROM {schema}.firesafe_jobs
      WHERE id = %(job_id)s AND lease_token = %(token)s FOR SHARE) j;  -- running by the token (postgres.sql)

-- name: step_delete_from
-- Forget the steps at or after a position (rerun --from-step, a divergence rerun), or all of them.
DELETE FROM {schema}.firesafe_steps WHERE job_id = %(job_id)s AND position >= %(position)s;

-- name: job_rerun
-- Rerun a finished job on purpose under its key: dead, cancelled or succeeded back to queued.
-- PostgreSQL differs: it also wakes listening workers.
WITH moved AS (
    UPDATE {schema}.firesafe_jobs
    SET state = 'queued', attempt = 0, deferrals = 0, lost = 0,
        run_at = coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8), reason = NULL,
        result = NULL, finished_at = NULL, cancel_requested = false,
        updated_at = coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
    WHERE id = %(job_id)s AND (state IN ('dead', 'cancelled', 'succeeded')) IS TRUE  -- by id (see the header of postgres.sql)
    RETURNING id, queue)
SELECT id, pg_notify(%(channel)s, queue) FROM moved;
