-- Durable signals (docs/signals.md): what was sent to a job under a name, kept once per (job, name)
-- (invariant 1: a signal's identity is (job key, signal name)), so the same signal sent twice is
-- delivered once and a signal sent before the job waits for it is kept until it does. A job's wait
-- for a signal is a step record (firesafe_steps, named 'signal:NAME'); a row here is its answer.
-- sent_at is on the store's clock, as the wait's deadline is: a signal sent after the deadline does
-- not answer that wait (which timed out), whenever the job looks.
CREATE TABLE firesafe_signals (
    job_id bigint NOT NULL REFERENCES firesafe_jobs (id) ON DELETE CASCADE,
    name text NOT NULL,
    data text NOT NULL,
    actor text NOT NULL,
    reason text,
    sent_at double precision NOT NULL,
    PRIMARY KEY (job_id, name)
);
-- When a signal was last sent to the job. A job can decide to park (its wait found no signal) just
-- before a signal arrives, while it still runs: the sender cannot move a running job, so it notes
-- the time here, on the job's row, and the attempt's finish (job_finish) makes a parked job due at
-- once when a signal came after the attempt started. On the row rather than found by a subquery:
-- a finish that waited for the sender's lock re-reads the row, but not another table.
ALTER TABLE firesafe_jobs ADD COLUMN signaled_at double precision;
