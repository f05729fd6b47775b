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
SELECT source, event_id, type, data, fingerprint, received_at, handled FROM {schema}.firesafe_inbox_events
WHERE source = %(source)s AND body_digest = %(body_digest)s;

-- name: inbox_event_get
-- One stored event.
SELECT source, event_id, type, data, fingerprint, received_at, handled FROM {schema}.firesafe_inbox_events
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
SELECT source, event_id, type, data, fingerprint, received_at, handled FROM {schema}.firesafe_inbox_events
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
SELECT source, event_id, type, data, fingerprint, received_at, handled FROM {schema}.firesafe_inbox_events
WHERE source = %(source)s AND event_id = ANY(%(ids)s::text[]);
