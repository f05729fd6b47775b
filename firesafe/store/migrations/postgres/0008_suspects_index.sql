-- Jobs that lost a worker before (suspects of killing it, which the isolating worker runs alone) in
-- an index of their own, nearly always empty, as on SQLite (see migrations/sqlite/0008_suspects_index.sql).
-- Looking for them read every waiting job before: O(backlog) per look.
CREATE INDEX firesafe_jobs_suspects ON firesafe_jobs (queue, run_at, id)
    WHERE state IN ('queued', 'scheduled') AND lost > 0;
