-- Named queries of the SQLite store. The PostgreSQL file holds the same names.
-- SQLite has no arrays: lists arrive as JSON text and are read with json_each().
-- SQLite has no server clock: :now comes from the store's injected clock.
-- Jobs reached by a list of ids: a condition on an indexed column beside the list (state = 'dead')
-- is written with SQLite's unary + (+state = 'dead'), which keeps the planner on the ids: plainly
-- written, it read every entry of that state's index (the store's whole history) to find a batch.

-- name: migrations_create
-- The table that records which numbered migrations ran.
CREATE TABLE IF NOT EXISTS firesafe_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL);

-- name: migrations_applied
-- Versions already applied.
SELECT version FROM firesafe_migrations ORDER BY version;

-- name: migration_record
-- Record that one migration ran.
INSERT INTO firesafe_migrations (version, applied_at) VALUES (:version, :now);

-- name: job_max_id
-- The highest id so far; inside the write transaction, rows above it are the ones this insert made.
SELECT coalesce(max(id), 0) AS max_id FROM firesafe_jobs;

-- name: job_insert
-- Insert one job unless its key exists or is reserved (the unique key decides; a key whose job's
-- history was pruned stays reserved by its record, 0017_reserved_keys.sql; the caller compares
-- fingerprints). A spawn's children (children.sql) name their parent (:parent_id; NULL for every
-- other enqueue). SQLite differs: the store leaves the reserved keys out of the batch itself, having
-- read them (reserved_by_keys) in the same write transaction, which no other writer can enter. An
-- INSERT ... SELECT with a WHERE for them inserted rows that name a parent at half the speed
-- (SQLite 3.40: the children's partial index; VALUES does not have it).
INSERT INTO firesafe_jobs (key, name, queue, fingerprint, payload, arg_names, state, max_attempts,
                           run_at, created_at, updated_at, trace_context, priority, parent_id)
VALUES (:key, :name, :queue, :fingerprint, :payload, :arg_names,
        CASE WHEN coalesce(:run_at, :now + :delay) > :now THEN 'scheduled' ELSE 'queued' END,
        :max_attempts, coalesce(:run_at, :now + :delay), :now, :now, :trace_context, :priority, :parent_id)
ON CONFLICT (key) DO NOTHING;

-- name: job_by_keys
-- Jobs whose key is in a JSON list.
SELECT * FROM firesafe_jobs WHERE key IN (SELECT value FROM json_each(:keys));

-- name: reserved_by_keys
-- The records of reserved keys (jobs whose history was pruned) in a JSON list.
SELECT * FROM firesafe_keys WHERE key IN (SELECT value FROM json_each(:keys));

-- name: job_by_key
-- One job by key.
SELECT * FROM firesafe_jobs WHERE key = :key;

-- name: job_claim
-- Claim up to :limit runnable jobs of the given queues for one attempt each, under one lease token.
-- The attempt's trace entry is written when it ends (see attempt_close); started_at notes its start.
-- INDEXED BY: without statistics SQLite's planner picks firesafe_jobs_finished (state, ...) here,
-- which visits and sorts every waiting row, so each claim cost O(backlog); the partial runnable
-- index (queue, run_at) keeps a claim's cost the same at any backlog. The store
-- writes in {index} and {lost}: firesafe_jobs_runnable and "lost = 0" for a claim of jobs never
-- lost, firesafe_jobs_suspects and "lost > 0" for suspects (an index that holds only them).
-- Priorities: jobs are taken in the order of their rank, run_at - 60 x priority (a point of priority
-- counts as a minute of waiting: migrations/sqlite/0016_priority.sql), then run_at, id; both indexes
-- hold that order, written here as in the index so that SQLite matches it. The rank's bound (now +
-- 60 x 100: no due job ranks later, the lowest priority being -100) ends the index scan.
-- It returns what an attempt needs (models.CLAIMED_COLUMNS), not the job's history. SQLite differs:
-- RETURNING gives the rows in no promised order; the store sorts them in claim order
-- (models.claim_rank).
UPDATE firesafe_jobs
SET state = 'running', lease_token = :token, lease_expires = :now + :lease, worker = :worker,
    attempt = attempt + 1, runs = runs + 1, started_at = :now, updated_at = :now
