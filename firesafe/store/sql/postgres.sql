-- Named queries of the PostgreSQL store. The SQLite file holds the same names.
-- {schema} is replaced by firesafe's schema, validated and quoted as an identifier (psycopg.sql) when
-- the store opens; values are always parameters (psycopg's named placeholders).
-- Lists arrive as arrays (SQLite reads JSON text with json_each()).
-- The clock (invariant 5): :now is NULL unless a test injected a clock, so production writes use the
-- database's clock. Each statement reads it once, in a MATERIALIZED "clock" CTE, so every time written
-- by one statement is the same instant.
-- Batches: where SQLite loops over items in one transaction, PostgreSQL sends the whole batch as arrays
-- in one statement (one round trip, atomic without an explicit transaction).
-- Running jobs reached by id: a job holds a lease token exactly while it runs (the CHECK constraint
-- firesafe_jobs_leased_while_running), so a statement that reaches jobs by id names the running
-- state by the token: lease_token = the attempt's token (the fence), or lease_token IS NOT NULL. It
-- never writes state = 'running' there: that condition matches the partial leases index, and a
-- planner whose statistics were taken while few jobs ran would read every running job's entry of
-- that index to find a batch instead of looking each job up by its id (see migration 0010).
-- Statements about the running jobs as a set (the rescue's look for expired leases, counts) write
-- state = 'running' and read that index.
-- Waiting, ended or child jobs reached by id: the same holds for the partial runnable, finished and
-- children's indexes. A statement that reaches jobs by id and needs them waiting or ended, or
-- children (a replay, a cancel, a child's count-down), writes that condition as (...) IS TRUE, which
-- no index can serve, so the jobs are looked up by id; written plainly, a planner whose statistics
-- saw none ended read every entry of the finished index (the store's whole history) to find a batch.

-- name: schema_present
-- Whether firesafe's schema exists (PostgreSQL only): a DBA may create it for a role that may not.
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %(schema)s) AS present;

-- name: schema_create
-- firesafe's own schema, so its tables never collide with the application's (PostgreSQL only).
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: migrate_lock
-- Serialise concurrent migrate() calls on this schema until the transaction ends (PostgreSQL only).
SELECT pg_advisory_xact_lock(hashtext(%(lock)s));

-- name: migrations_search_path
-- Migration files are unqualified DDL: run them inside firesafe's schema (PostgreSQL only).
SET LOCAL search_path TO {schema};

-- name: migrations_present
-- Whether the migrations table exists yet (PostgreSQL only; SQLite asks sqlite_master).
SELECT to_regclass('{schema}.firesafe_migrations') IS NOT NULL AS present;

-- name: migrations_create
-- The table that records which numbered migrations ran.
CREATE TABLE IF NOT EXISTS {schema}.firesafe_migrations (
    version integer PRIMARY KEY,
    applied_at double precision NOT NULL);

-- name: migrations_applied
-- Versions already applied.
SELECT version FROM {schema}.firesafe_migrations ORDER BY version;

-- name: migration_record
-- Record that one migration ran.
INSERT INTO {schema}.firesafe_migrations (version, applied_at)
VALUES (%(version)s, coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8));

-- name: clock_now
-- The database's clock, in seconds since the epoch (PostgreSQL only: SQLite uses the process clock).
SELECT extract(epoch FROM clock_timestamp())::float8 AS now;

-- name: listen
-- Subscribe this connection to the schema's wake-up channel (PostgreSQL only).
LISTEN {channel};

-- name: savepoint
-- Fence an enqueue inside the caller's transaction (enqueue(conn=...), PostgreSQL only), so a conflict
-- undoes only the enqueue.
SAVEPOINT firesafe_enqueue;

-- name: savepoint_rollback
-- Undo what the enqueue wrote; the caller's transaction goes on (PostgreSQL only).
ROLLBACK TO SAVEPOINT firesafe_enqueue;

-- name: savepoint_release
-- Keep what the enqueue wrote as part of the caller's transaction (PostgreSQL only).
RELEASE SAVEPOINT firesafe_enqueue;

-- name: job_max_id
-- The highest id so far. Unused on PostgreSQL (job_insert's RETURNING tells which rows are new);
-- kept so both dialect files define the same names.
SELECT coalesce(max(id), 0) AS max_id FROM {schema}.firesafe_jobs;

-- name: job_ids_next
-- Reserve ids for a batch, in enqueue order, as one array, and read the clock once for the whole
-- batch, whose chunks are separate statements (PostgreSQL only: see job_insert).
SELECT array_agg(nextval('{schema}.firesafe_jobs_id_seq'::regclass) ORDER BY g) AS ids,
       coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now
FROM generate_series(1, %(n)s::int) AS g;

-- name: job_insert
-- Insert a batch of jobs unless their key exists or is reserved (the unique key decides; the caller
-- compares fingerprints and looks up the keys that were not inserted with job_by_keys, then those
-- still unseen with reserved_by_keys).
-- PostgreSQL differs: a batch is one statement over arrays (array literals the store writes itself,
-- the fastest form to build and to parse; large batches as several statements in one pipeline).
-- RETURNING says which rows are new, with only what the database decided: the caller knows the
-- rest, and sending whole rows back cost a third of a bulk insert. The caller sends the rows sorted
-- by key, so overlapping batches take their key locks in the same order and cannot deadlock, with
-- ids reserved in enqueue order and one clock reading for the whole batch (job_ids_next), so a batch
-- still runs FIFO; a single job takes the next id and the clock here. pg_notify wakes listening
-- workers when the transaction commits (the caller's, with enqueue(conn=...)); it runs once per
-- queue, through the woken subquery, if any row was inserted.
-- A spawn's children (children.sql) name their parent in the same insert (%(parent_id)s, one for
-- the batch; NULL for every other enqueue).
-- The store also runs this statement without its ON CONFLICT line (the one line that names it), for
-- large batches of keys expected to be new: the server does a plain INSERT faster (no speculative
-- insertion); a taken key then fails it, and the store redoes the batch as written here.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
inserted AS (
    INSERT INTO {schema}.firesafe_jobs (id, key, name, queue, fingerprint, payload, arg_names, state,
                                        max_attempts, run_at, created_at, updated_at, trace_context, priority,
                                        parent_id)
    SELECT coalesce(i.id, nextval('{schema}.firesafe_jobs_id_seq'::regclass)), i.key, i.name, i.queue,
           i.fingerprint, i.payload, i.arg_names,
           CASE WHEN coalesce(i.run_at, c.now + i.delay) > c.now THEN 'scheduled' ELSE 'queued' END,
           i.max_attempts, coalesce(i.run_at, c.now + i.delay), c.now, c.now, i.trace_context,
           coalesce(i.priority, 0), %(parent_id)s::bigint
    FROM clock c CROSS JOIN
         -- trace_context and priority are NULL (no array) when no job of the batch has one (or one but
         -- 0): unnest pads them with NULLs.
         unnest(%(id)s::bigint[], %(key)s::text[], %(name)s::text[], %(queue)s::text[],
                %(fingerprint)s::text[], %(payload)s::text[], %(arg_names)s::text[],
                %(max_attempts)s::int[], %(run_at)s::float8[], %(delay)s::float8[], %(trace_context)s::text[],
                %(priority)s::int[])
             AS i(id, key, name, queue, fingerprint, payload, arg_names, max_attempts, run_at, delay, trace_context,
                  priority)
    -- A key whose job's history was pruned stays reserved by its record (0017_reserved_keys.sql).
    -- NOT EXISTS, an anti-join by the records' primary key: written as a scalar subquery instead,
    -- the generic plan costed more than a custom one, so every enqueue was planned anew (+150 us).
    WHERE NOT EXISTS (SELECT 1 FROM {schema}.firesafe_keys r WHERE r.key = i.key)
    ON CONFLICT (key) DO NOTHING
    RETURNING id, key, queue, state, run_at, created_at),
woken AS (
    SELECT pg_notify(%(channel)s, q.queue)
    FROM (SELECT DISTINCT queue FROM inserted WHERE state = 'queued') q)
SELECT j.id, j.key, j.state, j.run_at, j.created_at, (SELECT count(*) FROM woken) AS woken FROM inserted j;

-- name: job_by_keys
-- Jobs whose key is in a list.
SELECT * FROM {schema}.firesafe_jobs WHERE key = ANY(%(keys)s::text[]);

-- name: reserved_by_keys
-- The records of reserved keys (jobs whose history was pruned) in a list.
SELECT * FROM {schema}.firesafe_keys WHERE key = ANY(%(keys)s::text[]);

-- name: job_by_key
-- One job by key.
SELECT * FROM {schema}.firesafe_jobs WHERE key = %(key)s;

-- name: job_claim
-- Claim up to :limit runnable jobs of the given queues for one attempt each, under one lease token.
-- The attempt's trace entry is written when it ends (see job_finish); started_at notes its start.
-- PostgreSQL differs: FOR UPDATE SKIP LOCKED lets concurrent workers claim disjoint rows without
-- waiting on each other (SQLite has one writer at a time), so a claim is one atomic round trip. One
-- index scan per queue (LATERAL) reads the runnable index in (run_at, id) order and stops after :limit
-- rows; "queue = ANY(...)" instead would sort every runnable row of the queues on every claim. {limit}
-- is written into the text as a number (one prepared statement per batch size): a plan made once for
-- every execution (finish-and-claim runs it under a generic plan, see the store) then knows it fetches
-- a few rows, so it keeps the ordered index scan whatever the backlog. {lost} is "j.lost = 0" for a
-- claim of jobs never lost, "j.lost > 0" for suspects (their own partial index, nearly empty).
-- Priorities: jobs are taken in the order of their rank, run_at - 60 x priority (a point of priority
-- counts as a minute of waiting: migrations/postgres/0016_priority.sql), then run_at, id; the
-- runnable index holds exactly that order. The rank's bound (now + 60 x 100: no due job ranks later,
-- the lowest priority being -100) ends the index scan where today's "run_at <= now" did; run_at is
-- in the index, so the jobs not yet due that rank before it are skipped there, not read.
-- It returns what an attempt needs (models.CLAIMED_COLUMNS), not the job's history, in claim order.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
picked AS (
    SELECT p.id FROM unnest(%(queues)s::text[]) AS q(queue)
    CROSS JOIN LATERAL (
        SELECT j.id, j.run_at - 60.0::float8 * j.priority AS rank, j.run_at FROM {schema}.firesafe_jobs j
        WHERE j.queue = q.queue AND j.state IN ('queued', 'scheduled')
          AND j.run_at - 60.0::float8 * j.priority <= (SELECT now FROM clock) + 6000.0::float8
          AND j.run_at <= (SELECT now FROM clock)
          AND {lost}
        ORDER BY j.run_at - 60.0::float8 * j.priority, j.run_at, j.id
        LIMIT {limit}
        FOR UPDATE OF j SKIP LOCKED) p
    ORDER BY p.rank, p.run_at, p.id
    LIMIT {limit}),
claimed AS (
    UPDATE {schema}.firesafe_jobs j
    SET state = 'running', lease_token = %(token)s, lease_expires = c.now + %(lease)s::float8,
        worker = %(worker)s, attempt = j.attempt + 1, runs = j.runs + 1, started_at = c.now, updated_at = c.now
    FROM picked p CROSS JOIN clock c
    WHERE j.id = p.id
    RETURNING j.id, j.key, j.name, j.queue, j.state, j.payload, j.arg_names, j.attempt, j.max_attempts, j.runs,
              j.deferrals, j.lost, j.run_at, j.created_at, j.updated_at, j.cancel_requested, j.trace_context,
              j.priority, j.parent_id)
SELECT * FROM claimed ORDER BY run_at - 60.0::float8 * priority, run_at, id;

-- name: plan_generic
-- PostgreSQL only: for the rest of this transaction, run prepared statements under their generic
-- plan instead of planning each execution anew (custom plans). A worker's finish-and-claim sets it:
-- without it, the claim and the finish are planned anew at every batch, a fixed cost that every
-- transaction of a drain of short jobs pays. Safe for these two statements: the finish reads jobs by
-- primary key, and the claim's row limit is a number in its text (see job_claim).
SET LOCAL plan_cache_mode = force_generic_plan;

-- name: job_finish
-- End running attempts: each applies only if its job is still running under its lease token (fencing).
-- PostgreSQL differs: the batch is one statement over arrays; it returns the ids that applied (the
-- row count per item) and writes their trace entries (attempt_close's work) in the same statement.
-- A job parking for its children (reason 'children') whose children have all ended meanwhile is due
-- at once: its row is locked here, so a child's count-down (children.sql) runs before this, and this
-- sees its count, or after, and wakes it (no wake-up is lost between the job's look and its park).
-- Children that end here are counted off their parents here too (children.sql: the statement does
-- what job_children_settle and job_parents_count_down do after a rescue or a cancel, without
-- writing each child's row twice). A job that finishes under its lease token was running, and a
-- running child is never marked settled (a replay or rerun unmarks it as it leaves its end), so
-- every child that ends here is counted, once. A parent finishing in the same statement as one of
-- its children would have its row written twice in one statement, which PostgreSQL does not do:
-- the store sends such a batch as several statements, children before their parents
-- (PostgresStore._finish_in). A batch without children runs this statement without its count-down
-- (job_finish_plain: it ends at the trace entries), which would cost it a tenth of its drain.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
f AS MATERIALIZED (
    SELECT * FROM unnest(%(job_id)s::bigint[], %(token)s::text[], %(seq)s::int[], %(state)s::text[],
                         %(outcome)s::text[], %(delay)s::float8[], %(given_back)s::int[], %(result)s::text[],
                         %(error_type)s::text[], %(message)s::text[], %(traceback)s::text[],
                         %(reason)s::text[], %(detail)s::text[])
        AS f(job_id, token, seq, state, outcome, delay, given_back, result, error_type, message, traceback,
             reason, detail)),
done AS (
    UPDATE {schema}.firesafe_jobs j
    SET state = f.state, lease_token = NULL, lease_expires = NULL,
        -- A deferral (a durable wait) after a signal came during the attempt is due now (0018_signals.sql);
        -- so is a parent parked for children that ended meanwhile, enough of them (0019, 0020_children_wake.sql).
        run_at = CASE WHEN f.delay IS NULL THEN j.run_at
                      WHEN f.given_back = 1 AND j.signaled_at >= j.started_at THEN c.now
                      WHEN f.reason = 'children' AND j.children_pending <= j.children_wake_at THEN c.now
                      ELSE c.now + f.delay END,
        attempt = j.attempt - f.given_back, deferrals = j.deferrals + f.given_back,
        result = coalesce(f.result, j.result),
        error_type = coalesce(f.error_type, j.error_type),
        error_message = coalesce(f.message, j.error_message),
        reason = f.reason,
        finished_at = CASE WHEN f.state IN ('succeeded', 'dead', 'cancelled') THEN c.now ELSE NULL END,
        settled = j.settled OR (j.parent_id IS NOT NULL AND f.state IN ('succeeded', 'dead', 'cancelled')),
        updated_at = c.now
    FROM f CROSS JOIN clock c
    WHERE j.id = f.job_id AND j.lease_token = f.token
    RETURNING j.id, j.attempt, j.worker, j.started_at, j.parent_id, j.state),
closed AS (
    INSERT INTO {schema}.firesafe_attempts AS a (job_id, seq, attempt, worker, started_at, ended_at, outcome,
                                                 error_type, message, traceback, detail)
    SELECT f.job_id, f.seq, d.attempt + f.given_back, d.worker, coalesce(d.started_at, c.now), c.now,
           f.outcome, f.error_type, f.message, f.traceback, f.detail
    FROM f JOIN done d ON d.id = f.job_id CROSS JOIN clock c
    ON CONFLICT (job_id, seq) DO UPDATE
    SET ended_at = excluded.ended_at, outcome = excluded.outcome, error_type = excluded.error_type,
        message = excluded.message, traceback = excluded.traceback, detail = excluded.detail
    WHERE a.outcome IS NULL),
-- The children that ended, counted off their parents (as job_parents_count_down): the parents'
-- rows locked in id order, a parent parked for its children woken by the count that reaches its mark.
ended AS (
    SELECT parent_id AS id, count(*)::int AS n FROM done
    WHERE parent_id IS NOT NULL AND state IN ('succeeded', 'dead', 'cancelled') GROUP BY parent_id),
locked AS (
    SELECT p.id FROM {schema}.firesafe_jobs p JOIN ended e ON e.id = p.id ORDER BY p.id FOR UPDATE OF p),
lowered AS (
    UPDATE {schema}.firesafe_jobs p
    SET children_pending = p.children_pending - e.n,
        run_at = CASE WHEN p.children_pending - e.n <= p.children_wake_at AND p.state = 'scheduled' AND p.reason = 'children'
                      THEN least(p.run_at, c.now) ELSE p.run_at END
    FROM locked l JOIN ended e ON e.id = l.id CROSS JOIN clock c
    WHERE p.id = l.id
    RETURNING p.id, p.queue, c.now AS at,
              (p.children_pending <= p.children_wake_at AND p.children_pending + e.n > p.children_wake_at
               AND p.state = 'scheduled' AND p.reason = 'children') AS woke),
noted AS (
    INSERT INTO {schema}.firesafe_events (job_id, at, kind, actor, detail)
    SELECT id, at, 'woken', 'children', NULL FROM lowered WHERE woke),
woken AS (
    SELECT pg_notify(%(channel)s, q.queue) FROM (SELECT DISTINCT queue FROM lowered WHERE woke) q)
SELECT id, (SELECT count(*) FROM woken) AS notified FROM done;

-- name: attempt_close
-- Write the trace entry of an attempt that ended, from its job's row (who ran it, since when) and its
-- outcome; :given_back is how much the end took back from the job's attempt count. An entry an earlier
-- firesafe opened at the claim is completed instead. (On PostgreSQL job_finish and job_rescue do this.)
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now)
INSERT INTO {schema}.firesafe_attempts AS a (job_id, seq, attempt, worker, started_at, ended_at, outcome,
                                             error_type, message, traceback, detail)
SELECT j.id, %(seq)s, j.attempt + %(given_back)s, j.worker, coalesce(j.started_at, c.now), c.now,
       %(outcome)s, %(error_type)s, %(message)s, %(traceback)s, %(detail)s
FROM {schema}.firesafe_jobs j CROSS JOIN clock c WHERE j.id = %(job_id)s
ON CONFLICT (job_id, seq) DO UPDATE
SET ended_at = excluded.ended_at, outcome = excluded.outcome, error_type = excluded.error_type,
    message = excluded.message, traceback = excluded.traceback, detail = excluded.detail
WHERE a.outcome IS NULL;

-- name: job_heartbeat
-- Extend running attempts' leases where still held; tells whether a cancel was asked for.
-- PostgreSQL differs: the batch is one statement over arrays.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
h AS (SELECT * FROM unnest(%(job_id)s::bigint[], %(token)s::text[]) AS h(job_id, token))
UPDATE {schema}.firesafe_jobs j SET lease_expires = c.now + %(lease)s::float8
FROM h CROSS JOIN clock c
WHERE j.id = h.job_id AND j.lease_token = h.token
RETURNING j.id, j.cancel_requested;

-- name: job_list_expired
-- Running jobs whose lease has run out (their worker died or hung).
SELECT id, name, lease_token, attempt, max_attempts, deferrals, lost, runs, cancel_requested, key, queue
FROM {schema}.firesafe_jobs
WHERE state = 'running'
  AND lease_expires < coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
ORDER BY lease_expires LIMIT %(limit)s;

-- name: job_expire_process
-- End now the leases of the attempts a worker process was running when it exited (its supervisor saw
-- it go), so that the next rescue takes them back instead of waiting for the lease to run out.
-- :prefix is how that process's worker ids begin (see firesafe/worker/worker.py, worker_id_prefix).
-- Fenced on the state; a lease already over is left as it is. The state = 'running' condition reads
-- the leases index. Each job whose lease ended gets an event (lease_ended, by the supervisor, with how
-- the process ended). PostgreSQL differs: one statement writes both (SQLite adds them by event_insert).
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
ended AS (
    UPDATE {schema}.firesafe_jobs j SET lease_expires = c.now
    FROM clock c
    WHERE j.state = 'running' AND j.lease_expires > c.now
      AND left(j.worker, length(%(prefix)s::text)) = %(prefix)s::text
    RETURNING j.id),
noted AS (
    INSERT INTO {schema}.firesafe_events (job_id, at, kind, actor, detail)
    SELECT e.id, c.now, 'lease_ended', 'supervisor', %(detail)s FROM ended e CROSS JOIN clock c)
SELECT id FROM ended;

-- name: job_rescue
-- Take expired attempts back: fenced on the token seen and on the lease still being expired.
-- PostgreSQL differs: one statement over arrays that also closes the attempts as lost; rows locked by
-- someone else (their worker is finishing them right now) are skipped, not waited for, so a rescue
-- never deadlocks with a batch of finishes.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
r AS MATERIALIZED (
    SELECT * FROM unnest(%(job_id)s::bigint[], %(token)s::text[], %(seq)s::int[], %(state)s::text[],
                         %(delay)s::float8[], %(reason)s::text[], %(message)s::text[])
        AS r(job_id, token, seq, state, delay, reason, message)),
target AS (
    SELECT j.id FROM {schema}.firesafe_jobs j JOIN r ON r.job_id = j.id
    WHERE j.lease_token = r.token AND j.lease_expires < (SELECT now FROM clock)
    ORDER BY j.id
    FOR UPDATE OF j SKIP LOCKED),
moved AS (
    UPDATE {schema}.firesafe_jobs j
    SET state = r.state, lease_token = NULL, lease_expires = NULL, lost = j.lost + 1,
        run_at = CASE WHEN r.delay IS NULL THEN j.run_at ELSE c.now + r.delay END,
        error_type = 'WorkerLost', error_message = r.message, reason = r.reason,
        finished_at = CASE WHEN r.state IN ('dead', 'cancelled') THEN c.now ELSE NULL END,
        updated_at = c.now
    FROM target t JOIN r ON r.job_id = t.id CROSS JOIN clock c
    WHERE j.id = t.id AND j.lease_token = r.token AND j.lease_expires < c.now
    RETURNING j.id, j.attempt, j.worker, j.started_at),
closed AS (
    INSERT INTO {schema}.firesafe_attempts AS a (job_id, seq, attempt, worker, started_at, ended_at, outcome,
                                                 error_type, message, traceback, detail)
    SELECT r.job_id, r.seq, m.attempt, m.worker, coalesce(m.started_at, c.now), c.now, 'lost', 'WorkerLost',
           r.message, NULL, NULL
    FROM moved m JOIN r ON r.job_id = m.id CROSS JOIN clock c
    ON CONFLICT (job_id, seq) DO UPDATE
    SET ended_at = excluded.ended_at, outcome = excluded.outcome, error_type = excluded.error_type,
        message = excluded.message, traceback = NULL, detail = NULL
    WHERE a.outcome IS NULL)
SELECT id FROM moved;

-- name: job_replay
-- Put dead or cancelled jobs back in their queue with a fresh attempt budget; their history stays.
-- PostgreSQL differs: a batch of ids in one statement that also records the event (event_insert's
-- work) and wakes listening workers.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
moved AS (
    UPDATE {schema}.firesafe_jobs j
    SET state = 'queued', attempt = 0, deferrals = 0, lost = 0, run_at = c.now, reason = NULL,
        finished_at = NULL, cancel_requested = false, updated_at = c.now
    FROM clock c
    WHERE j.id = ANY(%(ids)s::bigint[]) AND (j.state IN ('dead', 'cancelled')) IS TRUE  -- by id (see the header)
    RETURNING j.id, j.queue, c.now AS at),
recorded AS (
    INSERT INTO {schema}.firesafe_events (job_id, at, kind, actor, detail)
    SELECT id, at, %(kind)s, %(actor)s, %(detail)s FROM moved),
woken AS (
    SELECT pg_notify(%(channel)s, q.queue) FROM (SELECT DISTINCT queue FROM moved) q)
SELECT id, (SELECT count(*) FROM woken) AS woken FROM moved;

-- name: job_discard
-- Take dead jobs out of the dead letters on purpose.
-- PostgreSQL differs: a batch of ids in one statement that also records the event.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
moved AS (
    UPDATE {schema}.firesafe_jobs j
    SET state = 'cancelled', reason = 'discarded', finished_at = c.now, updated_at = c.now
    FROM clock c
    WHERE j.id = ANY(%(ids)s::bigint[]) AND (j.state = 'dead') IS TRUE  -- by id (see the header)
    RETURNING j.id, c.now AS at),
recorded AS (
    INSERT INTO {schema}.firesafe_events (job_id, at, kind, actor, detail)
    SELECT id, at, %(kind)s, %(actor)s, %(detail)s FROM moved)
SELECT id FROM moved;

-- name: job_cancel_waiting
-- Cancel jobs that wait: at once.
-- PostgreSQL differs: a batch of ids in one statement that also records the event.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
moved AS (
    UPDATE {schema}.firesafe_jobs j
    SET state = 'cancelled', reason = 'cancelled', finished_at = c.now, updated_at = c.now
    FROM clock c
    WHERE j.id = ANY(%(ids)s::bigint[]) AND (j.state IN ('queued', 'scheduled')) IS TRUE  -- by id (see the header)
    RETURNING j.id, c.now AS at),
recorded AS (
    INSERT INTO {schema}.firesafe_events (job_id, at, kind, actor, detail)
    SELECT id, at, %(kind)s, %(actor)s, %(detail)s FROM moved)
SELECT id FROM moved;

-- name: job_cancel_running
-- Ask running jobs to stop; each attempt records the cancel when it ends.
-- PostgreSQL differs: a batch of ids in one statement that also records the event.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
moved AS (
    UPDATE {schema}.firesafe_jobs j
    SET cancel_requested = true, updated_at = c.now
    FROM clock c
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.lease_token IS NOT NULL
    RETURNING j.id, c.now AS at),
recorded AS (
    INSERT INTO {schema}.firesafe_events (job_id, at, kind, actor, detail)
    SELECT id, at, %(kind)s, %(actor)s, %(detail)s FROM moved)
SELECT id FROM moved;

-- name: event_insert
-- Record an event of a job.
INSERT INTO {schema}.firesafe_events (job_id, at, kind, actor, detail)
VALUES (%(job_id)s, coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8),
        %(kind)s, %(actor)s, %(detail)s);

-- name: attempts_of_job
-- The trace of one job, oldest first. An attempt still running has no entry yet (it is written when
-- the attempt ends): it is shown from the job's row, open (no end, no outcome).
SELECT job_id, seq, attempt, worker, started_at, ended_at, outcome, error_type, message, traceback, detail
FROM {schema}.firesafe_attempts WHERE job_id = %(job_id)s
UNION ALL
SELECT j.id, j.runs, j.attempt, j.worker, coalesce(j.started_at, j.updated_at), NULL, NULL, NULL, NULL, NULL,
       NULL
FROM {schema}.firesafe_jobs j
WHERE j.id = %(job_id)s AND j.lease_token IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM {schema}.firesafe_attempts a WHERE a.job_id = j.id AND a.seq = j.runs)
ORDER BY seq;

-- name: events_of_job
-- The events of one job, oldest first.
SELECT * FROM {schema}.firesafe_events WHERE job_id = %(job_id)s ORDER BY id;

-- name: job_list
-- Jobs matching optional filters, newest first.
SELECT * FROM {schema}.firesafe_jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(error_type)s::text IS NULL OR error_type = %(error_type)s::text)
  AND (%(since)s::float8 IS NULL OR updated_at >= %(since)s::float8)
  AND (%(until)s::float8 IS NULL OR updated_at < %(until)s::float8)
  AND (%(keys)s::text[] IS NULL OR key = ANY(%(keys)s::text[]))
ORDER BY id DESC LIMIT %(limit)s OFFSET %(offset)s;

-- name: job_count
-- How many jobs match the same filters as job_list.
SELECT count(*) AS n FROM {schema}.firesafe_jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(error_type)s::text IS NULL OR error_type = %(error_type)s::text)
  AND (%(since)s::float8 IS NULL OR updated_at >= %(since)s::float8)
  AND (%(until)s::float8 IS NULL OR updated_at < %(until)s::float8)
  AND (%(keys)s::text[] IS NULL OR key = ANY(%(keys)s::text[]));

