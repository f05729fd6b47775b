"""The review path of the dead-letter queue: list, replay, discard, purge.

The dead-letter queue is a state (``dead``), not a second queue: a dead job keeps its key, its
arguments, its reason and every attempt. Replay and discard are guarded by the state they expect,
so two people replaying the same job at once execute it once.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from firesafe.clock import to_timestamp
from firesafe.deadletters.audit import actor_of, default_actor, reason_of
from firesafe.errors import InvalidInput
from firesafe.models import Job
from firesafe.states import State
from firesafe.store.base import DeadFilter, JobFilter

if TYPE_CHECKING:
    from firesafe.app import App

CHUNK = 500
#: The reason a key is skipped when its job is gone (purged or pruned) by the time of the move.
NOT_FOUND = "not found"


@dataclass(frozen=True)
class ReviewResult:
    """What a replay or discard did (or, with ``dry_run``, would do).

    Every key asked for by name ends up in ``keys`` or in ``skipped``; ``reasons`` says why each
    skipped key was left alone: the state its job was in (``running``, ``succeeded``, ...), or
    ``not found`` when the job was deleted meanwhile. ``actor`` and ``reason`` are what the jobs'
    events record (None in a dry run).
    """

    keys: list[str]
    dry_run: bool
    reasons: dict[str, str] = field(default_factory=dict)  # skipped key -> why, in the order asked
    actor: str | None = None
    reason: str | None = None

    @property
    def skipped(self) -> list[str]:
        """Keys asked for or matched, but not in a state the action applies to."""
        return list(self.reasons)

    @property
    def count(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class DeadLetterPage:
    """One page of the dead letters, the last to die first: its jobs, how many match the filters in
    all, and the cursor of the next page (None: this is the last one)."""

    items: list[Job]
    total: int
    next: str | None


def encode_cursor(after: tuple[float, int]) -> str:
    """The text of a page cursor: where the previous page's last job died, and its id.

    >>> encode_cursor((1714521600.25, 42))
    '1714521600.25:42'
    """
    return f"{after[0]!r}:{after[1]}"


def decode_cursor(text: str) -> tuple[float, int]:
    """A page cursor read back from :func:`encode_cursor`'s text.

    >>> decode_cursor("1714521600.25:42")
    (1714521600.25, 42)
    >>> decode_cursor("soon")
    Traceback (most recent call last):
    ...
    firesafe.errors.InvalidInput: 'soon' is not a page cursor: pass the "next" of the previous page ...
    """
    at, sep, job_id = text.strip().rpartition(":")
    try:
        value = float(at)
        number = int(job_id)
    except ValueError:
        value, number = float("nan"), -1
    if not sep or value != value or value in (float("inf"), float("-inf")) or number < 0:
        raise InvalidInput(f"{text[:80]!r} is not a page cursor: pass the \"next\" of the previous page "
                           "(like 1714521600.25:42)")
    return value, number


def _ts(value: datetime | float | None) -> float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    return to_timestamp(value)


class DeadLetters:
    """``app.dlq``: the dead letters, listed the last to die first, and the actions on them. Every
    action records who did it (``actor``, default :func:`default_actor`) and why (``reason``)."""

    def __init__(self, app: App) -> None:
        self._app = app

    @staticmethod
    def _dead(*, job: str | None = None, error: str | None = None, since: datetime | float | None = None,
              until: datetime | float | None = None, queue: str | None = None, reason: str | None = None,
              after: str | tuple[float, int] | None = None, limit: int = 100, offset: int = 0) -> DeadFilter:
        if not isinstance(limit, int) or limit < 1:
            raise InvalidInput("limit must be at least 1")
        if not isinstance(offset, int) or offset < 0:
            raise InvalidInput("offset must be a whole number >= 0")
        cursor = decode_cursor(after) if isinstance(after, str) else after
        return DeadFilter(name=job, queue=queue, error_type=error, reason=reason, since=_ts(since), until=_ts(until),
                          after=cursor, limit=limit, offset=offset)

    def list(self, job: str | None = None, error: str | None = None, since: datetime | float | None = None,
             until: datetime | float | None = None, queue: str | None = None, limit: int = 100,
             offset: int = 0, *, reason: str | None = None, after: str | None = None) -> list[Job]:
        """Dead jobs, the last to die first, optionally filtered by job name, error type, queue, reason
        (``exhausted``, ``permanent``, ...) and time of death; a page at ``offset`` or after the
        cursor ``after`` (see :meth:`page`)."""
        return self._app.store.dead_list(self._dead(job=job, error=error, since=since, until=until, queue=queue,
                                                    reason=reason, after=after, limit=limit, offset=offset)).jobs

    def page(self, job: str | None = None, error: str | None = None, since: datetime | float | None = None,
             until: datetime | float | None = None, queue: str | None = None, *, reason: str | None = None,
             limit: int = 50, offset: int = 0, after: str | None = None) -> DeadLetterPage:
        """One page of :meth:`list`, with the total that matches the filters and the cursor of the
        next page: pass it as ``after`` to get that page (a cursor page stays right while jobs keep
        dying, where an offset would shift)."""
        filters: dict[str, Any] = {"job": job, "error": error, "since": since, "until": until, "queue": queue,
                                   "reason": reason}
        found = self._app.store.dead_list(self._dead(**filters, after=after, limit=limit, offset=offset))
        total = self._app.store.dead_count(self._dead(**filters))
        return DeadLetterPage(found.jobs, total, encode_cursor(found.next) if found.next else None)

    def count(self, job: str | None = None, error: str | None = None, since: datetime | float | None = None,
              until: datetime | float | None = None, queue: str | None = None, *, reason: str | None = None) -> int:
        """How many dead jobs match the filters (of :meth:`list`)."""
        return self._app.store.dead_count(self._dead(job=job, error=error, since=since, until=until, queue=queue,
                                                     reason=reason))

    def _jobs(self, keys: Sequence[str]) -> dict[str, Job]:
        """The jobs with these keys, by key (a key whose job does not exist is absent)."""
        found: dict[str, Job] = {}
        for i in range(0, len(keys), CHUNK):
            chunk = list(keys[i:i + CHUNK])
            found.update((j.key, j) for j in self._app.store.job_list(JobFilter(keys=chunk, limit=len(chunk))))
        return found

    def _targets(self, keys: Sequence[str] | None, states: tuple[State, ...],
                 **filters: Any) -> tuple[builtins.list[Job], dict[str, str]]:
        """The jobs to act on, and the keys asked for by name that are left alone, with why."""
        if keys is not None:
            keys = list(dict.fromkeys(keys))
            found = self._jobs(keys)
            missing = [k for k in keys if k not in found]
            if missing:
                raise InvalidInput(f"no job with key(s): {', '.join(sorted(missing)[:10])}")
            jobs = [found[k] for k in keys]
            return [j for j in jobs if j.state in states], {j.key: str(j.state) for j in jobs if j.state not in states}
        out: builtins.list[Job] = []
        after: tuple[float, int] | None = None
        while True:  # dead jobs by filter, every page
            page = self._app.store.dead_list(self._dead(**filters, after=after, limit=CHUNK))
            out += page.jobs
            if page.next is None:
                return out, {}
            after = page.next

    def _act(self, action: str, keys: Sequence[str] | None, dry_run: bool, actor: str | None, because: str | None,
             progress: Callable[[int, int], None] | None, **filters: Any) -> ReviewResult:
        states = (State.DEAD, State.CANCELLED) if action == "replay" else (State.DEAD,)
        targets, reasons = self._targets(keys, states, **filters)
        if dry_run:
            return ReviewResult([j.key for j in targets], True, reasons)
        who, why = actor_of(actor), reason_of(because)
        move = self._app.store.job_replay_many if action == "replay" else self._app.store.job_discard_many
        moved_ids: set[int] = set()
        for i in range(0, len(targets), CHUNK):
            chunk = targets[i:i + CHUNK]
            ids = [j.id for j in chunk]
            moved_ids |= set(move(ids, who) if why is None else move(ids, who, why))
            if progress:
                progress(min(i + CHUNK, len(targets)), len(targets))
        if action == "replay" and moved_ids:
            self._app.wake_workers()
            self._app._replayed([j.key for j in targets if j.id in moved_ids], who, why, "replay")
        lost = [j.key for j in targets if j.id not in moved_ids]  # moved on between the read and the move
        if lost:
            now = self._jobs(lost)
            reasons.update((k, str(now[k].state) if k in now else NOT_FOUND) for k in lost)
        return ReviewResult([j.key for j in targets if j.id in moved_ids], False, reasons, who, why)

    def replay(self, keys: Sequence[str] | None = None, *, job: str | None = None, error: str | None = None,
               since: datetime | float | None = None, until: datetime | float | None = None,
               queue: str | None = None, dead_reason: str | None = None, dry_run: bool = False,
               actor: str | None = None, reason: str | None = None,
               progress: Callable[[int, int], None] | None = None) -> ReviewResult:
        """Put dead jobs back in their queue under the same key, with a fresh attempt budget.

        Each job is replayed at most once per call, and concurrent replays of one job move it once.
        The history (attempts and events) stays; each job's ``replayed`` event records ``actor``
        and ``reason`` (why you replay; ``dead_reason`` filters the dead jobs by why they died).
        """
        return self._act("replay", keys, dry_run, actor, reason, progress, job=job, error=error, since=since,
                         until=until, queue=queue, reason=dead_reason)

    def discard(self, keys: Sequence[str] | None = None, *, job: str | None = None, error: str | None = None,
                since: datetime | float | None = None, until: datetime | float | None = None,
                queue: str | None = None, dead_reason: str | None = None, dry_run: bool = False,
                actor: str | None = None, reason: str | None = None,
                progress: Callable[[int, int], None] | None = None) -> ReviewResult:
        """Take dead jobs out of the dead letters (they become ``cancelled``, reason ``discarded``);
        each job's ``discarded`` event records ``actor`` and ``reason`` (why)."""
        return self._act("discard", keys, dry_run, actor, reason, progress, job=job, error=error, since=since,
                         until=until, queue=queue, reason=dead_reason)

    def purge(self, older_than: timedelta | float = timedelta(days=30), *, actor: str | None = None,
              reason: str | None = None) -> int:
        """Delete dead jobs that died more than ``older_than`` ago; their keys become free. The
        purge (who, why, how many) is recorded in the audit log, since the jobs' events go with them."""
        seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else float(older_than)
        if seconds < 0:
            raise InvalidInput("older_than must not be negative")
        who, why = actor_of(actor), reason_of(reason)
        total = 0
        while True:
            n = self._app.store.job_delete_finished(State.DEAD, seconds)
            total += n
            if n == 0:
                break
        self._app.store.audit_record("dlq_purge", None, who, why, {"older_than": seconds, "deleted": total})
        return total


__all__ = ["DeadLetterPage", "DeadLetters", "ReviewResult", "decode_cursor", "default_actor", "encode_cursor"]
