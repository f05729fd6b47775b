-- Child jobs (docs/workflows.md). A child's row names its parent (parent_id); a parent's row counts
-- its children not yet in a final state (children_pending), kept by the store: raised in the
-- transaction that inserts the children (job_spawn), lowered in the transaction that moves a child to
-- succeeded, dead or cancelled (job_children_settle, then job_parents_count_down), raised again by a
-- replay or rerun of a child. settled says whether a child's final state has been taken off its
-- parent's count, so that lowering it twice for one move is impossible whatever path the move took.
-- The count that reaches 0 wakes a parent parked for its children (state scheduled, reason
-- 'children'): one row's update, not a read of every child. parent_id is no foreign key: pruning
-- deletes finished jobs in bulk and must not check every row against its children; a parent pruned
-- before its children leaves them naming an id no row has, which readers show as a parent that is gone.
ALTER TABLE firesafe_jobs ADD COLUMN parent_id INTEGER;
ALTER TABLE firesafe_jobs ADD COLUMN children_pending INTEGER NOT NULL DEFAULT 0;
ALTER TABLE firesafe_jobs ADD COLUMN settled INTEGER NOT NULL DEFAULT 0;
-- A parent's children (show, cancel and replay cascades); partial: plain jobs are not in it.
CREATE INDEX firesafe_jobs_parent ON firesafe_jobs (parent_id, state) WHERE parent_id IS NOT NULL;
