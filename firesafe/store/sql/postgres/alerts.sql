-- Alerts (part 7): the outbox, grouped alerts, their deliveries under a lease, and rule state.
-- Lists arrive as arrays (SQLite reads JSON text); :now is NULL unless a test injected a clock.

-- name: alert_outbox_insert
-- Record one alert event; an event whose identity (dedupe) was recorded before is not recorded again.
INSERT INTO {schema}.firesafe_alert_outbox (kind, severity, job_name, job_id, keys, payload, dedupe, created_at)
VALUES (%(kind)s, %(severity)s, %(job_name)s, %(job_id)s, %(keys)s, %(payload)s, %(dedupe)s,
        coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8))
ON CONFLICT (dedupe) DO NOTHING
RETURNING id;

-- name: alert_outbox_dead
-- One dead_letter event per job of a list of ids that is dead, inside the transaction that moved
-- it there. Its identity is (job, run): a job replayed and dead again alerts again.
-- PostgreSQL differs: json_build_* instead of SQLite's json_* (the text kept is the same JSON).
INSERT INTO {schema}.firesafe_alert_outbox (kind, severity, job_name, job_id, keys, payload, dedupe, created_at)
SELECT 'dead_letter', 'critical', j.name, j.id, json_build_array(j.key)::text,
       json_build_object('key', j.key, 'queue', j.queue, 'reason', j.reason, 'error_type', j.error_type,
                         'message', j.error_message, 'attempt', j.attempt, 'runs', j.runs)::text,
       'dead:' || j.id || ':' || j.runs,
       coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
-- (state = 'dead') IS TRUE: by id, never the finished index (see the header of postgres.sql).
FROM {schema}.firesafe_jobs j WHERE j.id = ANY(%(ids)s::bigint[]) AND (j.state = 'dead') IS TRUE
ON CONFLICT (dedupe) DO NOTHING;

-- name: alert_pending
-- Events not grouped into an alert yet, oldest first.
SELECT id, kind, severity, job_name, job_id, keys, payload, created_at
FROM {schema}.firesafe_alert_outbox WHERE alert_id IS NULL ORDER BY id LIMIT %(limit)s;

-- name: alert_waiting
-- How many events wait to be grouped.
SELECT count(*) AS n FROM {schema}.firesafe_alert_outbox WHERE alert_id IS NULL;

-- name: alert_last_sent
-- When each (kind, job name, severity, muted or not) group last became an alert.
SELECT kind, job_name, severity, status = 'muted' AS muted, max(created_at) AS at
FROM {schema}.firesafe_alerts WHERE created_at >= %(since)s::float8
GROUP BY kind, job_name, severity, status = 'muted';

-- name: alert_insert
-- Create one alert.
INSERT INTO {schema}.firesafe_alerts (kind, severity, status, job_name, count, first_at, last_at, title, document,
                                     created_at)
VALUES (%(kind)s, %(severity)s, %(status)s, %(job_name)s, %(count)s, %(first_at)s, %(last_at)s, %(title)s,
        %(document)s, coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8))
RETURNING id, created_at;

-- name: alert_group_events
-- Attach events of a list of ids to an alert, only those not grouped yet (the row count says
-- whether another dispatcher was first).
UPDATE {schema}.firesafe_alert_outbox SET alert_id = %(alert_id)s
WHERE id = ANY(%(ids)s::bigint[]) AND alert_id IS NULL;

-- name: alert_delivery_insert
-- The delivery of an alert to one sink, due now.
INSERT INTO {schema}.firesafe_alert_deliveries (alert_id, sink, state, attempts, next_at, updated_at)
VALUES (%(alert_id)s, %(sink)s, 'pending', 0, %(now)s::float8, %(now)s::float8);

-- name: alert_delivery_due
-- Whether a delivery to one sink is due. (Unused on PostgreSQL, whose claim takes no lock when idle;
-- kept so both dialect files define the same names.)
SELECT 1 AS due FROM {schema}.firesafe_alert_deliveries
WHERE sink = %(sink)s AND state = 'pending'
  AND next_at <= coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
  AND (lease_expires IS NULL OR lease_expires < coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8))
  AND (%(alert_id)s::bigint IS NULL OR alert_id = %(alert_id)s::bigint)
LIMIT 1;

-- name: alert_delivery_claim
-- Take up to :limit due deliveries to one sink under a lease token (an expired lease is taken over).
-- PostgreSQL differs: SKIP LOCKED lets dispatchers claim disjoint rows without waiting on each other,
-- and the alerts' documents come back from the same statement.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now),
picked AS (
    SELECT d.alert_id FROM {schema}.firesafe_alert_deliveries d
    WHERE d.sink = %(sink)s AND d.state = 'pending' AND d.next_at <= (SELECT now FROM clock)
      AND (d.lease_expires IS NULL OR d.lease_expires < (SELECT now FROM clock))
      AND (%(alert_id)s::bigint IS NULL OR d.alert_id = %(alert_id)s::bigint)
    ORDER BY d.next_at, d.alert_id LIMIT %(limit)s
    FOR UPDATE OF d SKIP LOCKED),
claimed AS (
    UPDATE {schema}.firesafe_alert_deliveries d
    SET lease_token = %(token)s, lease_expires = c.now + %(lease)s::float8, updated_at = c.now
    FROM picked p CROSS JOIN clock c
    WHERE d.alert_id = p.alert_id AND d.sink = %(sink)s
    RETURNING d.alert_id, d.sink, d.attempts)
