-- The review path. Dead letters are listed newest death first, by (finished_at, id): the
-- (state, finished_at) index of 0001 already holds that order here (SQLite keeps the rowid, the id,
-- at the end of every index entry), so only the audit log is new.
--
-- The audit log: who did what and why, for the actions that change no job's row or change none at
-- all (a purge deletes its jobs with their events; pausing a schedule touches no job). Actions on
-- jobs are recorded in firesafe_events, by job. `detail` is JSON.
CREATE TABLE firesafe_audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    action TEXT NOT NULL,
    subject TEXT,
    actor TEXT NOT NULL,
    reason TEXT,
    detail TEXT NOT NULL
);
