-- Reserved keys (docs/keys.md, "How long a key stays reserved"). When a finished job's history (its
-- arguments, result, trace, steps) is pruned, a compact record of its identity outlives the row, so
-- its key stays reserved for Retention.keys: an enqueue under it returns the stored outcome (same
-- arguments) or conflicts (other arguments), exactly as while the row was kept. job_insert skips a
-- key found here; job_by_keys' callers read the record of a key that is not in firesafe_jobs.
-- The record keeps the result itself when it is short (a few hundred bytes at most), else its
-- SHA-256 (result_digest). Fixed-width columns first: no padding between them.
-- reserved_at: when the record was written. The job's row is deleted only once its record has been
-- committed for a while (store/sql/postgres.sql, job_delete_reserved), so an enqueue that started
-- before the record existed cannot find the key free once the row is gone.
CREATE TABLE firesafe_keys (
    id bigint NOT NULL,                    -- the job's id while its row was kept
    finished_at double precision NOT NULL,
    reserved_at double precision NOT NULL,
    key text PRIMARY KEY,
    name text NOT NULL,
    fingerprint text NOT NULL,
    state text NOT NULL CHECK (state IN ('succeeded', 'dead', 'cancelled')),
    result text,
    result_digest text
);
-- Expiry deletes the oldest records first.
CREATE INDEX firesafe_keys_finished ON firesafe_keys (finished_at);
