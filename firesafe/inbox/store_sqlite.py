"""The inbox part of the SQLite store: a mixin (queries in store/sql/sqlite/inbox.sql)."""

from __future__ import annotations

import json
from typing import Any

from firesafe.store import queries
from firesafe.store.driver import SQLitePart

Q = queries.load("sqlite")


class InboxSQLite(SQLitePart):
    """Store methods of the inbox part; mixed into the sqlite store class."""

    def inbox_event_store(self, source: str, event_id: str, type: str, data: str, fingerprint: str,
                          body_digest: str | None = None) -> tuple[bool, dict[str, Any]]:
        """Store an event once per (source, event id), and once per (source, body digest) if a digest
        is given, not yet handled; returns (created, the stored row: this id's, else the row of the
        event stored with the same body digest under another id). A delivery of a stored event is
        counted on its row (``redeliveries``; ``changed`` too if its type or data differ)."""
        key = {"source": source, "event_id": event_id}
        now = self.now()
        with self._tx() as c:
            created = c.execute(Q["inbox_event_insert"], {**key, "type": type, "data": data, "fingerprint": fingerprint,
                                                          "body_digest": body_digest, "now": now}).rowcount == 1
            if not created:
                c.execute(Q["inbox_event_redelivered"], {**key, "data": data, "fingerprint": fingerprint, "now": now})
            found = c.execute(Q["inbox_event_get"], key).fetchone()
            if found is None:  # nothing stored: the same body is stored under another id
                found = c.execute(Q["inbox_event_by_digest"], {"source": source, "body_digest": body_digest}).fetchone()
                c.execute(Q["inbox_event_redelivered"], {"source": source, "event_id": found["event_id"],
                                                         "data": data, "fingerprint": fingerprint, "now": now})
            row = dict(found)
        row["handled"] = bool(row["handled"])
        return created, row

    def inbox_event_store_many(self, source: str, items: list[dict[str, Any]]) -> dict[str, tuple[bool, dict]]:
        """Store a batch of one source's events in one transaction, not yet handled;
        ``{event_id: (created, row)}``."""
        now = self.now()
        with self._tx() as c:
            created = set()
            for it in items:  # one row each: rowcount tells which were new
                if c.execute(Q["inbox_event_insert"], {"source": source, "now": now, "body_digest": None,
                                                       **it}).rowcount == 1:
                    created.add(it["event_id"])
            again = [it for it in items if it["event_id"] not in created]
            if again:
                c.execute(Q["inbox_event_redelivered_many"], {"source": source, "now": now, "items": json.dumps(again)})
            rows = c.execute(Q["inbox_event_by_ids"], {"source": source,
                                                       "ids": json.dumps([i["event_id"] for i in items])})
            out = {}
            for r in rows:
                row = dict(r)
                row["handled"] = bool(row["handled"])
                out[row["event_id"]] = (row["event_id"] in created, row)
        return out

    def inbox_event_show(self, source: str, event_id: str) -> dict[str, Any] | None:
        """One stored event, with what the last changed redelivery brought; None if not stored."""
        rows = self._read("inbox_event_show", {"source": source, "event_id": event_id})
        return {**dict(rows[0]), "handled": bool(rows[0]["handled"])} if rows else None

    def inbox_event_mark_handled(self, source: str, event_id: str) -> bool:
        """Note that the event's job is enqueued (committed with other threads' writes: one fsync)."""
        return self._group_write("inbox_event_mark_handled", {"source": source, "event_id": event_id}) == 1

    def inbox_event_mark_handled_many(self, source: str, event_ids: list[str]) -> int:
        with self._tx() as c:
            return c.execute(Q["inbox_event_mark_handled_many"],
                             {"source": source, "ids": json.dumps(event_ids)}).rowcount

    def inbox_event_list(self, source: str | None, unhandled: bool, limit: int, offset: int = 0) -> list[dict]:
        rows = self._read("inbox_event_list", {"source": source, "unhandled": int(unhandled), "limit": limit,
                                               "offset": offset})
        return [{**dict(r), "handled": bool(r["handled"])} for r in rows]

    def inbox_reject(self, source: str, reason: str, body: str | None) -> None:
        with self._tx() as c:
            c.execute(Q["inbox_reject_insert"], {"source": source, "reason": reason, "body": body,
                                                 "now": self.now()})

    def inbox_reject_list(self, source: str | None, limit: int) -> list[dict]:
        return [dict(r) for r in self._read("inbox_reject_list", {"source": source, "limit": limit})]