WHERE id IN (
    SELECT id FROM firesafe_jobs INDEXED BY {index}
    WHERE state IN ('queued', 'scheduled') AND run_at - 60.0 * priority <= :now + 6000.0 AND run_at <= :now
      AND queue IN (SELECT value FROM json_each(:queues))
      AND {lost}
    ORDER BY run_at - 60.0 * priority, run_at, id
    LIMIT :limit)
RETURNING id, key, name, queue, state, payload, arg_names, attempt, max_attempts, runs, deferrals, lost, run_at,
          created_at, updated_at, cancel_requested, trace_context, priority, parent_id;

-- name: job_finish
-- End a running attempt: only if the job is still running under this lease token (fencing). A job
-- parking for its children (reason 'children') whose children have all ended meanwhile is due at once
-- (the count-down that ended the last one found it still running: see children.sql).
UPDATE firesafe_jobs
SET state = :state, lease_token = NULL, lease_expires = NULL,
    -- A deferral (a durable wait) after a signal came during the attempt is due now (0018_signals.sql);
    -- so is a parent parked for children that ended meanwhile, enough of them (0019, 0020_children_wake.sql).
    run_at = CASE WHEN :delay IS NULL THEN run_at
                  WHEN :given_back = 1 AND signaled_at >= started_at THEN :now
                  WHEN :reason = 'children' AND children_pending <= children_wake_at THEN :now
                  ELSE :now + :delay END,
    attempt = attempt - :given_back, deferrals = deferrals + :given_back,
    result = coalesce(:result, result),
    error_type = coalesce(:error_type, error_type), error_message = coalesce(:message, error_message),
    reason = :reason,
    finished_at = CASE WHEN :state IN ('succeeded', 'dead', 'cancelled') THEN :now ELSE NULL END,
    updated_at = :now
WHERE id = :job_id AND state = 'running' AND lease_token = :token;

-- name: attempt_close
-- Write the trace entry of an attempt that ended, from its job's row (who ran it, since when) and its
-- outcome; :given_back is how much the end took back from the job's attempt count. One write per
-- attempt: nothing is written for it at the claim. An entry an earlier firesafe opened at the claim
-- is completed instead.
INSERT INTO firesafe_attempts (job_id, seq, attempt, worker, started_at, ended_at, outcome, error_type,
                               message, traceback, detail)
SELECT id, :seq, attempt + :given_back, worker, coalesce(started_at, :now), :now, :outcome, :error_type,
       :message, :traceback, :detail
FROM firesafe_jobs WHERE id = :job_id
ON CONFLICT (job_id, seq) DO UPDATE
SET ended_at = excluded.ended_at, outcome = excluded.outcome, error_type = excluded.error_type,
    message = excluded.message, traceback = excluded.traceback, detail = excluded.detail
WHERE outcome IS NULL;

-- name: job_heartbeat
-- Extend a running attempt's lease if it still holds it; tells whether a cancel was asked for.
UPDATE firesafe_jobs SET lease_expires = :now + :lease
WHERE id = :job_id AND state = 'running' AND lease_token = :token
RETURNING cancel_requested;

-- name: job_list_expired
-- Running jobs whose lease has run out (their worker died or hung).
SELECT id, name, lease_token, attempt, max_attempts, deferrals, lost, runs, cancel_requested, key, queue
FROM firesafe_jobs WHERE state = 'running' AND lease_expires < :now
ORDER BY lease_expires LIMIT :limit;

