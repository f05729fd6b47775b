-- The trace context of the enqueue (a W3C traceparent, or whatever text a hook's job_context gave:
-- firesafe/hooks.py), handed to the job's attempts so that their spans link to the enqueue. NULL
-- when no hook recorded one. A column with no default rewrites no row.
ALTER TABLE firesafe_jobs ADD COLUMN trace_context TEXT;