-- name: dead_list
-- Dead jobs matching optional filters, the last to die first (by finished_at, then id), a page
-- after the cursor (after_at, after_id): the (state, finished_at) index is read backwards from the
-- cursor (ties on finished_at sorted by id), so a page costs its own rows only.
SELECT * FROM {schema}.firesafe_jobs
WHERE state = 'dead' AND (finished_at, id) < (%(after_at)s::float8, %(after_id)s::bigint)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(error_type)s::text IS NULL OR error_type = %(error_type)s::text)
  AND (%(reason)s::text IS NULL OR reason = %(reason)s::text)
  AND (%(since)s::float8 IS NULL OR finished_at >= %(since)s::float8)
  AND (%(until)s::float8 IS NULL OR finished_at < %(until)s::float8)
ORDER BY finished_at DESC, id DESC LIMIT %(limit)s OFFSET %(offset)s;

-- name: dead_count
-- How many dead jobs match the filters of dead_list (cursor, limit and offset aside).
SELECT count(*) AS n FROM {schema}.firesafe_jobs
WHERE state = 'dead'
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(error_type)s::text IS NULL OR error_type = %(error_type)s::text)
  AND (%(reason)s::text IS NULL OR reason = %(reason)s::text)
  AND (%(since)s::float8 IS NULL OR finished_at >= %(since)s::float8)
  AND (%(until)s::float8 IS NULL OR finished_at < %(until)s::float8);

