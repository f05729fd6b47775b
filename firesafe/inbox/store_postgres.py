"""The inbox part of the PostgreSQL store: a mixin (queries in store/sql/postgres/inbox.sql). What is the
same on both dialects is written once in :class:`firesafe.inbox.store.InboxPart`."""

from __future__ import annotations

import json
from typing import Any

from firesafe.inbox.store import InboxPart
from firesafe.store.driver import PostgresPart


class InboxPostgres(InboxPart, PostgresPart):
    """Store methods of the inbox part that differ on PostgreSQL; mixed into the postgres store class."""

    def _inbox_insert_many(self, c: Any, source: str, items: list[dict[str, Any]], now: float | None) -> set[str]:
        # One statement for the batch: it returns the ids it inserted.
        return {r["event_id"] for r in c.execute(self.q["inbox_event_insert_many"], {
            "source": source, "now": now, "items": json.dumps(items)}).fetchall()}

    def inbox_event_mark_handled(self, source: str, event_id: str) -> bool:
        return self._execute("inbox_event_mark_handled", {"source": source, "event_id": event_id}) == 1
