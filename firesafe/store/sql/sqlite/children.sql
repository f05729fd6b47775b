-- Child jobs (docs/workflows.md): the parent's count of children not yet ended, kept in the store
-- (migrations/sqlite/0019_children.sql). Each child's end is counted once (settled), in the
-- transaction that ends it; the count reaching 0 wakes a parked parent. Lists arrive as JSON text.

-- name: job_spawn_parent
-- The parent's row for a spawn, only while its attempt holds the lease (fencing), once the children
-- are inserted (as on PostgreSQL). SQLite differs: no FOR UPDATE, the spawn's write transaction
-- (BEGIN IMMEDIATE) already keeps every other writer out.
SELECT id, key FROM firesafe_jobs WHERE id = :parent_id AND state = 'running' AND lease_token = :token;

-- name: job_children_add
-- Count a spawn's new children (none of them has ended: they were inserted in this transaction) on
-- their parent. SQLite differs: the spawn's event is written by event_insert.
UPDATE firesafe_jobs SET children_pending = children_pending + :n WHERE id = :parent_id;

-- name: job_children_settle
-- Mark the children among these jobs that have ended and were not counted off yet; returns each one's
-- parent (once per child), whose count job_parents_count_down then lowers.
-- +parent_id, +state: by id (see the header of sqlite.sql).
UPDATE firesafe_jobs SET settled = 1
WHERE id IN (SELECT value FROM json_each(:ids)) AND +parent_id IS NOT NULL AND NOT settled
  AND +state IN ('succeeded', 'dead', 'cancelled')
RETURNING parent_id;

-- name: job_children_unsettle
-- Children moved out of an ended state (replay, rerun): count them on their parent again; returns
-- each one's parent (once per child), whose count job_parents_count_up raises.
UPDATE firesafe_jobs SET settled = 0
WHERE id IN (SELECT value FROM json_each(:ids)) AND parent_id IS NOT NULL AND settled
  AND state NOT IN ('succeeded', 'dead', 'cancelled')
RETURNING parent_id;

-- name: job_parents_count_down
-- Lower each parent's count by its children that ended (a parent id appears once per child); a
-- parent parked for its children (scheduled, reason 'children') whose count reaches its children_wake_at
-- (0: all ended; job_children_wait) is due now.
-- Returns the parents, and which of them woke (each gets a 'woken' event: event_insert).
UPDATE firesafe_jobs
SET children_pending = children_pending - (SELECT count(*) FROM json_each(:parents) WHERE value = firesafe_jobs.id),
    run_at = CASE WHEN children_pending - (SELECT count(*) FROM json_each(:parents) WHERE value = firesafe_jobs.id) <= children_wake_at
                       AND state = 'scheduled' AND reason = 'children'
                  THEN min(run_at, :now) ELSE run_at END
WHERE id IN (SELECT value FROM json_each(:parents))
RETURNING id, (children_pending <= children_wake_at AND state = 'scheduled' AND reason = 'children'
               -- woken once, by the decrement that crosses the mark (not again by later ones)
               AND children_pending + (SELECT count(*) FROM json_each(:parents) WHERE value = firesafe_jobs.id)
                   > children_wake_at) AS woke;

-- name: job_parents_count_up
-- Raise each parent's count by its children moved out of an ended state (a parent id appears once
-- per child). A parent already woken finds them waiting when it runs, and parks again.
UPDATE firesafe_jobs
SET children_pending = children_pending + (SELECT count(*) FROM json_each(:parents) WHERE value = firesafe_jobs.id)
WHERE id IN (SELECT value FROM json_each(:parents));

-- name: job_children_ids
-- The children of these jobs that are in one of the given states (cancel and replay cascades).
SELECT id FROM firesafe_jobs
WHERE parent_id IN (SELECT value FROM json_each(:ids)) AND state IN (SELECT value FROM json_each(:states))
ORDER BY id;

-- name: job_children_counts
-- How many children a job has in each state.
SELECT state, count(*) AS n FROM firesafe_jobs WHERE parent_id = :parent_id GROUP BY state;

-- name: job_children_page
-- A page of a job's children, in spawn order (by id), optionally of one state.
SELECT * FROM firesafe_jobs
WHERE parent_id = :parent_id AND (:state IS NULL OR state = :state) AND id > :after
ORDER BY id LIMIT :limit;

-- name: job_outcomes
-- How jobs stand, by key (a parent's wait collects its children): only the columns an outcome needs.
SELECT id, key, name, state, result, error_type, error_message, reason, finished_at, parent_id
FROM firesafe_jobs WHERE key IN (SELECT value FROM json_each(:keys));

-- name: job_by_id
-- One job by id (a child's parent).
SELECT * FROM firesafe_jobs WHERE id = :id;

-- name: step_delete_waits
-- Forget the wait records of jobs (a replay or rerun of a parent: its waits count their deadlines anew).
DELETE FROM firesafe_steps WHERE job_id IN (SELECT value FROM json_each(:ids)) AND name LIKE 'wait-children:%';

-- name: job_children_wait
-- A wait for some of a running parent's children, under its lease: its count of children not ended
-- (then job_children_ended and job_children_wake_set, in the same transaction). SQLite differs: no
-- FOR UPDATE, the write transaction (BEGIN IMMEDIATE) already keeps every other writer out.
SELECT children_pending FROM firesafe_jobs WHERE id = :parent_id AND state = 'running' AND lease_token = :token;

-- name: job_children_ended
-- How many of these children (JSON keys) of a parent have ended.
SELECT count(*) AS n FROM firesafe_jobs
WHERE parent_id = :parent_id AND key IN (SELECT value FROM json_each(:keys))
  AND state IN ('succeeded', 'dead', 'cancelled');

-- name: job_children_wake_set
-- The count of children not ended at or below which the parent, parked for its children, is due.
UPDATE firesafe_jobs SET children_wake_at = :wake_at WHERE id = :parent_id;