-- name: job_stats
-- Counts by queue and state.
SELECT queue, state, count(*) AS n FROM {schema}.firesafe_jobs GROUP BY queue, state ORDER BY queue, state;

-- name: job_pending
-- What is left for a burst worker: runnable now, running, and when the next waiting job is due.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now)
SELECT
    (SELECT count(*) FROM {schema}.firesafe_jobs WHERE state IN ('queued', 'scheduled')
        AND run_at <= (SELECT now FROM clock) AND queue = ANY(%(queues)s::text[])) AS runnable,
    (SELECT count(*) FROM {schema}.firesafe_jobs WHERE state = 'running'
        AND queue = ANY(%(queues)s::text[])) AS running,
    (SELECT min(run_at) FROM {schema}.firesafe_jobs WHERE state IN ('queued', 'scheduled')
        AND queue = ANY(%(queues)s::text[])) AS next_at,
    (SELECT count(*) FROM {schema}.firesafe_jobs WHERE state IN ('queued', 'scheduled') AND lost > 0
        AND run_at <= (SELECT now FROM clock) AND queue = ANY(%(queues)s::text[])) AS suspects;

-- name: job_delete_finished
-- Delete up to :limit jobs in one finished state that finished more than :older_than seconds ago
-- (frees their keys), and their trace entries; returns one row per job deleted. PostgreSQL
-- differs: the cut-off is computed from the database's clock, the constant state list lets even a
-- generic (prepared) plan use the partial finished index, and the trace entries are deleted here
-- (no declared reference cascades to them, see migrations/postgres/0011_attempts_unreferenced.sql).
WITH gone AS (
    DELETE FROM {schema}.firesafe_jobs WHERE id = ANY(ARRAY(  -- see job_delete_reserved
        SELECT id FROM {schema}.firesafe_jobs
        WHERE state = %(state)s AND state IN ('succeeded', 'dead', 'cancelled')
          AND finished_at < coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
                            - %(older_than)s::float8
        LIMIT %(limit)s))
    RETURNING id),