-- name: job_expire_process
-- End now the leases of the attempts a worker process was running when it exited (its supervisor saw
-- it go), so that the next rescue takes them back instead of waiting for the lease to run out.
-- :prefix is how that process's worker ids begin (see firesafe/worker/worker.py, worker_id_prefix).
-- Fenced on the state; a lease already over is left as it is. Returns the jobs, each of which gets an
-- event (lease_ended, by the supervisor, with how the process ended: event_insert).
UPDATE firesafe_jobs SET lease_expires = :now
WHERE state = 'running' AND lease_expires > :now AND substr(worker, 1, length(:prefix)) = :prefix
RETURNING id;

-- name: job_rescue
-- Take an expired attempt back: fenced on the token seen and on the lease still being expired.
UPDATE firesafe_jobs
SET state = :state, lease_token = NULL, lease_expires = NULL, lost = lost + 1,
    run_at = CASE WHEN :delay IS NULL THEN run_at ELSE :now + :delay END,
    error_type = 'WorkerLost', error_message = :message, reason = :reason,
    finished_at = CASE WHEN :state IN ('dead', 'cancelled') THEN :now ELSE NULL END,
    updated_at = :now
WHERE id = :job_id AND state = 'running' AND lease_token = :token AND lease_expires < :now;

-- name: job_replay
-- Put a dead or cancelled job back in its queue with a fresh attempt budget; its history stays.
UPDATE firesafe_jobs
SET state = 'queued', attempt = 0, deferrals = 0, lost = 0, run_at = :now, reason = NULL,
    finished_at = NULL, cancel_requested = 0, updated_at = :now
WHERE id = :job_id AND state IN ('dead', 'cancelled');

-- name: job_discard
-- Take a dead job out of the dead letters on purpose.
UPDATE firesafe_jobs SET state = 'cancelled', reason = 'discarded', finished_at = :now, updated_at = :now
WHERE id = :job_id AND state = 'dead';

-- name: job_cancel_waiting
-- Cancel a job that waits: at once.
UPDATE firesafe_jobs SET state = 'cancelled', reason = 'cancelled', finished_at = :now, updated_at = :now
WHERE id = :job_id AND state IN ('queued', 'scheduled');

-- name: job_cancel_running
-- Ask a running job to stop; its attempt records the cancel when it ends.
UPDATE firesafe_jobs SET cancel_requested = 1, updated_at = :now WHERE id = :job_id AND state = 'running';

-- name: event_insert
-- Record an event of a job.
INSERT INTO firesafe_events (job_id, at, kind, actor, detail) VALUES (:job_id, :now, :kind, :actor, :detail);

-- name: attempts_of_job
-- The trace of one job, oldest first. An attempt still running has no entry yet (it is written when
-- the attempt ends): it is shown from the job's row, open (no end, no outcome).
SELECT job_id, seq, attempt, worker, started_at, ended_at, outcome, error_type, message, traceback, detail
FROM firesafe_attempts WHERE job_id = :job_id
UNION ALL
SELECT j.id, j.runs, j.attempt, j.worker, coalesce(j.started_at, j.updated_at), NULL, NULL, NULL, NULL, NULL,
       NULL
FROM firesafe_jobs j
WHERE j.id = :job_id AND j.state = 'running'
  AND NOT EXISTS (SELECT 1 FROM firesafe_attempts a WHERE a.job_id = j.id AND a.seq = j.runs)
ORDER BY seq;

-- name: events_of_job
-- The events of one job, oldest first.
SELECT * FROM firesafe_events WHERE job_id = :job_id ORDER BY id;

-- name: job_list
-- Jobs matching optional filters, newest first.
SELECT * FROM firesafe_jobs
WHERE (:state IS NULL OR state = :state) AND (:name IS NULL OR name = :name)
  AND (:queue IS NULL OR queue = :queue) AND (:error_type IS NULL OR error_type = :error_type)
  AND (:since IS NULL OR updated_at >= :since) AND (:until IS NULL OR updated_at < :until)
  AND (:keys IS NULL OR key IN (SELECT value FROM json_each(:keys)))
