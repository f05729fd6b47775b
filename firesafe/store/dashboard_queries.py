"""The dashboard's read-only queries, the same code on both stores: each store's named queries
(store/sql/sqlite/dashboard.sql, store/sql/postgres/dashboard.sql) say how in its dialect."""

from __future__ import annotations

from firesafe.store.dashboard import Bucket, DeadGroup, QueueLag
from firesafe.store.driver import StorePart


class DashboardQueries(StorePart):
    """Part of :class:`~firesafe.store.sqlite.SQLiteCore` and
    :class:`~firesafe.store.postgres.PostgresCore`; see :class:`~firesafe.store.contract.DashboardStore`."""

    def attempt_buckets(self, since: float, until: float, width: float) -> list[Bucket]:
        rows = self._read("dash_attempt_buckets", {"since": since, "until": until, "bucket": width})
        return [Bucket(int(r["bucket"]), r["outcome"], int(r["n"])) for r in rows]

    def dead_groups(self, limit: int = 200) -> list[DeadGroup]:
        rows = self._read("dash_dead_groups", {"limit": limit})
        return [DeadGroup(r["name"], r["error_type"], int(r["n"]), r["first_at"], r["last_at"]) for r in rows]

    def queue_lags(self) -> list[QueueLag]:
        rows = self._read("dash_queue_lags", {"now": self._now()})
        return [QueueLag(r["queue"], int(r["runnable"]), max(0.0, float(r["lag"] or 0.0))) for r in rows]

    def attempt_counts(self) -> list[tuple[str, str, int]]:
        return [(r["name"], r["outcome"], int(r["n"])) for r in self._read("dash_attempt_counts")]
