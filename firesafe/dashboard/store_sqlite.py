"""The dashboard's read-only queries on the SQLite store (named queries in store/sql/sqlite/dashboard.sql)."""

from __future__ import annotations

from typing import Any

from firesafe.dashboard.store import Bucket, DeadGroup, QueueLag


class DashboardSQLite:
    """Mixed into :class:`~firesafe.store.sqlite.SQLiteStore`; see
    :class:`~firesafe.dashboard.store.DashboardStore`."""

    _read: Any
    now: Any

    def attempt_buckets(self, since: float, until: float, width: float) -> list[Bucket]:
        rows = self._read("dash_attempt_buckets", {"since": since, "until": until, "bucket": width})
        return [Bucket(int(r["bucket"]), r["outcome"], int(r["n"])) for r in rows]

    def dead_groups(self, limit: int = 200) -> list[DeadGroup]:
        rows = self._read("dash_dead_groups", {"limit": limit})
        return [DeadGroup(r["name"], r["error_type"], int(r["n"]), r["first_at"], r["last_at"]) for r in rows]

    def queue_lags(self) -> list[QueueLag]:
        rows = self._read("dash_queue_lags", {"now": self.now()})
        return [QueueLag(r["queue"], int(r["runnable"]), max(0.0, float(r["lag"] or 0.0))) for r in rows]

    def attempt_counts(self) -> list[tuple[str, str, int]]:
        return [(r["name"], r["outcome"], int(r["n"])) for r in self._read("dash_attempt_counts")]
