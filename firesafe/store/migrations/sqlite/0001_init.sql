-- firesafe schema, version 1 (SQLite). Times are seconds since the epoch (REAL).
CREATE TABLE firesafe_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- AUTOINCREMENT: ids never reused, so "id > before" marks new rows
    key TEXT NOT NULL UNIQUE,              -- invariant 1: the key is a constraint, not a lookup
    name TEXT NOT NULL,
    queue TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    payload TEXT NOT NULL,
    arg_names TEXT,
    state TEXT NOT NULL CHECK (state IN ('queued', 'scheduled', 'running', 'succeeded', 'dead', 'cancelled')),
    attempt INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    runs INTEGER NOT NULL DEFAULT 0,
    deferrals INTEGER NOT NULL DEFAULT 0,
    lost INTEGER NOT NULL DEFAULT 0,
    run_at REAL NOT NULL,
    lease_token TEXT,
    lease_expires REAL,
    worker TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    error_type TEXT,
    error_message TEXT,
    reason TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    finished_at REAL
);
CREATE INDEX firesafe_jobs_runnable ON firesafe_jobs (queue, run_at) WHERE state IN ('queued', 'scheduled');
CREATE INDEX firesafe_jobs_leases ON firesafe_jobs (lease_expires) WHERE state = 'running';
CREATE INDEX firesafe_jobs_finished ON firesafe_jobs (state, finished_at);
CREATE INDEX firesafe_jobs_name ON firesafe_jobs (name, state);

CREATE TABLE firesafe_attempts (
    job_id INTEGER NOT NULL REFERENCES firesafe_jobs (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    worker TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    outcome TEXT,
    error_type TEXT,
    message TEXT,
    traceback TEXT,
    detail TEXT,
    PRIMARY KEY (job_id, seq)
);

CREATE TABLE firesafe_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER NOT NULL REFERENCES firesafe_jobs (id) ON DELETE CASCADE,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    actor TEXT,
    detail TEXT
);
CREATE INDEX firesafe_events_job ON firesafe_events (job_id);

CREATE TABLE firesafe_workers (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    queues TEXT NOT NULL,
    started_at REAL NOT NULL,
    last_seen REAL NOT NULL
);

CREATE TABLE firesafe_leaders (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at REAL NOT NULL
);
