"""A worker's background duty: one call a round in a thread of its own, a store fault retried with
backoff. The worker's pruner (firesafe/worker/pruner.py) and its scheduler
(firesafe/schedules/scheduler.py) are duties: a slow round never holds up a claim loop, and a
fault or a bug in one never stops the worker."""

from __future__ import annotations

import logging
import random
import threading

from firesafe.errors import StoreError
from firesafe.retries.backoff import Backoff


class Duty:
    """Run :meth:`round` in a thread named ``firesafe-<name>`` until :meth:`stop`, waiting what each
    round returns (seconds) before the next. A ``StoreError`` is logged on one line and retried after
    a backoff (:attr:`fault_base` seconds, doubling up to :attr:`fault_cap`, equal jitter); any other
    exception is a bug: logged with its traceback, retried after :meth:`after_bug` seconds. Subclasses
    set :attr:`name`, :attr:`log` and :attr:`fault_cap`, and write :meth:`round`, :meth:`after_bug` and, if they hold
    something to give up, :meth:`released`."""

    name = "duty"
    log = logging.getLogger("firesafe.worker")
    fault_base = 0.5
    fault_cap = 15.0

    def __init__(self) -> None:
        self._backoff = Backoff(base=self.fault_base, factor=2.0, cap=self.fault_cap, jitter="equal")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"firesafe-{self.name}", daemon=True)

    def round(self) -> float:
        """Do one round of the duty; how long to wait before the next."""
        raise NotImplementedError

    def after_bug(self) -> float:
        """How long to wait after a round that raised something other than a store fault."""
        raise NotImplementedError

    def first_wait(self) -> float:
        """How long to wait before the first round."""
        return 0.0

    def released(self) -> None:
        """Give up what the duty holds (a leader lease), once its thread has stopped."""

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop between two rounds (a round in flight ends first), then :meth:`released`."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self.released()

    def _loop(self) -> None:
        faults = 0
        rng = random.Random()
        self._stop.wait(self.first_wait())
        while not self._stop.is_set():
            try:
                pause = self.round()
                faults = 0
            except StoreError as exc:
                faults += 1
                pause = self._backoff.delay(faults, rng.random())
                self.log.error("%s: store fault (%s); retrying in %.1fs", self.name, exc, pause)
            except Exception:  # a bug: keep the worker alive, try again later
                self.log.exception("%s failed", self.name)
                pause = self.after_bug()
            self._stop.wait(pause)


__all__ = ["Duty"]
