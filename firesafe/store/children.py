"""Child jobs in the store, written once for both dialects (queries: ``store/sql/<dialect>/children.sql``).

A parent's row counts its children not yet ended (``children_pending``). The count goes up in the
transaction that inserts children (:meth:`ChildrenCommon.job_spawn_many`) and down in the
transaction that ends one (a finish, a rescue, a cancel: :meth:`ChildrenCommon._settle`; on
PostgreSQL a finish's own statement, job_finish, does it), and the decrement that reaches 0 wakes the
parent if it is parked for its children. Each child's end is counted once (its ``settled`` mark), so
a path that may see it twice changes nothing the second time. Every writer takes a child's row before
its parent's (a spawn inserts its children, then holds the parent), so none can deadlock another.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from firesafe.errors import InvalidInput
from firesafe.models import Job
from firesafe.states import FINISHED, State
from firesafe.store.base import InsertParams, dedupe_batch, in_batch_order
from firesafe.store.driver import StorePart


class _ParentGone(Exception):
    """A spawn's parent no longer runs under the spawning attempt's lease: its inserts are undone."""


class ChildrenCommon(StorePart):
    """The children part of a store's core: spawning, counting ends off, waking, reading."""

    def _insert_in(self, c: Any, unique: list[InsertParams], parent_id: int | None = None) -> dict[str, Job]:
        """Insert ``unique`` (deduplicated) in the open transaction ``c``, the new rows naming
        ``parent_id`` as their parent; the jobs by key (see ``job_insert_many``: stored ones for keys
        taken, ``created`` True for new ones)."""
        raise NotImplementedError

    def _note_woken(self, c: Any, ids: Sequence[int], now: float | None) -> None:
        """Record a ``woken`` event for each parent its count-down woke (PostgreSQL's query does it)."""

    def _note_spawned(self, c: Any, parent_id: int, detail: str, now: float | None) -> None:
        """Record the ``spawned`` event (PostgreSQL's job_children_add does it)."""

    # -- spawning ----------------------------------------------------------------------------
    def job_spawn_many(self, parent_id: int, token: str, items: Sequence[InsertParams],
                       step: str | None = None) -> list[Job] | None:
        unique = dedupe_batch(items)
        now = self._now()
        try:
            with self._tx() as c:
                # The children first, then their parent's row (fenced by the attempt's lease): the
                # order a finish takes a child's row and then its parent's to count it off, so the
                # two cannot deadlock (a spawn that meets a child being finished waits for it).
                stored = self._insert_in(c, unique, parent_id) if unique else {}
                if c.execute(self.q["job_spawn_parent"], {"parent_id": parent_id, "token": token}).fetchone() is None:
                    raise _ParentGone
                self._count_spawned(c, parent_id, stored, step, now)
        except _ParentGone:
            return None
        for job in stored.values():
            job.parent_id = parent_id
        return in_batch_order(items, stored)

    def _count_spawned(self, c: Any, parent_id: int, stored: dict[str, Job], step: str | None,
                       now: float | None) -> None:
        """Count the children a spawn created on their parent and note the spawn, in its transaction
        ``c``; a key the spawn met that belongs to a job not this parent's child is refused."""
        new = [j.id for j in stored.values() if j.created]
        for job in stored.values():
            if not job.created and job.parent_id != parent_id:
                raise InvalidInput(f"key {job.key!r} is taken by a job that is not a child of this job; "
                                   "give each child a key of its own (or leave key= out)")
        if new:
            detail = json.dumps({"step": step, "children": len(new)})
            c.execute(self.q["job_children_add"], {"parent_id": parent_id, "n": len(new), "now": now,
                                                   "detail": detail})
            self._note_spawned(c, parent_id, detail, now)

    def job_children_wait(self, parent_id: int, token: str, keys: Sequence[str], at_least: int) -> int | None:
        with self._tx() as c:
            params = {"parent_id": parent_id, "token": token}
            row = c.execute(self.q["job_children_wait"], params).fetchone()
            if row is None:
                return None
            ended = sum(int(c.execute(self.q["job_children_ended"],
                                      {"parent_id": parent_id, "keys": part}).fetchone()["n"])
                        for part in self._key_lists(keys))
            need = max(0, at_least - ended)
            wake_at = max(0, int(row["children_pending"]) - need) if need else 0
            c.execute(self.q["job_children_wake_set"], {"parent_id": parent_id, "wake_at": wake_at})
        return ended

    # -- counting ends -----------------------------------------------------------------------
    def _settle(self, c: Any, ids: Iterable[int], now: float | None) -> None:
        """Count the children among ``ids`` that have ended off their parents, once each; wake the
        parked parents whose count reaches 0. In the caller's transaction ``c``."""
        ids = list(ids)
        if not ids:
            return
        parents = [r["parent_id"] for r in c.execute(self.q["job_children_settle"],
                                                     {"ids": self._list(ids)}).fetchall()]
        if not parents:
            return
        rows = c.execute(self.q["job_parents_count_down"], {
            "parents": self._list(sorted(parents)), "now": now, "channel": getattr(self, "channel", None),
        }).fetchall()
        woke = [r["id"] for r in rows if r["woke"]]
        if woke:
            self._note_woken(c, woke, now)

    def _unsettle(self, c: Any, ids: Iterable[int]) -> None:
        """Count the children among ``ids`` that left an ended state (replay, rerun) on their parents again."""
        ids = list(ids)
        if not ids:
            return
        parents = [r["parent_id"] for r in c.execute(self.q["job_children_unsettle"],
                                                     {"ids": self._list(ids)}).fetchall()]
        if parents:
            c.execute(self.q["job_parents_count_up"], {"parents": self._list(sorted(parents))})

    def _recount(self, c: Any, query: str, moved: Sequence[int], now: float | None) -> None:
        """After a move by query (``MovesByQuery``) in transaction ``c``: count what it did to children
        on their parents (a cancel ends a child, a replay puts it back), and forget the wait records
        of a replayed parent so that its waits start their deadlines anew."""
        if not moved:
            return
        if query == "job_cancel_waiting":
            self._settle(c, moved, now)
        elif query == "job_replay":
            self._unsettle(c, moved)
            c.execute(self.q["step_delete_waits"], {"ids": self._list(moved)})

    # -- reading -----------------------------------------------------------------------------
    def job_children_counts(self, parent_id: int) -> dict[str, int]:
        return {r["state"]: int(r["n"]) for r in self._read("job_children_counts", {"parent_id": parent_id})}

    def job_children(self, parent_id: int, state: State | str | None = None, after: int = 0,
                     limit: int = 100) -> list[Job]:
        return [Job.from_row(r) for r in self._read("job_children_page", {
            "parent_id": parent_id, "state": None if state is None else str(state), "after": after,
            "limit": limit})]

    def job_get_by_id(self, job_id: int) -> Job | None:
        rows = self._read("job_by_id", {"id": job_id})
        return Job.from_row(rows[0]) if rows else None

    def job_outcomes(self, keys: Sequence[str]) -> dict[str, Job]:
        found: dict[str, Job] = {}
        for part in self._key_lists(keys):
            found.update((r["key"], Job.from_outcome_row(r)) for r in self._read("job_outcomes", {"keys": part}))
        return found

    #: Keys per statement of a read by keys (a parent's wait may name tens of thousands).
    KEYS_PER_READ = 5000

    def _key_lists(self, keys: Sequence[str]) -> Iterator[Any]:
        """``keys`` as the dialect's lists (``_list``) of at most :attr:`KEYS_PER_READ` each."""
        for start in range(0, len(keys), self.KEYS_PER_READ):
            yield self._list(keys[start:start + self.KEYS_PER_READ])

    def _children_ids(self, ids: Sequence[int], states: Sequence[State]) -> list[int]:
        if not ids:
            return []
        return [int(r["id"]) for r in self._read("job_children_ids", {
            "ids": self._list(ids), "states": self._list([str(s) for s in states])})]


#: The states a child's end is counted in.
ENDED = tuple(str(s) for s in FINISHED)

__all__ = ["ENDED", "ChildrenCommon"]
