"""Pruning, as a worker's background duty: one process of the fleet at a time (the ``pruner`` leader
lease), in a thread of its own (a prune of a million jobs never holds up a claim loop), and paced:
after each batch it pauses so that it works at most ``App.prune_pace`` of the time, leaving the
store's capacity to the workers (docs/operations.md, "Retention and pruning")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from firesafe.errors import StoreError
from firesafe.retries.duty import Duty

if TYPE_CHECKING:
    from firesafe.app import App


class PrunerDuty(Duty):
    """Every ``prune_interval``, if this worker holds (or takes) the ``pruner`` lease, run
    :meth:`App.prune` paced by ``App.prune_pace``; a store fault backs off (up to 30 s) and tries
    again. Stopping it stops the prune between two batches and gives the lease up."""

    name = "pruner"
    fault_cap = 30.0

    def __init__(self, app: App, holder: str) -> None:
        self.app = app
        self.holder = holder
        super().__init__()

    def first_wait(self) -> float:
        # At most 10 s: a worker starting up, or a short burst run, does its jobs first.
        return min(self.app.prune_interval, 10.0)

    def round(self) -> float:
        self.app.prune(leader=self.holder, pace=self.app.prune_pace, stop=self._stop)
        return self.app.prune_interval

    def after_bug(self) -> float:
        return self.app.prune_interval

    def released(self) -> None:
        try:
            self.app.store.leader_release("pruner", self.holder)
        except StoreError:
            pass  # it expires by itself


__all__ = ["PrunerDuty"]
