-- Reserved keys (docs/keys.md, "How long a key stays reserved"). When a finished job's history (its
-- arguments, result, trace, steps) is pruned, a compact record of its identity outlives the row, so
-- its key stays reserved for Retention.keys: an enqueue under it returns the stored outcome (same
-- arguments) or conflicts (other arguments), exactly as while the row was kept. Mirrors
-- migrations/postgres/0017_reserved_keys.sql.
CREATE TABLE firesafe_keys (
    key TEXT PRIMARY KEY,
    id INTEGER NOT NULL,
    name TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('succeeded', 'dead', 'cancelled')),
    finished_at REAL NOT NULL,
    reserved_at REAL NOT NULL,
    result TEXT,
    result_digest TEXT
) WITHOUT ROWID;
CREATE INDEX firesafe_keys_finished ON firesafe_keys (finished_at);
