-- Job priorities (docs/priorities.md). A job's priority is a whole number from -100 to 100, 0 by
-- default; the claim takes jobs in the order of their rank, run_at - 60 x priority: each point of
-- priority counts as a minute of waiting, so a higher priority runs first among jobs that became
-- due within a minute a point of each other, equal priorities keep their (run_at, id) order, and
-- no job is passed for ever (one that became due more than 200 minutes after it never is). The
-- rank is fixed per row (the clock is not in it), so an index on the expression holds it: the
-- runnable and suspects indexes are rebuilt on it (the claim names them, INDEXED BY), with run_at
-- after it so the claim's "run_at <= :now" is checked in the index. The constants 60 and 100 are
-- firesafe.models.PRIORITY_STEP and PRIORITY_MAX; the claim writes the same expression
-- (store/sql/sqlite.sql, job_claim), which SQLite needs to match the index.
ALTER TABLE firesafe_jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0 CHECK (priority BETWEEN -100 AND 100);
DROP INDEX firesafe_jobs_runnable;
CREATE INDEX firesafe_jobs_runnable ON firesafe_jobs (queue, run_at - 60.0 * priority, run_at)
    WHERE state IN ('queued', 'scheduled');
DROP INDEX firesafe_jobs_suspects;
CREATE INDEX firesafe_jobs_suspects ON firesafe_jobs (queue, run_at - 60.0 * priority, run_at)
    WHERE state IN ('queued', 'scheduled') AND lost > 0;
