"""The steps part of the SQLite store: a mixin (queries in sql/sqlite/steps.sql). What is the same on
both dialects is written once in :class:`firesafe.steps.store.StepsPart`."""

from __future__ import annotations

from firesafe.steps.store import StepsPart
from firesafe.store.driver import SQLitePart


class StepsSQLite(StepsPart, SQLitePart):
    """Store methods of the steps part that differ on SQLite; mixed into the sqlite store class."""

    def step_record(self, job_id: int, token: str, name: str, position: int, result: str) -> bool:
        # Step records of concurrent attempts share a commit (group commit): one fsync for many.
        return self._group_write("step_record", {"job_id": job_id, "token": token, "name": name,
                                                 "position": position, "result": result,
                                                 "now": self.now()}) == 1
