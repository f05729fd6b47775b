-- An attempt's trace entry is written once, when the attempt ends (job_finish, job_rescue,
-- limiter_job_wait), instead of being opened by the claim and updated at the end. The claim notes when
-- the attempt started on the job's own row (started_at, which it writes anyway); while the attempt
-- runs, attempts_of_job shows it from there. One insert per attempt instead of an insert and then an
-- update that could not be HOT (ended_at is indexed): the update wrote the row and its two index
-- entries a second time, on the path of every attempt. Entries opened by an earlier firesafe stay valid: ending one updates it.
ALTER TABLE firesafe_jobs ADD COLUMN started_at double precision;
