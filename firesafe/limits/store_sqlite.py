"""The limits part of the sqlite store: a mixin of the store class (queries in store/sql/sqlite/limits.sql).
What is the same on both dialects is written once in :class:`firesafe.limits.store.LimitsStore`."""

from __future__ import annotations

from typing import Any

from firesafe.limits.store import LimitsStore
from firesafe.store.driver import SQLitePart


class LimitsSQLite(LimitsStore, SQLitePart):
    """Store methods of the limits part that differ on SQLite; mixed into the sqlite store class."""

    def _lim_now(self, c: Any) -> float:
        return float(self.now())

    def _lim_waits(self, c: Any, now: float, waits: list[dict[str, Any]]) -> set[int]:
        applied: set[int] = set()
        for w in waits:
            p = {**w, "now": now}
            if c.execute(self.q["limiter_job_wait"], p).rowcount == 1:  # it took the attempt back: given_back 1
                c.execute(self.q["attempt_close"], {**p, "given_back": 1, "outcome": "deferred"})
                applied.add(w["job_id"])
        return applied