SELECT c.alert_id, c.sink, c.attempts, a.created_at, a.document
FROM claimed c JOIN {schema}.firesafe_alerts a ON a.id = c.alert_id ORDER BY c.alert_id;

-- name: alert_documents
-- The rendered documents of alerts whose ids are in a list. (Unused on PostgreSQL, where
-- alert_delivery_claim returns them; kept so both dialect files define the same names.)
SELECT id, created_at, document FROM {schema}.firesafe_alerts WHERE id = ANY(%(ids)s::bigint[]);

-- name: alert_delivery_finish
-- Record a delivery's outcome; only the holder of the lease may (fencing).
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now)
UPDATE {schema}.firesafe_alert_deliveries d
SET state = %(state)s, attempts = d.attempts + %(tried)s,
    next_at = CASE WHEN %(delay)s::float8 IS NULL THEN d.next_at ELSE c.now + %(delay)s::float8 END,
    last_error = CASE WHEN %(state)s = 'delivered' THEN d.last_error ELSE %(error)s END,
    delivered_at = CASE WHEN %(state)s = 'delivered' THEN c.now ELSE d.delivered_at END,
    lease_token = NULL, lease_expires = NULL, updated_at = c.now
FROM clock c
WHERE d.alert_id = %(alert_id)s AND d.sink = %(sink)s AND d.lease_token = %(token)s AND d.state = 'pending';

-- name: alert_list
-- Alerts, newest first, optionally of one kind.
SELECT * FROM {schema}.firesafe_alerts WHERE (%(kind)s::text IS NULL OR kind = %(kind)s::text)
ORDER BY id DESC LIMIT %(limit)s;

-- name: alert_deliveries_of
-- The deliveries of alerts whose ids are in a list.
SELECT alert_id, sink, state, attempts, next_at, last_error, delivered_at,
       (lease_expires IS NOT NULL
        AND lease_expires >= coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)) AS leased
FROM {schema}.firesafe_alert_deliveries WHERE alert_id = ANY(%(ids)s::bigint[]) ORDER BY alert_id, sink;

-- name: alert_conditions
-- The subjects of one rule and whether each is firing.
SELECT subject, firing FROM {schema}.firesafe_alert_conditions WHERE kind = %(kind)s;

-- name: alert_condition_fire
-- A rule's subject starts firing; returns a row only if it was not firing already.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now)
INSERT INTO {schema}.firesafe_alert_conditions AS k (kind, subject, firing, since, updated_at)
SELECT %(kind)s, %(subject)s, true, c.now, c.now FROM clock c
ON CONFLICT (kind, subject) DO UPDATE SET firing = true, since = excluded.since, updated_at = excluded.updated_at
WHERE NOT k.firing
RETURNING subject;

-- name: alert_condition_resolve
-- A firing subject resolves; returns a row only if it was firing.
WITH clock AS MATERIALIZED (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now)
UPDATE {schema}.firesafe_alert_conditions k SET firing = false, since = c.now, updated_at = c.now
FROM clock c
WHERE k.kind = %(kind)s AND k.subject = %(subject)s AND k.firing
RETURNING k.subject;

-- name: alert_failure_counts
-- Per job name: attempts that ended at or after :since, and how many of them failed.
-- Deferrals, interruptions and cancels are neither successes nor failures.
SELECT j.name AS name, count(*) AS total,
       count(*) FILTER (WHERE a.outcome IN ('failed', 'timed_out', 'lost')) AS failures
FROM {schema}.firesafe_attempts a JOIN {schema}.firesafe_jobs j ON j.id = a.job_id
WHERE a.ended_at >= %(since)s::float8 AND a.outcome IN ('succeeded', 'failed', 'timed_out', 'lost')
GROUP BY j.name;

-- name: alert_failed_keys
-- Keys of the jobs of one name whose attempts failed most recently.
SELECT j.key AS key, max(a.ended_at) AS at
FROM {schema}.firesafe_attempts a JOIN {schema}.firesafe_jobs j ON j.id = a.job_id
WHERE a.ended_at >= %(since)s::float8 AND a.outcome IN ('failed', 'timed_out', 'lost') AND j.name = %(name)s
GROUP BY j.key ORDER BY at DESC LIMIT %(limit)s;

-- name: alert_queue_backlog
-- Per queue: when its oldest runnable job became due, and how many are runnable now.
SELECT queue, min(run_at) AS oldest_run_at, count(*) AS runnable
FROM {schema}.firesafe_jobs
WHERE state IN ('queued', 'scheduled')
  AND run_at <= coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
GROUP BY queue;

-- name: alert_prune
-- Delete alerts made before :before whose deliveries are all over (their deliveries go with them).
-- PostgreSQL differs: the cut-off is :older_than seconds before the database's clock.
DELETE FROM {schema}.firesafe_alerts a
WHERE a.created_at < coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) - %(older_than)s::float8
  AND NOT EXISTS (SELECT 1 FROM {schema}.firesafe_alert_deliveries d WHERE d.alert_id = a.id AND d.state = 'pending');

-- name: alert_prune_events
-- Delete grouped events whose alert is gone.
DELETE FROM {schema}.firesafe_alert_outbox o
WHERE o.alert_id IS NOT NULL
  AND o.created_at < coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) - %(older_than)s::float8
  AND NOT EXISTS (SELECT 1 FROM {schema}.firesafe_alerts a WHERE a.id = o.alert_id);
