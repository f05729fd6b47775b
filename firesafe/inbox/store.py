"""The inbox part of the store, written once for both dialects (its queries: store/sql/*/inbox.sql);
``InboxSQLite`` and ``InboxPostgres`` add only what differs. The methods are declared in
:class:`firesafe.store.contract.InboxStore`."""

from __future__ import annotations

import json
from typing import Any

from firesafe.store.driver import StorePart


def _event_row(r: Any) -> dict[str, Any]:
    """A stored event as a dict (``handled`` is an integer on SQLite, a boolean on PostgreSQL)."""
    return {**dict(r), "handled": bool(r["handled"])}


class InboxPart(StorePart):
    """Store methods of the inbox part that are the same on both dialects (written against the driver)."""

    def inbox_event_store(self, source: str, event_id: str, type: str, data: str, fingerprint: str,
                          body_digest: str | None = None) -> tuple[bool, dict[str, Any]]:
        """Store an event once per (source, event id), and once per (source, body digest) if a digest
        is given, not yet handled; returns (created, the stored row: this id's, else the row of the
        event stored with the same body digest under another id). A delivery of a stored event is
        counted on its row (``redeliveries``; ``changed`` too if its type or data differ)."""
        key = {"source": source, "event_id": event_id}
        now = self._now()
        with self._tx() as c:
            created = c.execute(self.q["inbox_event_insert"], {**key, "type": type, "data": data,
                                                               "fingerprint": fingerprint, "body_digest": body_digest,
                                                               "now": now}).rowcount == 1
            if not created:
                c.execute(self.q["inbox_event_redelivered"], {**key, "data": data, "fingerprint": fingerprint,
                                                              "now": now})
            row = c.execute(self.q["inbox_event_get"], key).fetchone()
            if row is None:  # nothing stored: the same body is stored under another id
                row = c.execute(self.q["inbox_event_by_digest"], {"source": source,
                                                                  "body_digest": body_digest}).fetchone()
                c.execute(self.q["inbox_event_redelivered"], {"source": source, "event_id": row["event_id"],
                                                              "data": data, "fingerprint": fingerprint, "now": now})
        return bool(created), _event_row(row)

    def inbox_event_store_many(self, source: str, items: list[dict[str, Any]]) -> dict[str, tuple[bool, dict]]:
        """Store a batch of one source's events in one transaction, not yet handled;
        ``{event_id: (created, row)}``."""
        now = self._now()
        with self._tx() as c:
            created = self._inbox_insert_many(c, source, items, now)
            again = [it for it in items if it["event_id"] not in created]
            if again:
                c.execute(self.q["inbox_event_redelivered_many"], {"source": source, "now": now,
                                                                   "items": json.dumps(again)})
            rows = c.execute(self.q["inbox_event_by_ids"], {
                "source": source, "ids": self._list(i["event_id"] for i in items)}).fetchall()
        return {r["event_id"]: (r["event_id"] in created, _event_row(r)) for r in rows}

    def _inbox_insert_many(self, c: Any, source: str, items: list[dict[str, Any]], now: float | None) -> set[str]:
        """Inside ``c``'s transaction: insert the events not stored yet; the ids of those inserted."""
        raise NotImplementedError

    def inbox_event_show(self, source: str, event_id: str) -> dict[str, Any] | None:
        """One stored event, with what the last changed redelivery brought; None if not stored."""
        rows = self._read("inbox_event_show", {"source": source, "event_id": event_id})
        return _event_row(rows[0]) if rows else None

    def inbox_event_mark_handled_many(self, source: str, event_ids: list[str]) -> int:
        return self._execute("inbox_event_mark_handled_many", {"source": source, "ids": self._list(event_ids)})

    def inbox_event_list(self, source: str | None, unhandled: bool, limit: int, offset: int = 0) -> list[dict]:
        rows = self._read("inbox_event_list", {"source": source, "unhandled": int(unhandled), "limit": limit,
                                               "offset": offset})
        return [_event_row(r) for r in rows]

    def inbox_reject(self, source: str, reason: str, body: str | None) -> None:
        self._execute("inbox_reject_insert", {"source": source, "reason": reason, "body": body, "now": self._now()})

    def inbox_reject_list(self, source: str | None, limit: int) -> list[dict]:
        return [dict(r) for r in self._read("inbox_reject_list", {"source": source, "limit": limit})]


__all__ = ["InboxPart"]
