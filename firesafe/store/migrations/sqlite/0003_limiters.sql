-- Limiters (part 5): one row of shared state per limiter, the concurrency slots held, and the events.
-- Times are seconds since the epoch (REAL), as in the jobs table.
CREATE TABLE firesafe_limiters (
    name TEXT PRIMARY KEY,
    rate REAL,                       -- tokens per second (NULL: no rate limit)
    burst REAL NOT NULL,             -- the bucket's size
    concurrency INTEGER,             -- slots (NULL: no concurrency limit)
    breaker_after INTEGER,           -- transient failures in a row that open the breaker (NULL: none)
    cooldown REAL NOT NULL,
    tokens REAL NOT NULL,            -- tokens at tokens_at
    tokens_at REAL NOT NULL,
    line_at REAL NOT NULL,           -- the next free turn for a job that must wait
    paused_until REAL,
    pause_reason TEXT,
    breaker TEXT NOT NULL DEFAULT 'closed' CHECK (breaker IN ('closed', 'open', 'half_open')),
    failures INTEGER NOT NULL DEFAULT 0,
    opened_at REAL,
    retry_at REAL,                   -- open: when a probe may go
    probe_job INTEGER,               -- half-open: the job probing, under probe_token
    probe_token TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);

-- A slot counts while its job runs under this lease token with an unexpired lease.
CREATE TABLE firesafe_limiter_slots (
    limiter TEXT NOT NULL,
    job_id INTEGER NOT NULL REFERENCES firesafe_jobs (id) ON DELETE CASCADE,
    token TEXT NOT NULL,
    PRIMARY KEY (limiter, job_id)
);
-- Deleting a job (pruning) deletes its slots: found by job_id.
CREATE INDEX firesafe_limiter_slots_job ON firesafe_limiter_slots (job_id);

CREATE TABLE firesafe_limiter_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    limiter TEXT NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,              -- paused, resumed, breaker_opened, breaker_closed
    actor TEXT,
    detail TEXT                      -- JSON
);
CREATE INDEX firesafe_limiter_events_limiter ON firesafe_limiter_events (limiter, id);
