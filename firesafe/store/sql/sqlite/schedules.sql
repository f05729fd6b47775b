-- Schedules (part 6): the scheduler's state per schedule, missed windows and schedule events.

-- name: schedule_state_init
-- Create a schedule's state with its cursor at now, unless it exists.
INSERT INTO firesafe_schedules (name, expression, tz, cursor, paused, created_at, updated_at)
VALUES (:name, :expression, :tz, :now, 0, :now, :now)
ON CONFLICT (name) DO NOTHING;

-- name: schedule_state_get
-- One schedule's state.
SELECT * FROM firesafe_schedules WHERE name = :name;

-- name: schedule_state_list
-- Every schedule's state, by name.
SELECT * FROM firesafe_schedules ORDER BY name;

-- name: schedule_advance
-- Move the cursor only if it is still where this scheduler read it and the schedule is not paused
-- (compare-and-set: of two schedulers deciding the same windows, one records them).
UPDATE firesafe_schedules
SET cursor = :cursor, expression = :expression, tz = :tz,
    last_start = coalesce(:last_start, last_start), last_end = coalesce(:last_end, last_end), updated_at = :now
WHERE name = :name AND cursor = :expected AND paused = 0;

-- name: schedule_pause
-- Pause a schedule (creating its state if needed).
INSERT INTO firesafe_schedules (name, expression, tz, cursor, paused, created_at, updated_at)
VALUES (:name, :expression, :tz, :now, 1, :now, :now)
ON CONFLICT (name) DO UPDATE SET paused = 1, updated_at = :now;

-- name: schedule_resume
-- Resume a schedule: windows that ended while it was paused are not run (the cursor moves to now).
INSERT INTO firesafe_schedules (name, expression, tz, cursor, paused, created_at, updated_at)
VALUES (:name, :expression, :tz, :now, 0, :now, :now)
ON CONFLICT (name) DO UPDATE SET paused = 0, cursor = max(cursor, :now), updated_at = :now
WHERE firesafe_schedules.paused = 1;

-- name: schedule_missed_insert
-- Record a missed window, once per (schedule, window start).
INSERT INTO firesafe_schedule_missed (schedule, window_start, window_end, window_key, reason, recorded_at)
VALUES (:schedule, :start, :end, :key, :reason, :now)
ON CONFLICT (schedule, window_start) DO NOTHING;

-- name: schedule_missed_list
-- Missed windows of a schedule, newest first (optionally only those not backfilled since).
SELECT * FROM firesafe_schedule_missed
WHERE schedule = :name AND (:open_only = 0 OR backfilled_at IS NULL)
ORDER BY window_start DESC LIMIT :limit;

-- name: schedule_missed_count
-- Missed windows not backfilled since, per schedule.
SELECT schedule, count(*) AS n FROM firesafe_schedule_missed WHERE backfilled_at IS NULL GROUP BY schedule;

-- name: schedule_missed_resolve
-- Mark missed windows (a JSON list of starts) as backfilled.
UPDATE firesafe_schedule_missed SET backfilled_at = :now
WHERE schedule = :name AND backfilled_at IS NULL
  AND window_start IN (SELECT value FROM json_each(:starts));

-- name: schedule_event_insert
-- Record a schedule event.
INSERT INTO firesafe_schedule_events (schedule, at, kind, detail) VALUES (:name, :now, :kind, :detail)
RETURNING id;

-- name: schedule_event_list
-- Schedule events after an id, oldest first (optionally of one schedule).
SELECT * FROM firesafe_schedule_events
WHERE id > :after AND (:name IS NULL OR schedule = :name)
ORDER BY id LIMIT :limit;

-- name: schedule_window_states
-- Id and state of the jobs among a JSON list of window keys.
SELECT key, id, state FROM firesafe_jobs WHERE key IN (SELECT value FROM json_each(:keys));

-- name: schedule_job_counts
-- How many jobs of one name are in each state.
SELECT state, count(*) AS n FROM firesafe_jobs WHERE name = :name GROUP BY state;

-- name: schedule_backfill_last
-- The latest window a backfill of one schedule enqueued or re-ran (its backfill_finished events' last window).
SELECT json_extract(detail, '$.last_start') AS last_start, json_extract(detail, '$.last_end') AS last_end
FROM firesafe_schedule_events
WHERE schedule = :name AND kind = 'backfill_finished' AND json_extract(detail, '$.last_start') IS NOT NULL
ORDER BY json_extract(detail, '$.last_start') DESC LIMIT 1;
