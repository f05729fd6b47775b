"""The steps part of the SQLite store: a mixin of the store class (queries in sql/sqlite/steps.sql)."""

from __future__ import annotations

import json

from firesafe.store import queries
from firesafe.store.base import StepRecord
from firesafe.store.driver import SQLitePart

Q = queries.load("sqlite")


class StepsSQLite(SQLitePart):
    """Store methods of the steps part; mixed into the sqlite store class."""

    def step_list(self, job_id: int) -> list[StepRecord]:
        return [StepRecord(r["name"], r["position"], r["result"], r["run_seq"], r["recorded_at"])
                for r in self._read("step_list", {"job_id": job_id})]

    def step_record(self, job_id: int, token: str, name: str, position: int, result: str) -> bool:
        # Step records of concurrent attempts share a commit (group commit): one fsync for many.
        return self._group_write("step_record", {"job_id": job_id, "token": token, "name": name,
                                                 "position": position, "result": result,
                                                 "now": self.now()}) == 1

    def job_rerun(self, job_id: int, actor: str, from_position: int | None, reason: str | None = None) -> bool:
        now = self.now()
        with self._tx() as c:
            if c.execute(Q["job_rerun"], {"job_id": job_id, "now": now}).rowcount != 1:
                return False
            forgotten = 0
            if from_position is not None:
                forgotten = c.execute(Q["step_delete_from"], {"job_id": job_id, "position": from_position}).rowcount
            c.execute(Q["event_insert"], {"job_id": job_id, "now": now, "kind": "rerun", "actor": actor,
                                          "detail": json.dumps({"from_position": from_position,
                                                                "steps_forgotten": forgotten,
                                                                **({"reason": reason} if reason is not None else {})})})
        return True
