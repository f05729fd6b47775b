"""The limits part of the sqlite store: a mixin of the store class (queries in store/sql/sqlite/limits.sql)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from firesafe.limits.store import LimitsStore
from firesafe.store import queries
from firesafe.store.driver import SQLitePart


class LimitsSQLite(LimitsStore, SQLitePart):
    """Store methods of the limits part; mixed into the sqlite store class."""

    @contextmanager
    def _lim_tx(self) -> Iterator[Any]:
        with self._tx() as c:
            yield c

    def _lim_now(self, c: Any) -> float:
        return float(self.now())

    def _lim_exec(self, c: Any, name: str, params: Mapping[str, Any]) -> Any:
        return c.execute(queries.load("sqlite")[name], dict(params))

    def _lim_exec_many(self, c: Any, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        c.executemany(queries.load("sqlite")[name], [dict(r) for r in rows])

    def _lim_list(self, values: Sequence[Any]) -> Any:
        return json.dumps(list(values))

    def _lim_waits(self, c: Any, now: float, waits: list[dict[str, Any]]) -> set[int]:
        q = queries.load("sqlite")
        applied: set[int] = set()
        for w in waits:
            p = {**w, "now": now}
            if c.execute(q["limiter_job_wait"], p).rowcount == 1:  # it took the attempt back: given_back 1
                c.execute(q["attempt_close"], {**p, "given_back": 1, "outcome": "deferred"})
                applied.add(w["job_id"])
        return applied

    def _lim_read(self, name: str, params: Mapping[str, Any]) -> list[Any]:
        return self._read(name, dict(params))
