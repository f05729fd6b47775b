-- The event inbox (events arrive at least once; the (source, event id) key makes them count once).

-- name: inbox_event_insert
-- Store an event unless its (source, event id), or its (source, body digest), is stored already;
-- not handled until its job is enqueued.
INSERT INTO {schema}.firesafe_inbox_events (source, event_id, type, data, fingerprint, body_digest, received_at,
                                            handled)
VALUES (%(source)s, %(event_id)s, %(type)s, %(data)s, %(fingerprint)s, %(body_digest)s,
        coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8), false)
ON CONFLICT DO NOTHING;

-- name: inbox_event_by_digest
-- The stored event of one source whose signed body had this digest.
SELECT source, event_id, type, data, fingerprint, received_at, handled, redeliveries, changed,
       changed_at, changed_fingerprint FROM {schema}.firesafe_inbox_events
WHERE source = %(source)s AND body_digest = %(body_digest)s;

-- name: inbox_event_get
-- One stored event.
SELECT source, event_id, type, data, fingerprint, received_at, handled, redeliveries, changed,
       changed_at, changed_fingerprint FROM {schema}.firesafe_inbox_events
WHERE source = %(source)s AND event_id = %(event_id)s;

-- name: inbox_event_mark_handled
-- Note that an event's handler job was enqueued.
UPDATE {schema}.firesafe_inbox_events SET handled = true
WHERE source = %(source)s AND event_id = %(event_id)s AND NOT handled;

-- name: inbox_event_mark_handled_many
-- Note that the handler jobs of some events of one source (ids in a list) were enqueued.
UPDATE {schema}.firesafe_inbox_events SET handled = true
WHERE source = %(source)s AND event_id = ANY(%(ids)s::text[]) AND NOT handled;

-- name: inbox_event_list
-- Stored events, newest first, optionally only those no handler took.
-- PostgreSQL differs: the parameters are cast, since a NULL alone has no type to infer.
SELECT source, event_id, type, data, fingerprint, received_at, handled, redeliveries, changed,
       changed_at, changed_fingerprint FROM {schema}.firesafe_inbox_events
WHERE (%(source)s::text IS NULL OR source = %(source)s::text) AND (%(unhandled)s::int = 0 OR NOT handled)
ORDER BY received_at DESC, event_id LIMIT %(limit)s OFFSET %(offset)s;

-- name: inbox_reject_insert
-- Keep a message that could not be read as an event, with the reason.
INSERT INTO {schema}.firesafe_inbox_rejects (source, reason, body, received_at)
VALUES (%(source)s, %(reason)s, %(body)s, coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8));

-- name: inbox_reject_list
-- Rejected messages, newest first.
SELECT id, source, reason, body, received_at FROM {schema}.firesafe_inbox_rejects
WHERE (%(source)s::text IS NULL OR source = %(source)s::text) ORDER BY id DESC LIMIT %(limit)s;

-- name: inbox_event_insert_many
-- Store a batch of events of one source, each unless already stored (not handled until its job is
-- enqueued); returns the ids it stored.
-- PostgreSQL differs: one statement over a JSON array instead of executemany.
INSERT INTO {schema}.firesafe_inbox_events (source, event_id, type, data, fingerprint, received_at, handled)
SELECT %(source)s, e.event_id, e.type, e.data, e.fingerprint,
       coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8), false
FROM jsonb_to_recordset(%(items)s::jsonb) AS e(event_id text, type text, data text, fingerprint text)
ON CONFLICT (source, event_id) DO NOTHING
RETURNING event_id;

-- name: inbox_event_by_ids
-- The stored events of one source whose ids are in a list.
SELECT source, event_id, type, data, fingerprint, received_at, handled, redeliveries, changed,
       changed_at, changed_fingerprint FROM {schema}.firesafe_inbox_events
WHERE source = %(source)s AND event_id = ANY(%(ids)s::text[]);

-- name: inbox_event_redelivered
-- Count a redelivery of a stored event: in `changed` too when its type or data differ from the
-- stored ones (a provider updates fields between its retries), keeping the last such data.
UPDATE {schema}.firesafe_inbox_events SET redeliveries = redeliveries + 1,
    changed = changed + (fingerprint <> %(fingerprint)s)::int,
    changed_at = CASE WHEN fingerprint <> %(fingerprint)s
                      THEN coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
                      ELSE changed_at END,
    changed_fingerprint = CASE WHEN fingerprint <> %(fingerprint)s THEN %(fingerprint)s ELSE changed_fingerprint END,
    changed_data = CASE WHEN fingerprint <> %(fingerprint)s THEN %(data)s ELSE changed_data END
WHERE source = %(source)s AND event_id = %(event_id)s;

-- name: inbox_event_redelivered_many
-- inbox_event_redelivered for a batch of one source's events (a JSON array), each counted once.
-- PostgreSQL differs: one statement over a JSON array instead of executemany.
UPDATE {schema}.firesafe_inbox_events AS s SET redeliveries = s.redeliveries + 1,
    changed = s.changed + (s.fingerprint <> e.fingerprint)::int,
    changed_at = CASE WHEN s.fingerprint <> e.fingerprint
                      THEN coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
                      ELSE s.changed_at END,
    changed_fingerprint = CASE WHEN s.fingerprint <> e.fingerprint THEN e.fingerprint ELSE s.changed_fingerprint END,
    changed_data = CASE WHEN s.fingerprint <> e.fingerprint THEN e.data ELSE s.changed_data END
FROM (SELECT DISTINCT ON (event_id) * FROM jsonb_to_recordset(%(items)s::jsonb)
      AS r(event_id text, data text, fingerprint text)) AS e
WHERE s.source = %(source)s AND s.event_id = e.event_id;

-- name: inbox_event_show
-- One stored event with the last changed data a redelivery brought.
SELECT source, event_id, type, data, fingerprint, received_at, handled, redeliveries, changed, changed_at,
       changed_fingerprint, changed_data, body_digest FROM {schema}.firesafe_inbox_events
WHERE source = %(source)s AND event_id = %(event_id)s;