traced AS (
    DELETE FROM {schema}.firesafe_attempts WHERE job_id = ANY(ARRAY(SELECT id FROM gone)))
SELECT id FROM gone;

-- name: job_reserve_finished
-- Write the record of up to :limit jobs in one finished state that finished more than :older_than
-- and at most :keep_for seconds ago and have no record of that finish yet, in the order they
-- finished from :after_at on, so their keys stay reserved once their rows are deleted
-- (job_delete_reserved); returns the (finished_at, id) of each job recorded: the last finish is
-- where the next batch starts (jobs that finished at once share it; those recorded already are
-- passed over). The result is kept when it is at most :result_max bytes, else its SHA-256.
-- The order is the finished index's own, so a batch reads about :limit rows and sorts none; the
-- cut-offs read the statement's clock (stable, so the index can use them).
INSERT INTO {schema}.firesafe_keys (id, finished_at, reserved_at, key, name, fingerprint, state, result,
                                    result_digest)
SELECT j.id, j.finished_at, coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8),
       j.key, j.name, j.fingerprint, j.state,
       CASE WHEN octet_length(j.result) <= %(result_max)s THEN j.result END,
       CASE WHEN octet_length(j.result) > %(result_max)s THEN encode(sha256(convert_to(j.result, 'UTF8')), 'hex') END
