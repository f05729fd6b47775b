-- An attempt's trace entry is written once, when the attempt ends, instead of being opened by the
-- claim and updated at the end: one write per attempt instead of two. The claim notes when the
-- attempt started on the job's own row (started_at); while it runs, attempts_of_job shows it from
-- there. Entries opened by an earlier firesafe stay valid: ending one updates it. (As on PostgreSQL,
-- see migrations/postgres/0009_attempts_written_once.sql.)
ALTER TABLE firesafe_jobs ADD COLUMN started_at REAL;
