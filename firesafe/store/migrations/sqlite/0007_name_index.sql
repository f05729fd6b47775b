-- The jobs-by-name index on the name alone. As (name, state) it changed with every state change, so
-- each claim and each finish rewrote an entry of it, a large share of the store's work per drained
-- job. Queries by name and
-- state still find the name's rows through it and check the state on each row.
DROP INDEX firesafe_jobs_name;
CREATE INDEX firesafe_jobs_name ON firesafe_jobs (name);
