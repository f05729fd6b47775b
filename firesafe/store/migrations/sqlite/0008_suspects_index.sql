-- Jobs that lost a worker before (suspects of killing it, which the isolating worker runs alone) in
-- an index of their own, nearly always empty. Looking for them (a claim of suspects, once per poll
-- while that worker is between batches; the suspects count, once per rescue interval) read every
-- waiting job before: O(backlog) per look.
CREATE INDEX firesafe_jobs_suspects ON firesafe_jobs (queue, run_at)
    WHERE state IN ('queued', 'scheduled') AND lost > 0;
