-- Durable signals (docs/signals.md): what was sent to a job under a name, kept once per (job, name)
-- (invariant 1: a signal's identity is (job key, signal name)), so the same signal sent twice is
-- delivered once and a signal sent before the job waits for it is kept until it does. A job's wait
-- for a signal is a step record (firesafe_steps, named 'signal:NAME'); a row here is its answer.
-- sent_at is on the store's clock, as the wait's deadline is: a signal sent after the deadline does
-- not answer that wait (which timed out), whenever the job looks.
CREATE TABLE firesafe_signals (
    job_id INTEGER NOT NULL REFERENCES firesafe_jobs (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    data TEXT NOT NULL,
    actor TEXT NOT NULL,
    reason TEXT,
    sent_at REAL NOT NULL,
    PRIMARY KEY (job_id, name)
);
-- When a signal was last sent to the job. A job can decide to park (its wait found no signal) just
-- before a signal arrives, while it still runs: the sender cannot move a running job, so it notes
-- the time here, on the job's row, and the attempt's finish (job_finish) makes a parked job due at
-- once when a signal came after the attempt started.
ALTER TABLE firesafe_jobs ADD COLUMN signaled_at REAL;
