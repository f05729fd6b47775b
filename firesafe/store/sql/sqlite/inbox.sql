-- The event inbox (events arrive at least once; the (source, event id) key makes them count once).

-- name: inbox_event_insert
-- Store an event unless its (source, event id), or its (source, body digest), is stored already;
-- not handled until its job is enqueued.
INSERT INTO firesafe_inbox_events (source, event_id, type, data, fingerprint, body_digest, received_at, handled)
VALUES (:source, :event_id, :type, :data, :fingerprint, :body_digest, :now, 0)
ON CONFLICT DO NOTHING;

-- name: inbox_event_by_digest
-- The stored event of one source whose signed body had this digest.
SELECT source, event_id, type, data, fingerprint, received_at, handled, redeliveries, changed,
       changed_at, changed_fingerprint FROM firesafe_inbox_events
WHERE source = :source AND body_digest = :body_digest;

-- name: inbox_event_get
-- One stored event.
SELECT source, event_id, type, data, fingerprint, received_at, handled, redeliveries, changed,
       changed_at, changed_fingerprint FROM firesafe_inbox_events
WHERE source = :source AND event_id = :event_id;

-- name: inbox_event_mark_handled
-- Note that an event's handler job was enqueued.
UPDATE firesafe_inbox_events SET handled = 1 WHERE source = :source AND event_id = :event_id AND handled = 0;

-- name: inbox_event_mark_handled_many
-- Note that the handler jobs of some events of one source (ids in a JSON list) were enqueued.
UPDATE firesafe_inbox_events SET handled = 1
WHERE source = :source AND event_id IN (SELECT value FROM json_each(:ids)) AND handled = 0;

-- name: inbox_event_list
-- Stored events, newest first, optionally only those no handler took.
SELECT source, event_id, type, data, fingerprint, received_at, handled, redeliveries, changed,
       changed_at, changed_fingerprint FROM firesafe_inbox_events
WHERE (:source IS NULL OR source = :source) AND (:unhandled = 0 OR handled = 0)
ORDER BY received_at DESC, event_id LIMIT :limit OFFSET :offset;

-- name: inbox_reject_insert
-- Keep a message that could not be read as an event, with the reason.
INSERT INTO firesafe_inbox_rejects (source, reason, body, received_at) VALUES (:source, :reason, :body, :now);

-- name: inbox_reject_list
-- Rejected messages, newest first.
SELECT id, source, reason, body, received_at FROM firesafe_inbox_rejects
WHERE (:source IS NULL OR source = :source) ORDER BY id DESC LIMIT :limit;

-- name: inbox_event_by_ids
-- The stored events of one source whose ids are in a JSON list.
SELECT source, event_id, type, data, fingerprint, received_at, handled, redeliveries, changed,
       changed_at, changed_fingerprint FROM firesafe_inbox_events
WHERE source = :source AND event_id IN (SELECT value FROM json_each(:ids));

-- name: inbox_event_redelivered
-- Count a redelivery of a stored event: in `changed` too when its type or data differ from the
-- stored ones (a provider updates fields between its retries), keeping the last such data.
UPDATE firesafe_inbox_events SET redeliveries = redeliveries + 1,
    changed = changed + (fingerprint <> :fingerprint),
    changed_at = CASE WHEN fingerprint <> :fingerprint THEN :now ELSE changed_at END,
    changed_fingerprint = CASE WHEN fingerprint <> :fingerprint THEN :fingerprint ELSE changed_fingerprint END,
    changed_data = CASE WHEN fingerprint <> :fingerprint THEN :data ELSE changed_data END
WHERE source = :source AND event_id = :event_id;

-- name: inbox_event_redelivered_many
-- inbox_event_redelivered for a batch of one source's events (a JSON array), each counted once.
-- SQLite differs: each row reads its item's fields back from the array (UPDATE ... FROM needs 3.33).
UPDATE firesafe_inbox_events SET redeliveries = redeliveries + 1,
    changed = changed + (fingerprint <> (SELECT json_extract(value, '$.fingerprint') FROM json_each(:items)
                                         WHERE json_extract(value, '$.event_id') = event_id LIMIT 1)),
    changed_at = CASE WHEN fingerprint <> (SELECT json_extract(value, '$.fingerprint') FROM json_each(:items)
                                           WHERE json_extract(value, '$.event_id') = event_id LIMIT 1)
                      THEN :now ELSE changed_at END,
    changed_data = CASE WHEN fingerprint <> (SELECT json_extract(value, '$.fingerprint') FROM json_each(:items)
                                             WHERE json_extract(value, '$.event_id') = event_id LIMIT 1)
                        THEN (SELECT json_extract(value, '$.data') FROM json_each(:items)
                              WHERE json_extract(value, '$.event_id') = event_id LIMIT 1)
                        ELSE changed_data END,
    changed_fingerprint = CASE WHEN fingerprint <> (SELECT json_extract(value, '$.fingerprint') FROM json_each(:items)
                                                    WHERE json_extract(value, '$.event_id') = event_id LIMIT 1)
                               THEN (SELECT json_extract(value, '$.fingerprint') FROM json_each(:items)
                                     WHERE json_extract(value, '$.event_id') = event_id LIMIT 1)
                               ELSE changed_fingerprint END
WHERE source = :source AND event_id IN (SELECT json_extract(value, '$.event_id') FROM json_each(:items));

-- name: inbox_event_show
-- One stored event with the last changed data a redelivery brought.
SELECT source, event_id, type, data, fingerprint, received_at, handled, redeliveries, changed, changed_at,
       changed_fingerprint, changed_data, body_digest FROM firesafe_inbox_events
WHERE source = :source AND event_id = :event_id;
