"""The core store methods that are the same on both dialects, written once against the driver
(:mod:`firesafe.store.driver`); :class:`~firesafe.store.sqlite.SQLiteCore` and
:class:`~firesafe.store.postgres.PostgresCore` derive from :class:`CoreCommon` and keep only what differs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from firesafe.models import RESERVED_RESULT_MAX, Job
from firesafe.states import State
from firesafe.store.base import DeadFilter, Expired, JobFilter, dead_params
from firesafe.store.driver import StorePart


class CoreCommon(StorePart):
    """Jobs' counts and leases, workers and leaders: the same code on SQLite and PostgreSQL (their
    queries, named alike, are in store/sql/sqlite.sql and store/sql/postgres.sql)."""

    @staticmethod
    def _filter_params(f: JobFilter) -> dict[str, Any]:
        """The parameters of the job_list / job_count queries (each dialect passes ``keys`` its way)."""
        raise NotImplementedError

    def job_list_expired(self, limit: int) -> list[Expired]:
        rows = self._read("job_list_expired", {"now": self._now(), "limit": limit})
        return [Expired(r["id"], r["name"], r["lease_token"], r["attempt"], r["max_attempts"], r["deferrals"],
                        r["lost"], r["runs"], bool(r["cancel_requested"]), r["key"], r["queue"]) for r in rows]

    def job_count(self, filt: JobFilter) -> int:
        return int(self._read("job_count", self._filter_params(filt))[0]["n"])

    def dead_count(self, filt: DeadFilter) -> int:
        return int(self._read("dead_count", dead_params(filt))[0]["n"])

    def job_stats(self) -> list[tuple[str, str, int]]:
        return [(r["queue"], r["state"], int(r["n"])) for r in self._read("job_stats")]

    def worker_beat(self, worker_id: str, host: str, pid: int, queues: Sequence[str]) -> None:
        self._execute("worker_beat", {"id": worker_id, "host": host, "pid": pid, "queues": ",".join(queues),
                                      "now": self._now()})

    def worker_remove(self, worker_id: str) -> None:
        self._execute("worker_remove", {"id": worker_id})

    def worker_list(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._read("worker_list")]

    def leader_release(self, name: str, holder: str) -> None:
        self._execute("leader_release", {"name": name, "holder": holder})

    # -- reserved keys (migrations/*/0017_reserved_keys.sql) ---------------------------------
    def job_reserve_finished(self, state: State, older_than: float, keep_for: float,
                             after: float | None = None, limit: int = 1000) -> list[tuple[float, int]]:
        with self._tx() as c:
            rows = c.execute(self.q["job_reserve_finished"], {
                "state": str(state), "older_than": older_than, "keep_for": keep_for,
                "after_at": -math.inf if after is None else after, "limit": limit,
                "result_max": RESERVED_RESULT_MAX, "now": self._now()}).fetchall()
        return sorted((r["finished_at"], r["id"]) for r in rows)

    def job_delete_reserved(self, state: State, older_than: float, settle: float, limit: int = 1000) -> int:
        return self._execute("job_delete_reserved", {"state": str(state), "older_than": older_than,
                                                     "settle": settle, "limit": limit, "now": self._now()})

    def reserved_delete_expired(self, older_than: float, limit: int = 1000) -> int:
        return self._execute("reserved_delete_expired", {"older_than": older_than, "limit": limit,
                                                         "now": self._now()})

    def reserved_get(self, keys: Sequence[str]) -> dict[str, Job]:
        if not keys:
            return {}
        return {r["key"]: Job.from_reserved_row(r) for r in self._read("reserved_by_keys", {"keys": self._list(keys)})}


__all__ = ["CoreCommon"]
