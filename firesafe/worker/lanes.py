"""Several claim loops in one worker process (``lanes=N``; one by default).

A worker's loop takes turns with its store. It sends a batch's outcomes and the next claim (one
transaction, one round trip), waits for the reply, then starts the claimed jobs and concludes the
outcomes that came back, in Python, while the store waits for its next request. Two loops in the
same process, each with its share of the threads and a connection of its own, fill each other's
gaps: one loop's transaction runs while the other loop's Python work runs (the leader's LISTEN
connection, on PostgreSQL, wakes them all when a job arrives). That can only help on
PostgreSQL (SQLite has one writer at a time), in one process of very short attempts; each loop
costs a store connection (docs/operations.md has the measurements).

The loops are ordinary :class:`~firesafe.worker.Worker` objects. The first one leads: it runs the
background duties (alert delivery, schedules), rescues expired leases, prunes, and takes part in
quarantine. A suspect (a job that lost its worker before, see docs/reliability.md) runs alone in
the *process*, not only in its loop, so :class:`LaneGroup` keeps the other loops from claiming
while the leader waits for them to finish, and while the suspect runs.

A store pipeline (firesafe/worker/pipeline.py) keeps transactions in flight within one loop instead;
a lane's loop has none. Why both stay is said there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from firesafe.worker.worker import Worker, WorkerStats, install_signal_handlers

if TYPE_CHECKING:
    from firesafe.app import App
    from firesafe.store.base import Claimed


class LaneGroup:
    """What the claim loops of one process share: whether the leader needs the process to itself."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.workers: list[Worker] = []
        self._lock = threading.Lock()
        self._alone = False  # the leader runs a suspect, or waits for the others to finish first
        self._claiming = 0  # other loops in the middle of a claim (their jobs not yet in _running)

    def claim_beside(self, take: Callable[[], list[Claimed]]) -> list[Claimed]:
        """A loop other than the leader claims with ``take``, unless the leader needs the process."""
        with self._lock:
            if self._alone:
                return []
            self._claiming += 1
        try:
            return take()
        finally:
            with self._lock:
                self._claiming -= 1

    def others_busy(self, leader: Worker) -> bool:
        """Whether another loop claims or has attempts in the process (even ones concluded as timed
        out: their threads may still be running them)."""
        return bool(self._claiming) or any(w.holds_slots() for w in self.workers if w is not leader)

    def others_live(self, worker: Worker) -> bool:
        """Whether another loop still has work of its own: an attempt to conclude, or outcomes to save
        (not attempts concluded as timed out: a thread stuck in one would keep a burst from ending)."""
        return any(w.busy() for w in self.workers if w is not worker)

    def clear_for_suspect(self, leader: Worker) -> bool:
        """The leader wants to run a suspect: the others claim nothing from now on; True once they
        have nothing left in the process."""
        with self._lock:
            self._alone = True
            return not self.others_busy(leader)

    def wake_all(self) -> None:
        """End every loop's wait (a job arrived: the leader's LISTEN connection calls this)."""
        for w in self.workers:
            w.wake()

    def suspect_done(self) -> None:
        """The leader runs no suspect and waits for none: the others claim again (woken now)."""
        if self._alone:
            with self._lock:
                self._alone = False
            self.wake_all()


def shares(total: int | None, n: int) -> list[int | None]:
    """Split ``total`` (threads, a fixed prefetch, a batch) over ``n`` loops; None stays None.

    >>> shares(8, 2), shares(7, 2), shares(None, 2)
    ([4, 4], [4, 3], [None, None])
    """
    if total is None:
        return [None] * n
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


class Lanes:
    """``lanes`` claim loops sharing one process: the threads (and a fixed prefetch or batch) are
    split between them; :meth:`run` returns their statistics added up."""

    def __init__(self, app: App, queues: Sequence[str] | None = None, *, lanes: int, concurrency: int = 8,
                 prefetch: int | None = None, batch: int | None = None, **options: Any) -> None:
        n = max(1, min(lanes, concurrency))
        group = LaneGroup(n)
        threads, prefetches, batches = shares(concurrency, n), shares(prefetch, n), shares(batch, n)
        group.workers = [Worker(app, queues, concurrency=threads[i] or 1, prefetch=prefetches[i],
                                batch=batches[i] or None, group=group, lane=i, **options) for i in range(n)]
        self.group, self.workers = group, group.workers
        self.grace = self.workers[0].grace
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()
        for w in self.workers:
            w.stop()

    def wake(self) -> None:
        self.group.wake_all()

    def install_signal_handlers(self) -> None:
        install_signal_handlers(self.stop, self.grace)

    def run(self) -> WorkerStats:
        errors: list[BaseException] = []

        def lane(w: Worker) -> None:
            try:
                w.run()
            except BaseException as exc:  # a bug in one loop stops them all, and is raised by run()
                errors.append(exc)
                self.stop()

        threads = [threading.Thread(target=lane, args=(w,), name=f"firesafe-lane-{w.lane}", daemon=True)
                   for w in self.workers[1:]]
        for t in threads:
            t.start()
        try:
            lane(self.workers[0])
        finally:
            for t in threads:
                t.join()
        if errors:
            raise errors[0]
        return added(w.stats for w in self.workers)


def added(all_stats: Any) -> WorkerStats:
    """The statistics of several loops as one."""
    total = WorkerStats()
    for s in all_stats:
        for name, value in vars(s).items():
            if name == "by_outcome":
                for outcome, n in value.items():
                    total.by_outcome[outcome] = total.by_outcome.get(outcome, 0) + n
            else:
                setattr(total, name, getattr(total, name) + value)
    return total
