-- Durable steps: one record per (job, step name) (invariant 1: a step's identity is (job key, step name)).
CREATE TABLE firesafe_steps (
    job_id INTEGER NOT NULL REFERENCES firesafe_jobs (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    position INTEGER NOT NULL,
    result TEXT,
    run_seq INTEGER NOT NULL,
    recorded_at REAL NOT NULL,
    PRIMARY KEY (job_id, name),
    UNIQUE (job_id, position)
);
