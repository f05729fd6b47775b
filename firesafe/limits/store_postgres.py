"""The limits part of the postgres store: a mixin of the store class (queries in store/sql/postgres/limits.sql).
What is the same on both dialects is written once in :class:`firesafe.limits.store.LimitsStore`."""

from __future__ import annotations

from typing import Any

from firesafe.limits.store import LimitsStore
from firesafe.store.driver import PostgresPart

_WAIT_FIELDS = ("job_id", "token", "seq", "delay", "reason", "error_type", "message", "traceback", "detail")


class LimitsPostgres(LimitsStore, PostgresPart):
    """Store methods of the limits part that differ on PostgreSQL; mixed into the postgres store class."""

    def _lim_now(self, c: Any) -> float:
        # Without an injected clock, the database's, read after the transaction's row locks are taken.
        if self.clock is not None:
            return float(self.clock.now())
        return float(c.execute(self.q["clock_now"]).fetchone()["now"])

    def _lim_waits(self, c: Any, now: float, waits: list[dict[str, Any]]) -> set[int]:
        # One statement for the batch (arrays of each field); it returns the ids it applied to.
        params: dict[str, Any] = {f: [w[f] for w in waits] for f in _WAIT_FIELDS}
        params["now"] = now
        return {r["id"] for r in c.execute(self.q["limiter_job_wait"], params).fetchall()}
