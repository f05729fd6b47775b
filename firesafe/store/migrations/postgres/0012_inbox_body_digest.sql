-- A replay of a captured webhook under a fresh id is the same event (invariant 1). Where a source's
-- signature covers the body alone and the event id travels in an unsigned header (GitHub style),
-- the SHA-256 of the signed body is a second identity of the event: one row per (source, body
-- digest). NULL for the other sources (and for rows stored before): NULLs never collide. Adding a
-- nullable column without a default rewrites nothing; the index is built over the existing rows.
ALTER TABLE firesafe_inbox_events ADD COLUMN body_digest text;
CREATE UNIQUE INDEX firesafe_inbox_body_digest ON firesafe_inbox_events (source, body_digest)
    WHERE body_digest IS NOT NULL;