FROM {schema}.firesafe_jobs j
WHERE j.state = %(state)s AND j.state IN ('succeeded', 'dead', 'cancelled')
  AND j.finished_at < coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8)
                      - %(older_than)s::float8
  AND j.finished_at >= greatest(coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8)
                                - %(keep_for)s::float8, %(after_at)s::float8)
  -- A subquery per row, by the record's key (as NOT EXISTS the planner merged on finished_at and
  -- read every record, for every batch).
  AND (SELECT r.finished_at FROM {schema}.firesafe_keys r WHERE r.key = j.key) IS DISTINCT FROM j.finished_at
ORDER BY j.finished_at
LIMIT %(limit)s
-- A record of an earlier finish (the job was rerun meanwhile) is replaced; one of this finish
-- (written by another prune meanwhile) is left as it is, and not returned.
ON CONFLICT (key) DO UPDATE SET id = excluded.id, finished_at = excluded.finished_at,
    reserved_at = excluded.reserved_at, name = excluded.name, fingerprint = excluded.fingerprint,
    state = excluded.state, result = excluded.result, result_digest = excluded.result_digest
WHERE firesafe_keys.finished_at <> excluded.finished_at
RETURNING finished_at, id;

-- name: job_delete_reserved
-- Delete up to :limit jobs in one finished state that finished more than :older_than seconds ago
-- and whose key's record (job_reserve_finished) was written more than :settle seconds ago, with
-- their trace entries; returns one row per job deleted. The wait closes a race: an enqueue that
-- began before the record was committed did not see it, and must not find the key free either (it
-- would if the row were deleted at once); an enqueue runs for less than :settle.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
gone AS (
    -- = ANY(ARRAY(...)): the batch's ids first, then each row by its primary key (as IN (...) the
    -- planner hashed the batch and scanned the whole table for it).
    DELETE FROM {schema}.firesafe_jobs WHERE id = ANY(ARRAY(
        -- In the order they finished (the finished index), each row's record looked up by its key
        -- (a subquery per row: as a join, the planner misjudged how many rows match and hashed
        -- every finished job, for every batch): a batch reads about :limit rows.
        SELECT j.id FROM {schema}.firesafe_jobs j, clock c
        WHERE j.state = %(state)s AND j.state IN ('succeeded', 'dead', 'cancelled')
          AND j.finished_at < c.now - %(older_than)s::float8
          AND (SELECT r.id = j.id AND r.finished_at = j.finished_at AND r.reserved_at < c.now - %(settle)s::float8
               FROM {schema}.firesafe_keys r WHERE r.key = j.key)
        ORDER BY j.finished_at
        LIMIT %(limit)s))
    RETURNING id),
