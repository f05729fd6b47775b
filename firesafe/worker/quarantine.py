"""Quarantine: a job that lost its worker before (a suspect of killing it) runs alone.

One worker per set of queues holds the isolation lease (a leader lease in the store); only it claims
suspects, one at a time, with nothing else running in its process, so a poison job cannot take the
jobs beside it down with it: they never share its process. Every worker keeps a suspect it claimed
(one that lost a worker since its claim) alone until it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from firesafe.store.contract import Store

Key = tuple[int, int]  # an attempt's (job id, run)


class Quarantine:
    """The quarantine of one claim loop: whether it holds the isolation lease, and the suspects it runs."""

    def __init__(self, store: Store, queues: Sequence[str], worker_id: str, ttl: float, poll_interval: float,
                 monotonic: Callable[[], float]) -> None:
        self.store = store
        self.queues = tuple(queues)
        self.worker_id = worker_id
        self.ttl = ttl
        self.poll_interval = poll_interval
        self.monotonic = monotonic
        self.name = "isolator:" + ",".join(sorted(self.queues))
        self.isolating = False  # this loop holds the isolation lease
        self.due = False  # suspects wait in these queues (as seen when the lease was last renewed)
        self.probe_at = 0.0  # when an isolating loop with nothing running may look for suspects again
        self.suspects: set[Key] = set()  # the attempts of suspects this loop runs

    def check(self) -> None:
        """Take or renew the isolation lease (with the rescues, so at least once a rescue interval);
        holding it, see whether suspects wait."""
        self.isolating = self.store.leader_acquire(self.name, self.worker_id, self.ttl)
        if self.isolating:
            self.due = self.store.job_pending(self.queues).suspects > 0

    def started(self, key: Key, lost: int) -> None:
        """An attempt starts here; a job lost ``lost`` times before is a suspect."""
        if lost > 0:
            self.suspects.add(key)

    def holding(self, running: Container[Key], leaving: Container[Key]) -> bool:
        """Whether a suspect still runs here (nearly never): then nothing else is claimed beside it.
        Those no longer ``running`` are forgotten; those ``leaving`` (their outcome is being saved)
        no longer count."""
        if not self.suspects:
            return False
        self.suspects = {k for k in self.suspects if k in running}
        return any(k not in leaving for k in self.suspects)

    def wants(self, idle: bool) -> bool:
        """Whether to claim a suspect now: this loop holds the lease and suspects wait, or it is
        ``idle`` and may look (at most once a poll interval, see :meth:`none_found`)."""
        return self.isolating and (self.due or (idle and self.monotonic() >= self.probe_at))

    def none_found(self) -> None:
        """A claim of suspects found none. Looking for suspects that are not there scans the waiting
        jobs (no index has ``lost``): a worker draining a backlog is idle between every two batches,
        so look once per poll."""
        self.due = False
        self.probe_at = self.monotonic() + self.poll_interval

    def release(self) -> None:
        """Give the isolation lease back (the worker stops)."""
        if self.isolating:
            self.store.leader_release(self.name, self.worker_id)
            self.isolating = False
