"""The prefetch: how many jobs a worker claims beyond its free threads, and how many it claims at once.

Each batch of outcomes costs one commit (a disk flush on SQLite, a round trip and a WAL flush on
PostgreSQL). With short jobs that commit, not the jobs, sets the pace: claiming beyond the threads
saves more outcomes per commit, and a thread that frees up starts a waiting job at once instead of
after the next commit. A prefetched job waits behind the running ones, so the worker prefetches only
while their moving average is short (:attr:`Prefetch.below`), and gives back a job that waited
:attr:`Prefetch.wait` all the same (the worker's loop does, see ``Worker._withdraw``).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from typing import Any

from firesafe.models import Job, claim_rank

#: A prefetch sized by the pace (the default) holds at most this many jobs, running and waiting, or
#: twice the concurrency if that is more. The pace keeps it to what the threads run in about
#: ``Prefetch.below``, so only attempts well under a millisecond reach it (docs/operations.md).
HOLD = 512


class Prefetch:
    """The prefetch of one claim loop: its most (:attr:`most`, 0 when off) and the measured pace.

    ``most=None`` sizes it by the pace, from the concurrency up to :data:`HOLD` jobs held in all
    (shared by the ``lanes`` loops of a process); a number fixes it. ``off`` turns it off whatever
    was asked (an app with limiters, or with a job of a single attempt: see ``Worker.__init__``).
    """

    #: Prefetch only while attempts average less than this (seconds).
    below = 0.02
    #: A prefetched job that waited this long for a thread is given back for other workers (seconds).
    wait = 1.0

    def __init__(self, concurrency: int, most: int | None = None, *, lanes: int = 1, off: bool = False) -> None:
        self.concurrency = concurrency
        self.sized = most is None
        hold = HOLD // max(1, lanes)  # the loops of one process share it
        self.most = 0 if off else max(concurrency, hold - concurrency) if most is None else max(0, most)
        self.pace: float | None = None  # moving average of attempt durations (seconds)

    def want(self) -> int:
        """How many jobs to claim beyond the free threads now: 0 unless attempts are short.

        How many: :attr:`most` if it was given. By default, as many as the threads run in about
        :attr:`below` at the current pace (k waiting jobs wait about k x pace / concurrency for the
        last to start), at least the concurrency and at most :attr:`most`.

        >>> p = Prefetch(4)
        >>> p.want()  # nothing measured yet
        0
        >>> p.note(0.001); p.want()  # 4 threads run 80 attempts of 1 ms in 20 ms
        80
        >>> p.note(0.5); p.want()  # the average (each attempt weighs a fifth) is over 20 ms now
        0
        """
        pace = self.pace
        if not self.most or pace is None or pace >= self.below:
            return 0
        if not self.sized:
            return self.most
        within = int(self.concurrency * self.below / max(pace, 1e-6))
        return max(self.concurrency, min(self.most, within))

    def note(self, seconds: float) -> None:
        """Measure an attempt that ended after ``seconds``: each attempt weighs a fifth."""
        self.pace = seconds if self.pace is None else self.pace + 0.2 * (seconds - self.pace)

    def waited(self, seconds: float) -> None:
        """A prefetched job waited ``seconds`` for a thread and was given back: the attempts ahead
        are at least that long, so stop prefetching (the worker does not take the same job back
        while its threads are still busy)."""
        self.pace = max(self.pace or 0.0, seconds, self.below)


def claim_size(want: int, staying: int, batch: int, *, depth: int = 1, reserved: int = 0,
               concurrency: int = 1) -> int:
    """How many jobs the next claim asks for: what the threads and the prefetch allow (``want``),
    less the attempts that stay and what the claims in flight may fill (``reserved``), at most a
    ``batch``. With a pipeline of ``depth`` transactions, at most a share of the whole (one
    transaction's worth), so that the next claim has slots to fill while this one is in flight: a
    claim of everything would leave the pipeline's other committer idle, the loop and the store
    taking turns again. A share is never less than the threads, so a worker that prefetches nothing
    claims as without a pipeline.

    >>> claim_size(want=512, staying=0, batch=512)  # no pipeline: the whole hold
    512
    >>> claim_size(want=512, staying=0, batch=512, depth=2, concurrency=8)  # a pipeline of 2: half
    256
    >>> claim_size(want=512, staying=0, batch=512, depth=2, reserved=300, concurrency=8)
    212
    >>> claim_size(want=8, staying=8, batch=8)  # every thread busy, nothing to prefetch
    0
    """
    free = min(want - staying, batch) - reserved
    if depth > 1:
        free = min(free, max(concurrency, -(-want // depth)))
    return max(0, free)


class Waiting:
    """The claimed jobs waiting for a thread: each thread that frees up takes the one that ranks first
    (:func:`~firesafe.models.claim_rank`, then run_at, then id), the order a claim takes them in. One
    claim's jobs arrive in that order already; this keeps it across claims, whose replies may come
    in another order (a pipeline's transactions, a limiter's give-backs), so a job of a higher
    priority claimed later still starts before the prefetched ones of a lower.

    >>> w, ran = Waiting(), []
    >>> from datetime import UTC, datetime
    >>> def job(id_, priority):
    ...     return Job(id_, "k", "n", "q", None, [], {}, [], 0, 1, 0, 0, 0, datetime.fromtimestamp(100, UTC),
    ...                datetime.fromtimestamp(100, UTC), datetime.fromtimestamp(100, UTC), None, priority=priority)
    >>> for id_, p in ((1, 0), (2, 0), (3, 5)):
    ...     w.put(job(id_, p), lambda id_=id_: ran.append(id_))
    >>> for _ in range(3):
    ...     w.take()()
    >>> ran
    [3, 1, 2]
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, float, int, int, Callable[[], Any]]] = []
        self._lock = threading.Lock()
        self._seq = itertools.count()  # a job given back and claimed again may be in twice: never compared

    def put(self, job: Job, task: Callable[[], Any]) -> None:
        at = job.run_at.timestamp() if job.run_at is not None else 0.0
        entry = (claim_rank(at, job.priority), at, job.id, next(self._seq), task)
        with self._lock:
            heapq.heappush(self._heap, entry)

    def take(self) -> Callable[[], Any]:
        """The task of the job that ranks first; one is there for each :meth:`put` not yet taken."""
        with self._lock:
            return heapq.heappop(self._heap)[-1]