traced AS (
    DELETE FROM {schema}.firesafe_attempts WHERE job_id = ANY(ARRAY(SELECT id FROM gone)))
SELECT id FROM gone;

-- name: reserved_delete_expired
-- Free the keys of up to :limit records of jobs that finished more than :older_than seconds ago.
DELETE FROM {schema}.firesafe_keys WHERE key IN (
    SELECT key FROM {schema}.firesafe_keys
    WHERE finished_at < coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
                        - %(older_than)s::float8
    ORDER BY finished_at LIMIT %(limit)s);

-- name: worker_beat
-- Record that a worker is alive.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now)
INSERT INTO {schema}.firesafe_workers AS w (id, host, pid, queues, started_at, last_seen)
SELECT %(id)s, %(host)s, %(pid)s, %(queues)s, c.now, c.now FROM clock c
ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen;

-- name: worker_remove
-- A worker that stopped cleanly.
DELETE FROM {schema}.firesafe_workers WHERE id = %(id)s;

-- name: worker_remove_process
-- Forget the workers of one process that exited (its supervisor saw it go): ids that begin with :prefix.
DELETE FROM {schema}.firesafe_workers WHERE left(id, length(%(prefix)s::text)) = %(prefix)s::text;

-- name: worker_list
-- Workers seen, most recent first.
SELECT * FROM {schema}.firesafe_workers ORDER BY last_seen DESC;

-- name: worker_prune
-- Forget workers not seen for :older_than seconds. PostgreSQL differs: the cut-off comes from the
-- database's clock (SQLite takes :before).
DELETE FROM {schema}.firesafe_workers
WHERE last_seen < coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
                  - %(older_than)s::float8;

-- name: leader_acquire
-- Take or renew a named leader lease; returns a row only to the holder.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now)
INSERT INTO {schema}.firesafe_leaders AS l (name, holder, expires_at)
SELECT %(name)s, %(holder)s, c.now + %(ttl)s::float8 FROM clock c
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE l.holder = excluded.holder OR l.expires_at < excluded.expires_at - %(ttl)s::float8
RETURNING holder;

-- name: leader_release_process
-- Give up the leader leases held by the workers of one process that exited (holders begin with :prefix).
DELETE FROM {schema}.firesafe_leaders WHERE left(holder, length(%(prefix)s::text)) = %(prefix)s::text;

-- name: leader_release
-- Give a leader lease up.
DELETE FROM {schema}.firesafe_leaders WHERE name = %(name)s AND holder = %(holder)s;
