-- Schedules (part 6): the scheduler's state per schedule, missed windows and schedule events.
-- PostgreSQL differs throughout in the usual ways: arrays instead of JSON lists, boolean paused, and
-- now from the database's clock unless a test injected one.

-- name: schedule_state_init
-- Create a schedule's state with its cursor at now, unless it exists.
INSERT INTO {schema}.firesafe_schedules AS s (name, expression, tz, cursor, paused, created_at, updated_at)
SELECT %(name)s, %(expression)s, %(tz)s, c.now, false, c.now, c.now
FROM (SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now) c
ON CONFLICT (name) DO NOTHING;

-- name: schedule_state_get
-- One schedule's state.
SELECT * FROM {schema}.firesafe_schedules WHERE name = %(name)s;

-- name: schedule_state_list
-- Every schedule's state, by name.
SELECT * FROM {schema}.firesafe_schedules ORDER BY name;

-- name: schedule_advance
-- Move the cursor only if it is still where this scheduler read it and the schedule is not paused
-- (compare-and-set: of two schedulers deciding the same windows, one records them).
UPDATE {schema}.firesafe_schedules
SET cursor = %(cursor)s, expression = %(expression)s, tz = %(tz)s,
    last_start = coalesce(%(last_start)s::float8, last_start), last_end = coalesce(%(last_end)s::float8, last_end),
    updated_at = coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
WHERE name = %(name)s AND cursor = %(expected)s::float8 AND NOT paused;

-- name: schedule_pause
-- Pause a schedule (creating its state if needed).
INSERT INTO {schema}.firesafe_schedules AS s (name, expression, tz, cursor, paused, created_at, updated_at)
SELECT %(name)s, %(expression)s, %(tz)s, c.now, true, c.now, c.now
FROM (SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now) c
ON CONFLICT (name) DO UPDATE SET paused = true, updated_at = excluded.updated_at;

-- name: schedule_resume
-- Resume a schedule: windows that ended while it was paused are not run (the cursor moves to now).
INSERT INTO {schema}.firesafe_schedules AS s (name, expression, tz, cursor, paused, created_at, updated_at)
SELECT %(name)s, %(expression)s, %(tz)s, c.now, false, c.now, c.now
FROM (SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now) c
ON CONFLICT (name) DO UPDATE SET paused = false, cursor = greatest(s.cursor, excluded.cursor),
    updated_at = excluded.updated_at
WHERE s.paused;

-- name: schedule_missed_insert
-- Record a missed window, once per (schedule, window start).
INSERT INTO {schema}.firesafe_schedule_missed (schedule, window_start, window_end, window_key, reason, recorded_at)
VALUES (%(schedule)s, %(start)s, %(end)s, %(key)s, %(reason)s,
        coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8))
ON CONFLICT (schedule, window_start) DO NOTHING;

-- name: schedule_missed_list
-- Missed windows of a schedule, newest first (optionally only those not backfilled since).
SELECT * FROM {schema}.firesafe_schedule_missed
WHERE schedule = %(name)s AND (NOT %(open_only)s OR backfilled_at IS NULL)
ORDER BY window_start DESC LIMIT %(limit)s;

-- name: schedule_missed_count
-- Missed windows not backfilled since, per schedule.
SELECT schedule, count(*) AS n FROM {schema}.firesafe_schedule_missed WHERE backfilled_at IS NULL
GROUP BY schedule;

-- name: schedule_missed_resolve
-- Mark missed windows (an array of starts) as backfilled.
UPDATE {schema}.firesafe_schedule_missed
SET backfilled_at = coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
WHERE schedule = %(name)s AND backfilled_at IS NULL AND window_start = ANY(%(starts)s::float8[]);

-- name: schedule_event_insert
-- Record a schedule event.
INSERT INTO {schema}.firesafe_schedule_events (schedule, at, kind, detail)
VALUES (%(name)s, coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8), %(kind)s, %(detail)s)
RETURNING id;

-- name: schedule_event_list
-- Schedule events after an id, oldest first (optionally of one schedule).
SELECT * FROM {schema}.firesafe_schedule_events
WHERE id > %(after)s AND (%(name)s::text IS NULL OR schedule = %(name)s::text)
ORDER BY id LIMIT %(limit)s;

-- name: schedule_window_states
-- Id and state of the jobs among an array of window keys.
SELECT key, id, state FROM {schema}.firesafe_jobs WHERE key = ANY(%(keys)s::text[]);

-- name: schedule_job_counts
-- How many jobs of one name are in each state.
SELECT state, count(*) AS n FROM {schema}.firesafe_jobs WHERE name = %(name)s GROUP BY state;

-- name: schedule_backfill_last
-- The latest window a backfill of one schedule enqueued or re-ran (its backfill_finished events' last window).
-- The detail column is JSON text (as on SQLite), read as jsonb here.
SELECT (detail::jsonb ->> 'last_start')::float8 AS last_start, (detail::jsonb ->> 'last_end')::float8 AS last_end
FROM {schema}.firesafe_schedule_events
WHERE schedule = %(name)s AND kind = 'backfill_finished' AND detail::jsonb ->> 'last_start' IS NOT NULL
ORDER BY (detail::jsonb ->> 'last_start')::float8 DESC LIMIT 1;
