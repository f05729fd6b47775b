-- Alerts (part 7): the outbox, grouped alerts, their deliveries under a lease, and rule state.

-- name: alert_outbox_insert
-- Record one alert event; an event whose identity (dedupe) was recorded before is not recorded again.
INSERT INTO firesafe_alert_outbox (kind, severity, job_name, job_id, keys, payload, dedupe, created_at)
VALUES (:kind, :severity, :job_name, :job_id, :keys, :payload, :dedupe, :now)
ON CONFLICT (dedupe) DO NOTHING
RETURNING id;

-- name: alert_outbox_dead
-- One dead_letter event per job of a JSON list of ids that is dead, inside the transaction that
-- moved it there. Its identity is (job, run): a job replayed and dead again alerts again.
INSERT INTO firesafe_alert_outbox (kind, severity, job_name, job_id, keys, payload, dedupe, created_at)
SELECT 'dead_letter', 'critical', name, id, json_array(key),
       json_object('key', key, 'queue', queue, 'reason', reason, 'error_type', error_type,
                   'message', error_message, 'attempt', attempt, 'runs', runs),
       'dead:' || id || ':' || runs, :now
FROM firesafe_jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND +state = 'dead'  -- by id (sqlite.sql)
ON CONFLICT (dedupe) DO NOTHING;

-- name: alert_pending
-- Events not grouped into an alert yet, oldest first.
SELECT id, kind, severity, job_name, job_id, keys, payload, created_at
FROM firesafe_alert_outbox WHERE alert_id IS NULL ORDER BY id LIMIT :limit;

-- name: alert_waiting
-- How many events wait to be grouped.
SELECT count(*) AS n FROM firesafe_alert_outbox WHERE alert_id IS NULL;

-- name: alert_last_sent
-- When each (kind, job name, severity, muted or not) group last became an alert.
SELECT kind, job_name, severity, status = 'muted' AS muted, max(created_at) AS at
FROM firesafe_alerts WHERE created_at >= :since
GROUP BY kind, job_name, severity, status = 'muted';

-- name: alert_insert
-- Create one alert.
INSERT INTO firesafe_alerts (kind, severity, status, job_name, count, first_at, last_at, title, document, created_at)
VALUES (:kind, :severity, :status, :job_name, :count, :first_at, :last_at, :title, :document, :now)
RETURNING id;

-- name: alert_group_events
-- Attach events of a JSON list of ids to an alert, only those not grouped yet (the row count says
-- whether another dispatcher was first).
UPDATE firesafe_alert_outbox SET alert_id = :alert_id
WHERE id IN (SELECT value FROM json_each(:ids)) AND alert_id IS NULL;

-- name: alert_delivery_insert
-- The delivery of an alert to one sink, due now.
INSERT INTO firesafe_alert_deliveries (alert_id, sink, state, attempts, next_at, updated_at)
VALUES (:alert_id, :sink, 'pending', 0, :now, :now);

-- name: alert_delivery_due
-- Whether a delivery to one sink is due (a read before claiming, so an idle dispatcher takes no write lock).
SELECT 1 AS due FROM firesafe_alert_deliveries
WHERE sink = :sink AND state = 'pending' AND next_at <= :now AND (lease_expires IS NULL OR lease_expires < :now)
  AND (:alert_id IS NULL OR alert_id = :alert_id)
LIMIT 1;

-- name: alert_delivery_claim
-- Take up to :limit due deliveries to one sink under a lease token (an expired lease is taken over).
-- SQLite writes one at a time, so no row lock is needed (PostgreSQL uses SKIP LOCKED).
UPDATE firesafe_alert_deliveries
SET lease_token = :token, lease_expires = :now + :lease, updated_at = :now
WHERE rowid IN (
    SELECT rowid FROM firesafe_alert_deliveries
    WHERE sink = :sink AND state = 'pending' AND next_at <= :now
      AND (lease_expires IS NULL OR lease_expires < :now)
      AND (:alert_id IS NULL OR alert_id = :alert_id)
    ORDER BY next_at, alert_id LIMIT :limit)
RETURNING alert_id, sink, attempts;

-- name: alert_documents
-- The rendered documents of alerts whose ids are in a JSON list.
SELECT id, created_at, document FROM firesafe_alerts WHERE id IN (SELECT value FROM json_each(:ids));

