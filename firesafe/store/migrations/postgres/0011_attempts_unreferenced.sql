-- The trace table no longer declares its reference to the jobs table. Every statement that writes
-- a trace entry reads the job's own row in the same statement (job_finish joins the jobs it ended,
-- job_rescue the jobs it rescued, limiter_job_wait the jobs it gave back, attempt_close selects the
-- job by id), so an entry can only be written for a job that exists; and the one statement that
-- deletes jobs, job_delete_finished, deletes their entries with them. The declared reference checked
-- that again for every attempt, a trigger's lookup and row lock of the job, on the path
-- of every attempt.
-- SQLite keeps its declaration (see migrations/sqlite/0011_attempts_unreferenced.sql).
ALTER TABLE firesafe_attempts DROP CONSTRAINT IF EXISTS firesafe_attempts_job_id_fkey;
