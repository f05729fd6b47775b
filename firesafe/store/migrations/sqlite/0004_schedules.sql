-- Schedules (part 6): what the scheduler remembers per schedule, the windows that were missed, and
-- the schedules' events. A window's identity is (schedule, window start) (invariant 1); its job is
-- keyed '<schedule>@<start>' in firesafe_jobs, so a window is enqueued at most once.
CREATE TABLE firesafe_schedules (
    name TEXT PRIMARY KEY,
    expression TEXT NOT NULL,
    tz TEXT NOT NULL,
    cursor REAL NOT NULL,          -- every window that ended at or before it was enqueued or missed
    last_start REAL,               -- the last window the scheduler enqueued
    last_end REAL,
    paused INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);

CREATE TABLE firesafe_schedule_missed (
    schedule TEXT NOT NULL,
    window_start REAL NOT NULL,
    window_end REAL NOT NULL,
    window_key TEXT NOT NULL,
    reason TEXT NOT NULL,
    recorded_at REAL NOT NULL,
    backfilled_at REAL,
    PRIMARY KEY (schedule, window_start)
);

CREATE TABLE firesafe_schedule_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule TEXT NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('missed', 'backfill_started', 'backfill_finished')),
    detail TEXT NOT NULL
);
CREATE INDEX firesafe_schedule_events_schedule ON firesafe_schedule_events (schedule, id);
