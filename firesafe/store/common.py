"""The core store methods that are the same on both dialects, written once against the driver
(:mod:`firesafe.store.driver`); :class:`~firesafe.store.sqlite.SQLiteCore` and
:class:`~firesafe.store.postgres.PostgresCore` derive from :class:`CoreCommon` and keep only what differs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


__all__ = ["CoreCommon"]