ORDER BY id DESC LIMIT :limit OFFSET :offset;

-- name: job_count
-- How many jobs match the same filters as job_list.
SELECT count(*) AS n FROM firesafe_jobs
WHERE (:state IS NULL OR state = :state) AND (:name IS NULL OR name = :name)
  AND (:queue IS NULL OR queue = :queue) AND (:error_type IS NULL OR error_type = :error_type)
  AND (:since IS NULL OR updated_at >= :since) AND (:until IS NULL OR updated_at < :until)
  AND (:keys IS NULL OR key IN (SELECT value FROM json_each(:keys)));

-- name: dead_list
-- Dead jobs matching optional filters, the last to die first (by finished_at, then id), a page
-- after the cursor (:after_at, :after_id): the row-value comparison reads the (state, finished_at)
-- index from the cursor on (its entries end in the id), so a page costs its own rows only.
SELECT * FROM firesafe_jobs
WHERE state = 'dead' AND (finished_at, id) < (:after_at, :after_id)
  AND (:name IS NULL OR name = :name) AND (:queue IS NULL OR queue = :queue)
  AND (:error_type IS NULL OR error_type = :error_type) AND (:reason IS NULL OR reason = :reason)
  AND (:since IS NULL OR finished_at >= :since) AND (:until IS NULL OR finished_at < :until)
ORDER BY finished_at DESC, id DESC LIMIT :limit OFFSET :offset;

-- name: dead_count
-- How many dead jobs match the filters of dead_list (cursor, limit and offset aside).
SELECT count(*) AS n FROM firesafe_jobs
WHERE state = 'dead'
  AND (:name IS NULL OR name = :name) AND (:queue IS NULL OR queue = :queue)
  AND (:error_type IS NULL OR error_type = :error_type) AND (:reason IS NULL OR reason = :reason)
  AND (:since IS NULL OR finished_at >= :since) AND (:until IS NULL OR finished_at < :until);

-- name: job_stats
-- Counts by queue and state.
SELECT queue, state, count(*) AS n FROM firesafe_jobs GROUP BY queue, state ORDER BY queue, state;

-- name: job_pending
-- What is left for a burst worker: runnable now, running, and when the next waiting job is due.
SELECT
    (SELECT count(*) FROM firesafe_jobs WHERE state IN ('queued', 'scheduled') AND run_at <= :now
        AND queue IN (SELECT value FROM json_each(:queues))) AS runnable,
    (SELECT count(*) FROM firesafe_jobs WHERE state = 'running'
        AND queue IN (SELECT value FROM json_each(:queues))) AS running,
    (SELECT min(run_at) FROM firesafe_jobs WHERE state IN ('queued', 'scheduled')
        AND queue IN (SELECT value FROM json_each(:queues))) AS next_at,
    (SELECT count(*) FROM firesafe_jobs INDEXED BY firesafe_jobs_suspects
        WHERE state IN ('queued', 'scheduled') AND lost > 0 AND run_at <= :now
        AND queue IN (SELECT value FROM json_each(:queues))) AS suspects;

-- name: job_delete_finished
-- Delete up to :limit jobs in one finished state that finished before :before (frees their keys).
DELETE FROM firesafe_jobs WHERE id IN (
    SELECT id FROM firesafe_jobs WHERE state = :state AND finished_at < :before LIMIT :limit);

