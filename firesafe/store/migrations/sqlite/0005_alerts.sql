-- Alerts (part 7): an outbox written in the transaction of the event that raised it (invariant 4),
-- the alerts it is grouped into, their delivery to each sink, and the state of the rules that
-- fire once and resolve once.

-- One row per alert event; alert_id is set when a dispatcher groups it into an alert.
CREATE TABLE firesafe_alert_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    severity TEXT NOT NULL,
    job_name TEXT,
    job_id INTEGER,          -- no foreign key: a job may be pruned while its alert waits to leave
    keys TEXT NOT NULL,      -- JSON list of job keys
    payload TEXT NOT NULL,   -- JSON object
    dedupe TEXT UNIQUE,      -- the event's identity when it has one (invariant 1): recorded once
    created_at REAL NOT NULL,
    alert_id INTEGER
);
CREATE INDEX firesafe_alert_outbox_pending ON firesafe_alert_outbox (id) WHERE alert_id IS NULL;
CREATE INDEX firesafe_alert_outbox_alert ON firesafe_alert_outbox (alert_id);

-- What was sent: one grouped, rendered alert.
CREATE TABLE firesafe_alerts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    severity TEXT NOT NULL,
    status TEXT NOT NULL,
    job_name TEXT,
    count INTEGER NOT NULL,
    first_at REAL NOT NULL,
    last_at REAL NOT NULL,
    title TEXT NOT NULL,
    document TEXT NOT NULL,  -- the rendered alert (JSON), identical for every sink and every retry
    created_at REAL NOT NULL
);
CREATE INDEX firesafe_alerts_group ON firesafe_alerts (kind, job_name, created_at);
CREATE INDEX firesafe_alerts_created ON firesafe_alerts (created_at);

-- Delivery of one alert to one sink, claimed under a lease like a job.
CREATE TABLE firesafe_alert_deliveries (
    alert_id INTEGER NOT NULL REFERENCES firesafe_alerts (id) ON DELETE CASCADE,
    sink TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_at REAL NOT NULL,
    lease_token TEXT,
    lease_expires REAL,
    last_error TEXT,
    delivered_at REAL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (alert_id, sink)
);
CREATE INDEX firesafe_alert_deliveries_due ON firesafe_alert_deliveries (sink, next_at) WHERE state = 'pending';

-- Rules that fire once and resolve once (failure rate per job name, stuck queues).
CREATE TABLE firesafe_alert_conditions (
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    firing INTEGER NOT NULL,
    since REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (kind, subject)
);

-- The failure-rate rule reads the attempts that ended within its window.
CREATE INDEX firesafe_attempts_ended ON firesafe_attempts (ended_at);
