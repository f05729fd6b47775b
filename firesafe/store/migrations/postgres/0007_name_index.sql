-- The jobs-by-name index on the name alone, as on SQLite (see migrations/sqlite/0007_name_index.sql):
-- an entry that does not hold the state is smaller, and the two dialects keep one schema.
DROP INDEX firesafe_jobs_name;
CREATE INDEX firesafe_jobs_name ON firesafe_jobs (name);