-- name: job_reserve_finished
-- Write the record of up to :limit jobs in one finished state that finished more than :older_than
-- and at most :keep_for seconds ago and have no record of that finish yet, in the order they
-- finished from :after_at on (see the PostgreSQL file), so their keys stay reserved once their
-- rows are deleted (job_delete_reserved); returns the (finished_at, id) of each job recorded. The
-- result is kept when it is at most :result_max bytes, else its SHA-256 (firesafe_sha256: the
-- store's connections define it).
INSERT INTO firesafe_keys (key, id, name, fingerprint, state, finished_at, reserved_at, result, result_digest)
SELECT j.key, j.id, j.name, j.fingerprint, j.state, j.finished_at, :now,
       CASE WHEN length(CAST(j.result AS BLOB)) <= :result_max THEN j.result END,
       CASE WHEN length(CAST(j.result AS BLOB)) > :result_max THEN firesafe_sha256(j.result) END
FROM firesafe_jobs j
WHERE j.state = :state AND j.finished_at < :now - :older_than AND j.finished_at >= max(:now - :keep_for, :after_at)
  AND NOT EXISTS (SELECT 1 FROM firesafe_keys r WHERE r.key = j.key AND r.finished_at = j.finished_at)
ORDER BY j.finished_at
LIMIT :limit
-- A record of an earlier finish (the job was rerun meanwhile) is replaced; one of this finish
-- (written by another prune meanwhile) is left as it is, and not returned.
ON CONFLICT (key) DO UPDATE SET id = excluded.id, finished_at = excluded.finished_at,
    reserved_at = excluded.reserved_at, name = excluded.name, fingerprint = excluded.fingerprint,
    state = excluded.state, result = excluded.result, result_digest = excluded.result_digest
WHERE firesafe_keys.finished_at <> excluded.finished_at
RETURNING finished_at, id;

-- name: job_delete_reserved
-- Delete up to :limit jobs in one finished state that finished more than :older_than seconds ago
-- and whose key's record was written more than :settle seconds ago, with their trace entries (see
-- the PostgreSQL file: the wait closes a race that SQLite's one writer at a time cannot have, kept
-- for one behaviour on both).
DELETE FROM firesafe_jobs WHERE id IN (
    SELECT j.id FROM firesafe_jobs j
    WHERE j.state = :state AND j.finished_at < :now - :older_than
      AND EXISTS (SELECT 1 FROM firesafe_keys r
                  WHERE r.key = j.key AND r.id = j.id AND r.finished_at = j.finished_at
                    AND r.reserved_at < :now - :settle)
    ORDER BY j.finished_at
    LIMIT :limit);

-- name: reserved_delete_expired
-- Free the keys of up to :limit records of jobs that finished more than :older_than seconds ago.
DELETE FROM firesafe_keys WHERE key IN (
    SELECT key FROM firesafe_keys WHERE finished_at < :now - :older_than ORDER BY finished_at LIMIT :limit);

-- name: worker_beat
-- Record that a worker is alive.
INSERT INTO firesafe_workers (id, host, pid, queues, started_at, last_seen)
VALUES (:id, :host, :pid, :queues, :now, :now)
ON CONFLICT (id) DO UPDATE SET last_seen = :now;

-- name: worker_remove
-- A worker that stopped cleanly.
DELETE FROM firesafe_workers WHERE id = :id;

-- name: worker_remove_process
-- Forget the workers of one process that exited (its supervisor saw it go): ids that begin with :prefix.
DELETE FROM firesafe_workers WHERE substr(id, 1, length(:prefix)) = :prefix;

-- name: worker_list
-- Workers seen, most recent first.
SELECT * FROM firesafe_workers ORDER BY last_seen DESC;

-- name: worker_prune
-- Forget workers not seen since :before.
DELETE FROM firesafe_workers WHERE last_seen < :before;

-- name: leader_acquire
-- Take or renew a named leader lease; returns a row only to the holder.
INSERT INTO firesafe_leaders (name, holder, expires_at) VALUES (:name, :holder, :now + :ttl)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE firesafe_leaders.holder = excluded.holder OR firesafe_leaders.expires_at < :now
RETURNING holder;

-- name: leader_release_process
-- Give up the leader leases held by the workers of one process that exited (holders begin with :prefix).
DELETE FROM firesafe_leaders WHERE substr(holder, 1, length(:prefix)) = :prefix;

-- name: leader_release
-- Give a leader lease up.
DELETE FROM firesafe_leaders WHERE name = :name AND holder = :holder;

