-- The event inbox: one row per (source, event id) (invariant 1), and the messages that could not be read.
CREATE TABLE firesafe_inbox_events (
    source TEXT NOT NULL,
    event_id TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    received_at REAL NOT NULL,
    handled INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (source, event_id)
);
CREATE INDEX firesafe_inbox_unhandled ON firesafe_inbox_events (source, received_at) WHERE handled = 0;

CREATE TABLE firesafe_inbox_rejects (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL,
    reason TEXT NOT NULL,
    body TEXT,
    received_at REAL NOT NULL
);
