"""The steps part of the PostgreSQL store: a mixin (queries in sql/postgres/steps.sql). What is the same
on both dialects is written once in :class:`firesafe.steps.store.StepsPart`."""

from __future__ import annotations

from typing import Any

from firesafe.steps.store import StepsPart
from firesafe.store.driver import PostgresPart


class StepsPostgres(StepsPart, PostgresPart):
    """Store methods of the steps part that differ on PostgreSQL; mixed into the postgres store class."""

    def step_record(self, job_id: int, token: str, name: str, position: int, result: str) -> bool:
        # One statement on its own: PostgreSQL takes concurrent writers (SQLite's groups them into one commit).
        return self._execute("step_record", {"job_id": job_id, "token": token, "name": name,
                                             "position": position, "result": result, "now": self._now()}) == 1

    def _rerun_params(self, job_id: int, now: float | None) -> dict[str, Any]:
        # PostgreSQL's job_rerun also wakes the workers listening on the store's channel (NOTIFY).
        return {**super()._rerun_params(job_id, now), "channel": self.channel}
