"""The limits part of the postgres store: a mixin of the store class (queries in store/sql/postgres/limits.sql)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from firesafe.limits.store import LimitsStore
from firesafe.store.driver import PostgresPart

_WAIT_FIELDS = ("job_id", "token", "seq", "delay", "reason", "error_type", "message", "traceback", "detail")


class LimitsPostgres(LimitsStore, PostgresPart):
    """Store methods of the limits part; mixed into the postgres store class."""

    @contextmanager
    def _lim_tx(self) -> Iterator[Any]:
        with self._conn() as c, c.transaction():
            yield c

    def _lim_now(self, c: Any) -> float:
        if self.clock is not None:
            return float(self.clock.now())
        return float(c.execute(self.q["clock_now"]).fetchone()["now"])

    def _lim_exec(self, c: Any, name: str, params: Mapping[str, Any]) -> Any:
        return c.execute(self.q[name], dict(params))

    def _lim_exec_many(self, c: Any, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        with c.cursor() as cur:  # psycopg pipelines executemany: one round trip for the batch
            cur.executemany(self.q[name], [dict(r) for r in rows])

    def _lim_list(self, values: Sequence[Any]) -> Any:
        return list(values)

    def _lim_waits(self, c: Any, now: float, waits: list[dict[str, Any]]) -> set[int]:
        params: dict[str, Any] = {f: [w[f] for w in waits] for f in _WAIT_FIELDS}
        params["now"] = now
        return {r["id"] for r in c.execute(self.q["limiter_job_wait"], params).fetchall()}

    def _lim_read(self, name: str, params: Mapping[str, Any]) -> list[Any]:
        return self._read(name, dict(params))
