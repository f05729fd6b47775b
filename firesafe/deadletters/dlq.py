"""The review path of the dead-letter queue: list, replay, discard, purge.

The dead-letter queue is a state (``dead``), not a second queue: a dead job keeps its key, its
arguments, its reason and every attempt. Replay and discard are guarded by the state they expect,
so two people replaying the same job at once execute it once.
"""

from __future__ import annotations

import getpass
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from firesafe.clock import to_timestamp
from firesafe.errors import InvalidInput
from firesafe.models import Job
from firesafe.states import State
from firesafe.store.base import JobFilter

if TYPE_CHECKING:
    from firesafe.app import App

CHUNK = 500
#: The reason a key is skipped when its job is gone (purged or pruned) by the time of the move.
NOT_FOUND = "not found"


def default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class ReviewResult:
    """What a replay or discard did (or, with ``dry_run``, would do).

    Every key asked for by name ends up in ``keys`` or in ``skipped``; ``reasons`` says why each
    skipped key was left alone: the state its job was in (``running``, ``succeeded``, ...), or
    ``not found`` when the job was deleted meanwhile.
    """

    keys: list[str]
    dry_run: bool
    reasons: dict[str, str] = field(default_factory=dict)  # skipped key -> why, in the order asked

    @property
    def skipped(self) -> list[str]:
        """Keys asked for or matched, but not in a state the action applies to."""
        return list(self.reasons)

    @property
    def count(self) -> int:
        return len(self.keys)


def _ts(value: datetime | float | None) -> float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    return to_timestamp(value)


class DeadLetters:
    def __init__(self, app: App) -> None:
        self._app = app

    def _filter(self, *, job: str | None, error: str | None, since: datetime | float | None,
                until: datetime | float | None, queue: str | None, state: str = State.DEAD,
                keys: Sequence[str] | None = None, limit: int = 100, offset: int = 0) -> JobFilter:
        if limit < 1:
            raise InvalidInput("limit must be at least 1")
        return JobFilter(state=state, name=job, queue=queue, error_type=error, since=_ts(since),
                         until=_ts(until), keys=keys, limit=limit, offset=offset)

    def list(self, job: str | None = None, error: str | None = None, since: datetime | float | None = None,
             until: datetime | float | None = None, queue: str | None = None, limit: int = 100,
             offset: int = 0) -> list[Job]:
        """Dead jobs, newest first, optionally filtered by job name, error type, queue and time."""
        return self._app.store.job_list(self._filter(job=job, error=error, since=since, until=until,
                                                     queue=queue, limit=limit, offset=offset))

    def count(self, job: str | None = None, error: str | None = None, since: datetime | float | None = None,
              until: datetime | float | None = None, queue: str | None = None) -> int:
        return self._app.store.job_count(self._filter(job=job, error=error, since=since, until=until,
                                                      queue=queue))

    def _jobs(self, keys: Sequence[str]) -> dict[str, Job]:
        """The jobs with these keys, by key (a key whose job does not exist is absent)."""
        found: dict[str, Job] = {}
        for i in range(0, len(keys), CHUNK):
            chunk = list(keys[i:i + CHUNK])
            found.update((j.key, j) for j in self._app.store.job_list(JobFilter(keys=chunk, limit=len(chunk))))
        return found

    def _targets(self, keys: Sequence[str] | None, states: tuple[State, ...],
                 **filters: object) -> tuple[list[Job], dict[str, str]]:
        """The jobs to act on, and the keys asked for by name that are left alone, with why."""
        if keys is not None:
            keys = list(dict.fromkeys(keys))
            found = self._jobs(keys)
            missing = [k for k in keys if k not in found]
            if missing:
                raise InvalidInput(f"no job with key(s): {', '.join(sorted(missing)[:10])}")
            jobs = [found[k] for k in keys]
            return [j for j in jobs if j.state in states], {j.key: str(j.state) for j in jobs if j.state not in states}
        out: list[Job] = []
        while True:  # dead jobs by filter, every page
            page = self._app.store.job_list(self._filter(limit=CHUNK, offset=len(out), **filters))  # type: ignore[arg-type]
            out += page
            if len(page) < CHUNK:
                return out, {}

    def _act(self, action: str, keys: Sequence[str] | None, dry_run: bool, actor: str | None,
             progress: Callable[[int, int], None] | None, **filters: object) -> ReviewResult:
        states = (State.DEAD, State.CANCELLED) if action == "replay" else (State.DEAD,)
        targets, reasons = self._targets(keys, states, **filters)
        if dry_run:
            return ReviewResult([j.key for j in targets], True, reasons)
        actor = actor or default_actor()
        move = self._app.store.job_replay_many if action == "replay" else self._app.store.job_discard_many
        moved_ids: set[int] = set()
        for i in range(0, len(targets), CHUNK):
            chunk = targets[i:i + CHUNK]
            moved_ids |= set(move([j.id for j in chunk], actor))
            if progress:
                progress(min(i + CHUNK, len(targets)), len(targets))
        if action == "replay" and moved_ids:
            self._app._wake_workers()
        lost = [j.key for j in targets if j.id not in moved_ids]  # moved on between the read and the move
        if lost:
            now = self._jobs(lost)
            reasons.update((k, str(now[k].state) if k in now else NOT_FOUND) for k in lost)
        return ReviewResult([j.key for j in targets if j.id in moved_ids], False, reasons)

    def replay(self, keys: Sequence[str] | None = None, *, job: str | None = None, error: str | None = None,
               since: datetime | float | None = None, until: datetime | float | None = None,
               queue: str | None = None, dry_run: bool = False, actor: str | None = None,
               progress: Callable[[int, int], None] | None = None) -> ReviewResult:
        """Put dead jobs back in their queue under the same key, with a fresh attempt budget.

        Each job is replayed at most once per call, and concurrent replays of one job move it once.
        The history (attempts and events) stays; the replay is recorded with ``actor``.
        """
        return self._act("replay", keys, dry_run, actor, progress, job=job, error=error, since=since,
                         until=until, queue=queue)

    def discard(self, keys: Sequence[str] | None = None, *, job: str | None = None, error: str | None = None,
                since: datetime | float | None = None, until: datetime | float | None = None,
                queue: str | None = None, dry_run: bool = False, actor: str | None = None,
                progress: Callable[[int, int], None] | None = None) -> ReviewResult:
        """Take dead jobs out of the dead letters (they become ``cancelled``, reason ``discarded``)."""
        return self._act("discard", keys, dry_run, actor, progress, job=job, error=error, since=since,
                         until=until, queue=queue)

    def purge(self, older_than: timedelta | float = timedelta(days=30)) -> int:
        """Delete dead jobs that died more than ``older_than`` ago; their keys become free."""
        seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else float(older_than)
        if seconds < 0:
            raise InvalidInput("older_than must not be negative")
        total = 0
        while True:
            n = self._app.store.job_delete_finished(State.DEAD, seconds)
            total += n
            if n == 0:
                return total
