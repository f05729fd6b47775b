"""The inbox part of the SQLite store: a mixin (queries in store/sql/sqlite/inbox.sql). What is the same
on both dialects is written once in :class:`firesafe.inbox.store.InboxPart`."""

from __future__ import annotations

from typing import Any

from firesafe.inbox.store import InboxPart
from firesafe.store.driver import SQLitePart


class InboxSQLite(InboxPart, SQLitePart):
    """Store methods of the inbox part that differ on SQLite; mixed into the sqlite store class."""

    def _inbox_insert_many(self, c: Any, source: str, items: list[dict[str, Any]], now: float | None) -> set[str]:
        created = set()
        for it in items:  # one row each: rowcount tells which were new
            if c.execute(self.q["inbox_event_insert"], {"source": source, "now": now, "body_digest": None,
                                                        **it}).rowcount == 1:
                created.add(it["event_id"])
        return created

    def inbox_event_mark_handled(self, source: str, event_id: str) -> bool:
        """Note that the event's job is enqueued (committed with other threads' writes: one fsync)."""
        return self._group_write("inbox_event_mark_handled", {"source": source, "event_id": event_id}) == 1
