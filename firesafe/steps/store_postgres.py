"""The steps part of the PostgreSQL store: a mixin (queries in sql/postgres/steps.sql)."""

from __future__ import annotations

import json

from firesafe.store.base import StepRecord
from firesafe.store.driver import PostgresPart


class StepsPostgres(PostgresPart):
    """Store methods of the steps part; mixed into the postgres store class."""

    def step_list(self, job_id: int) -> list[StepRecord]:
        return [StepRecord(r["name"], r["position"], r["result"], r["run_seq"], r["recorded_at"])
                for r in self._read("step_list", {"job_id": job_id})]

    def step_record(self, job_id: int, token: str, name: str, position: int, result: str) -> bool:
        with self._conn() as c:
            return c.execute(self.q["step_record"], {"job_id": job_id, "token": token, "name": name,
                                                     "position": position, "result": result,
                                                     "now": self._now()}).rowcount == 1

    def job_rerun(self, job_id: int, actor: str, from_position: int | None, reason: str | None = None) -> bool:
        now = self._now()
        with self._conn() as c, c.transaction():
            if not c.execute(self.q["job_rerun"], {"job_id": job_id, "now": now,
                                                   "channel": self.channel}).fetchall():
                return False
            forgotten = 0
            if from_position is not None:
                forgotten = c.execute(self.q["step_delete_from"],
                                      {"job_id": job_id, "position": from_position}).rowcount
            c.execute(self.q["event_insert"], {"job_id": job_id, "now": now, "kind": "rerun", "actor": actor,
                                               "detail": json.dumps({"from_position": from_position,
                                                                     "steps_forgotten": forgotten,
                                                                **({"reason": reason} if reason is not None else {})})})
        return True
