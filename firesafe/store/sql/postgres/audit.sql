-- The audit log (review path): who did what and why, for actions that no job's events can hold.
-- name: audit_insert
-- Record one action of a person (or of a program acting for one).
INSERT INTO {schema}.firesafe_audit (at, action, subject, actor, reason, detail)
VALUES (coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8), %(action)s, %(subject)s,
        %(actor)s, %(reason)s, %(detail)s)
RETURNING id;

-- name: audit_list
-- The latest actions, newest first, optionally of one action and one subject.
SELECT * FROM {schema}.firesafe_audit
WHERE (%(action)s::text IS NULL OR action = %(action)s::text)
  AND (%(subject)s::text IS NULL OR subject = %(subject)s::text)
ORDER BY id DESC LIMIT %(limit)s;