-- name: alert_delivery_finish
-- Record a delivery's outcome; only the holder of the lease may (fencing).
UPDATE firesafe_alert_deliveries
SET state = :state, attempts = attempts + :tried,
    next_at = CASE WHEN :delay IS NULL THEN next_at ELSE :now + :delay END,
    last_error = CASE WHEN :state = 'delivered' THEN last_error ELSE :error END,
    delivered_at = CASE WHEN :state = 'delivered' THEN :now ELSE delivered_at END,
    lease_token = NULL, lease_expires = NULL, updated_at = :now
WHERE alert_id = :alert_id AND sink = :sink AND lease_token = :token AND state = 'pending';

-- name: alert_list
-- Alerts, newest first, optionally of one kind.
SELECT * FROM firesafe_alerts WHERE (:kind IS NULL OR kind = :kind) ORDER BY id DESC LIMIT :limit;

-- name: alert_deliveries_of
-- The deliveries of alerts whose ids are in a JSON list.
SELECT alert_id, sink, state, attempts, next_at, last_error, delivered_at,
       (lease_expires IS NOT NULL AND lease_expires >= :now) AS leased
FROM firesafe_alert_deliveries WHERE alert_id IN (SELECT value FROM json_each(:ids)) ORDER BY alert_id, sink;

-- name: alert_conditions
-- The subjects of one rule and whether each is firing.
SELECT subject, firing FROM firesafe_alert_conditions WHERE kind = :kind;

-- name: alert_condition_fire
-- A rule's subject starts firing; returns a row only if it was not firing already.
INSERT INTO firesafe_alert_conditions (kind, subject, firing, since, updated_at)
VALUES (:kind, :subject, 1, :now, :now)
ON CONFLICT (kind, subject) DO UPDATE SET firing = 1, since = excluded.since, updated_at = excluded.updated_at
WHERE firesafe_alert_conditions.firing = 0
RETURNING subject;

-- name: alert_condition_resolve
-- A firing subject resolves; returns a row only if it was firing.
UPDATE firesafe_alert_conditions SET firing = 0, since = :now, updated_at = :now
WHERE kind = :kind AND subject = :subject AND firing = 1
RETURNING subject;

-- name: alert_failure_counts
-- Per job name: attempts that ended at or after :since, and how many of them failed.
-- Deferrals, interruptions and cancels are neither successes nor failures.
SELECT j.name AS name, count(*) AS total,
       sum(CASE WHEN a.outcome IN ('failed', 'timed_out', 'lost') THEN 1 ELSE 0 END) AS failures
FROM firesafe_attempts a JOIN firesafe_jobs j ON j.id = a.job_id
WHERE a.ended_at >= :since AND a.outcome IN ('succeeded', 'failed', 'timed_out', 'lost')
GROUP BY j.name;

-- name: alert_failed_keys
-- Keys of the jobs of one name whose attempts failed most recently.
SELECT j.key AS key, max(a.ended_at) AS at
FROM firesafe_attempts a JOIN firesafe_jobs j ON j.id = a.job_id
WHERE a.ended_at >= :since AND a.outcome IN ('failed', 'timed_out', 'lost') AND j.name = :name
GROUP BY j.key ORDER BY at DESC LIMIT :limit;

-- name: alert_queue_backlog
-- Per queue: when its oldest runnable job became due, and how many are runnable now.
SELECT queue, min(run_at) AS oldest_run_at, count(*) AS runnable
FROM firesafe_jobs WHERE state IN ('queued', 'scheduled') AND run_at <= :now GROUP BY queue;

-- name: alert_prune
-- Delete alerts made before :before whose deliveries are all over (their deliveries go with them).
DELETE FROM firesafe_alerts WHERE created_at < :before AND NOT EXISTS (
    SELECT 1 FROM firesafe_alert_deliveries d WHERE d.alert_id = firesafe_alerts.id AND d.state = 'pending');

-- name: alert_prune_events
-- Delete grouped events whose alert is gone.
DELETE FROM firesafe_alert_outbox WHERE alert_id IS NOT NULL AND created_at < :before
  AND alert_id NOT IN (SELECT id FROM firesafe_alerts);
