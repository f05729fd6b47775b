"""The steps part of the store, written once for both dialects (its queries: store/sql/*/steps.sql);
``StepsSQLite`` and ``StepsPostgres`` add only what differs. The methods are declared in
:class:`firesafe.store.contract.StepStore`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from firesafe.states import State
from firesafe.store.base import StepRecord
from firesafe.store.driver import StorePart

if TYPE_CHECKING:
    from firesafe.store.contract import MoveStore


class StepsPart(StorePart):
    """Store methods of the steps part that are the same on both dialects (written against the driver)."""

    def step_list(self, job_id: int) -> list[StepRecord]:
        return [StepRecord(r["name"], r["position"], r["result"], r["run_seq"], r["recorded_at"])
                for r in self._read("step_list", {"job_id": job_id})]

    def step_forget_from(self, job_id: int, token: str, position: int, detail: dict[str, Any]) -> int | None:
        with self._tx() as c:
            if c.execute(self.q["step_divergence_event"], {"job_id": job_id, "token": token, "now": self._now(),
                                                           "detail": json.dumps(detail)}).rowcount != 1:
                return None  # the lease is gone: the transaction ends with nothing written
            return int(c.execute(self.q["step_delete_from"], {"job_id": job_id, "position": position}).rowcount)

    def job_rerun(self, job_id: int, actor: str, from_position: int | None, reason: str | None = None) -> bool:
        now = self._now()
        with self._tx() as c:
            if c.execute(self.q["job_rerun"], self._rerun_params(job_id, now)).rowcount != 1:
                return False
            self._recount(c, "job_replay", [job_id], now)  # a child counts on its parent again
            forgotten = 0
            if from_position is not None:
                forgotten = c.execute(self.q["step_delete_from"], {"job_id": job_id, "position": from_position}
                                      ).rowcount
            c.execute(self.q["event_insert"], {"job_id": job_id, "now": now, "kind": "rerun", "actor": actor,
                                               "detail": json.dumps({"from_position": from_position,
                                                                     "steps_forgotten": forgotten,
                                                                     **({"reason": reason} if reason is not None
                                                                        else {})})})
        # A parent's children that died or were cancelled run again (and theirs: the replay cascades);
        # those that succeeded are reused.
        kids = [int(r["id"]) for r in self._read("job_children_ids", {
            "ids": self._list([job_id]), "states": self._list([str(State.DEAD), str(State.CANCELLED)])})]
        if kids:
            cast("MoveStore", self).job_replay_many(kids, actor, reason)
        return True

    def _rerun_params(self, job_id: int, now: float | None) -> dict[str, Any]:
        """The parameters of the ``job_rerun`` query."""
        return {"job_id": job_id, "now": now}


__all__ = ["StepsPart"]
