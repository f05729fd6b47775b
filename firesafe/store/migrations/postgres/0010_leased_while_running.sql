-- A job holds a lease token exactly while it runs, and the database says so: every statement that
-- moves a job into 'running' sets a token, every one that moves it out clears it (those were already
-- the rules; this makes them a constraint). With it, the statements that reach jobs by id fence on
-- the token alone (lease_token = the attempt's token, or lease_token IS NOT NULL for "is running")
-- instead of also writing state = 'running'. That condition matches the predicate of the partial
-- leases index, and a planner whose statistics were taken while few jobs ran then reads every
-- running job's entry of that index to find a batch, instead of looking each job up by its id: a
-- finish compared every job of its batch with every running job. Checked
-- against the existing rows when applied (the table is locked while it is read).
ALTER TABLE firesafe_jobs ADD CONSTRAINT firesafe_jobs_leased_while_running
    CHECK ((state = 'running') = (lease_token IS NOT NULL));
