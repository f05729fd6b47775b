-- Child jobs (docs/workflows.md): the parent's count of children not yet ended, kept in the store
-- (migrations/postgres/0019_children.sql). Each child's end is counted once (settled), in the
-- transaction that ends it; the count reaching 0 wakes a parked parent.

-- name: job_spawn_parent
-- Hold the parent's row for a spawn, only while its attempt holds the lease (fencing), once the
-- children are inserted (ChildrenCommon.job_spawn_many: a finish takes a child's row, then its
-- parent's). PostgreSQL differs: FOR UPDATE keeps a rescue out until the spawn commits. Running by
-- the token (see the header of postgres.sql).
SELECT id, key FROM {schema}.firesafe_jobs
WHERE id = %(parent_id)s AND lease_token = %(token)s
FOR UPDATE;

-- name: job_children_add
-- Count a spawn's new children (none of them has ended: they were inserted in this transaction) on
-- their parent, and note the spawn in its events.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
counted AS (
    UPDATE {schema}.firesafe_jobs j SET children_pending = j.children_pending + %(n)s::int
    WHERE j.id = %(parent_id)s
    RETURNING j.id)
INSERT INTO {schema}.firesafe_events (job_id, at, kind, actor, detail)
SELECT c.id, k.now, 'spawned', 'job', %(detail)s FROM counted c CROSS JOIN clock k;

-- name: job_children_settle
-- Mark the children among these jobs that have ended and were not counted off yet; returns each one's
-- parent (once per child), whose count job_parents_count_down then lowers. The condition as
-- (...) IS TRUE: by id, never the finished or the children's index (see the header of postgres.sql).
UPDATE {schema}.firesafe_jobs SET settled = true
WHERE id = ANY(%(ids)s::bigint[])
  AND (parent_id IS NOT NULL AND NOT settled AND state IN ('succeeded', 'dead', 'cancelled')) IS TRUE
RETURNING parent_id;

-- name: job_children_unsettle
-- Children moved out of an ended state (replay, rerun): count them on their parent again; returns
-- each one's parent (once per child), whose count job_parents_count_up raises. By id, as
-- job_children_settle.
UPDATE {schema}.firesafe_jobs SET settled = false
WHERE id = ANY(%(ids)s::bigint[])
  AND (parent_id IS NOT NULL AND settled AND state NOT IN ('succeeded', 'dead', 'cancelled')) IS TRUE
RETURNING parent_id;

-- name: job_parents_count_down
-- Lower each parent's count by its children that ended (a parent id appears once per child); a
-- parent parked for its children (scheduled, reason 'children') whose count reaches its children_wake_at
-- (0: all ended; job_children_wait) is due now:
-- it gets a 'woken' event and the workers listening are woken. The parents' rows are locked in id
-- order, so concurrent batches cannot deadlock on them; every transaction takes a child's row before
-- its parent's (a finish, a rescue, a cancel, a spawn).
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
d AS (SELECT p AS id, count(*)::int AS n FROM unnest(%(parents)s::bigint[]) AS p GROUP BY p),
locked AS (
    SELECT j.id FROM {schema}.firesafe_jobs j JOIN d ON d.id = j.id ORDER BY j.id FOR UPDATE OF j),
lowered AS (
    UPDATE {schema}.firesafe_jobs j
    SET children_pending = j.children_pending - d.n,
        run_at = CASE WHEN j.children_pending - d.n <= j.children_wake_at AND j.state = 'scheduled' AND j.reason = 'children'
                      THEN least(j.run_at, c.now) ELSE j.run_at END
    FROM locked l JOIN d ON d.id = l.id CROSS JOIN clock c
    WHERE j.id = l.id
    RETURNING j.id, j.queue, c.now AS at,
              (j.children_pending <= j.children_wake_at AND j.children_pending + d.n > j.children_wake_at
               -- woken once, by the decrement that crosses the mark (not again by later ones)
               AND j.state = 'scheduled' AND j.reason = 'children') AS woke),
noted AS (
    INSERT INTO {schema}.firesafe_events (job_id, at, kind, actor, detail)
    SELECT id, at, 'woken', 'children', NULL FROM lowered WHERE woke),
woken AS (
    SELECT pg_notify(%(channel)s, q.queue) FROM (SELECT DISTINCT queue FROM lowered WHERE woke) q)
SELECT id, woke, (SELECT count(*) FROM woken) AS notified FROM lowered;

-- name: job_parents_count_up
-- Raise each parent's count by its children moved out of an ended state (a parent id appears once
-- per child). A parent already woken finds them waiting when it runs, and parks again.
WITH d AS (SELECT p AS id, count(*)::int AS n FROM unnest(%(parents)s::bigint[]) AS p GROUP BY p),
locked AS (
    SELECT j.id FROM {schema}.firesafe_jobs j JOIN d ON d.id = j.id ORDER BY j.id FOR UPDATE OF j)
UPDATE {schema}.firesafe_jobs j SET children_pending = j.children_pending + d.n
FROM locked l JOIN d ON d.id = l.id
WHERE j.id = l.id;

-- name: job_children_ids
-- The children of these jobs that are in one of the given states (cancel and replay cascades).
SELECT id FROM {schema}.firesafe_jobs
WHERE parent_id = ANY(%(ids)s::bigint[]) AND state = ANY(%(states)s::text[])
ORDER BY id;

-- name: job_children_counts
-- How many children a job has in each state.
SELECT state, count(*) AS n FROM {schema}.firesafe_jobs WHERE parent_id = %(parent_id)s GROUP BY state;

-- name: job_children_page
-- A page of a job's children, in spawn order (by id), optionally of one state.
SELECT * FROM {schema}.firesafe_jobs
WHERE parent_id = %(parent_id)s AND (%(state)s::text IS NULL OR state = %(state)s::text)
  AND id > %(after)s::bigint
ORDER BY id LIMIT %(limit)s;

-- name: job_outcomes
-- How jobs stand, by key (a parent's wait collects its children): only the columns an outcome needs.
SELECT id, key, name, state, result, error_type, error_message, reason, finished_at, parent_id
FROM {schema}.firesafe_jobs WHERE key = ANY(%(keys)s::text[]);

-- name: job_by_id
-- One job by id (a child's parent).
SELECT * FROM {schema}.firesafe_jobs WHERE id = %(id)s;

-- name: step_delete_waits
-- Forget the wait records of jobs (a replay or rerun of a parent: its waits count their deadlines anew).
DELETE FROM {schema}.firesafe_steps WHERE job_id = ANY(%(ids)s::bigint[]) AND name LIKE 'wait-children:%%';

-- name: job_children_wait
-- A wait for some of a running parent's children, under its lease: its count of children not ended
-- (then job_children_ended and job_children_wake_set, in the same transaction). The row is locked:
-- a child's count-down waits for it, so the ended children counted next and this count agree.
SELECT children_pending FROM {schema}.firesafe_jobs
WHERE id = %(parent_id)s AND lease_token = %(token)s  -- running by the token (see the header of postgres.sql)
FOR UPDATE;

-- name: job_children_ended
-- How many of these children (keys) of a parent have ended.
SELECT count(*)::int AS n FROM {schema}.firesafe_jobs
WHERE parent_id = %(parent_id)s AND key = ANY(%(keys)s::text[]) AND state IN ('succeeded', 'dead', 'cancelled');

-- name: job_children_wake_set
-- The count of children not ended at or below which the parent, parked for its children, is due.
UPDATE {schema}.firesafe_jobs SET children_wake_at = %(wake_at)s::int WHERE id = %(parent_id)s;
