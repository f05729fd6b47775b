-- Durable steps: one record per (job, step name) (invariant 1: a step's identity is (job key, step name)).
CREATE TABLE firesafe_steps (
    job_id bigint NOT NULL REFERENCES firesafe_jobs (id) ON DELETE CASCADE,
    name text NOT NULL,
    position integer NOT NULL,
    result text,
    run_seq integer NOT NULL,
    recorded_at double precision NOT NULL,
    PRIMARY KEY (job_id, name),
    UNIQUE (job_id, position)
);
