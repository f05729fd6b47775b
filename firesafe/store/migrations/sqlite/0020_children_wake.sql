-- Waiting for some of a job's children (ctx.wait_children(..., at_least=N), docs/workflows.md): the
-- count of children not ended at or below which a parent parked for its children is due
-- (children_wake_at). 0, the default, is "all ended", as before; a wait for at least N of its
-- children sets it to the count that N more ends reach, in the transaction that reads how many have
-- ended (job_children_wait), so the count-down that reaches it still wakes the parent in one row's
-- update. A constant default rewrites no row.
ALTER TABLE firesafe_jobs ADD COLUMN children_wake_at INTEGER NOT NULL DEFAULT 0;
