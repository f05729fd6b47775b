"""Pruning, as a worker's background duty: one process of the fleet at a time (the ``pruner`` leader
lease), in a thread of its own (a prune of a million jobs never holds up a claim loop), and paced:
after each batch it pauses so that it works at most ``App.prune_pace`` of the time, leaving the
store's capacity to the workers (docs/operations.md, "Retention and pruning")."""

from __future__ import annotations

import logging
import random
import threading
from typing import TYPE_CHECKING

from firesafe.errors import StoreError
from firesafe.retries.backoff import Backoff

if TYPE_CHECKING:
    from firesafe.app import App

log = logging.getLogger("firesafe.worker")


class PrunerDuty:
    """Every ``prune_interval``, if this worker holds (or takes) the ``pruner`` lease, run
    :meth:`App.prune` paced by ``App.prune_pace``; a store fault backs off and tries again."""

    def __init__(self, app: App, holder: str) -> None:
        self.app = app
        self.holder = holder
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="firesafe-pruner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        faults = 0
        backoff = Backoff(base=0.5, factor=2.0, cap=30.0, jitter="equal")
        rng = random.Random()
        # The first prune waits a while (at most 10 s): a worker starting up, or a short burst run,
        # does its jobs first.
        self._stop.wait(min(self.app.prune_interval, 10.0))
        while not self._stop.is_set():
            try:
                self.app.prune(leader=self.holder, pace=self.app.prune_pace, stop=self._stop)
                faults = 0
                pause = self.app.prune_interval
            except StoreError as exc:
                faults += 1
                pause = backoff.delay(faults, rng.random())
                log.error("pruner: store fault (%s); retrying in %.1fs", exc, pause)
            except Exception:  # a bug: keep the worker alive, try again at the next interval
                log.exception("prune failed")
                pause = self.app.prune_interval
            self._stop.wait(pause)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop between two batches (a batch in flight ends first) and give the lease up."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        try:
            self.app.store.leader_release("pruner", self.holder)
        except StoreError:
            pass  # it expires by itself


__all__ = ["PrunerDuty"]
