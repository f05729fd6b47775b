-- PostgreSQL drops the trace table's declared reference to the jobs table (see
-- migrations/postgres/0011_attempts_unreferenced.sql); SQLite keeps it. There its check is a lookup
-- by rowid in the same process, a small part of a job's cost, and dropping it would mean rebuilding
-- the table. Both dialects delete a job's trace entries with the job (job_delete_finished). This
-- version changes nothing here; it keeps the two dialects' migration versions the same.
SELECT 1;
