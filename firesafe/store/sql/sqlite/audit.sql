-- The audit log (review path): who did what and why, for actions that no job's events can hold.
-- name: audit_insert
-- Record one action of a person (or of a program acting for one).
INSERT INTO firesafe_audit (at, action, subject, actor, reason, detail)
VALUES (:now, :action, :subject, :actor, :reason, :detail) RETURNING id;

-- name: audit_list
-- The latest actions, newest first, optionally of one action and one subject.
SELECT * FROM firesafe_audit
WHERE (:action IS NULL OR action = :action) AND (:subject IS NULL OR subject = :subject)
ORDER BY id DESC LIMIT :limit;
