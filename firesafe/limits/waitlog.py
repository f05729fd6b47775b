"""How the worker log tells of limiter waits: for people, not for bookkeeping.

Each wait is logged at DEBUG (``--log-level DEBUG``). At INFO a limiter that holds jobs back says
so once when it starts, then at most once every :data:`SUMMARY_EVERY` seconds sums up its waits
since the last summary::

    limiter 'psp': 120 wait(s) in the last 60s (paused 100, rate 20), 340.5s of waiting in all

A wait is not an attempt: ``firesafe show`` lists a job's waits apart from its attempts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

log = logging.getLogger("firesafe.limits")

#: Seconds between two INFO summaries of one limiter's waits.
SUMMARY_EVERY = 60.0


class WaitLog:
    """Counts waits per limiter and logs the INFO summaries (thread-safe: lanes share a process)."""

    def __init__(self, every: float = SUMMARY_EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}  # limiter -> when its last summary was logged
        self._why: dict[str, Counter[str]] = {}
        self._seconds: dict[str, float] = {}

    def note(self, limiter: str | None, why: str | None, seconds: float) -> None:
        """One job was held back by ``limiter`` (for ``why``: rate, paused, breaker...) for ``seconds``."""
        name = limiter or "?"
        with self._lock:
            self._why.setdefault(name, Counter())[why or "limit"] += 1
            self._seconds[name] = self._seconds.get(name, 0.0) + max(0.0, seconds)
            now = self.clock()
            last = self._last.get(name)
            if last is not None and now - last < self.every:
                return
            line = self._summary(name, None if last is None else now - last)
            self._last[name] = now
            self._why.pop(name, None)
            self._seconds.pop(name, None)
        log.info("%s", line)

    def _summary(self, name: str, window: float | None) -> str:
        why = self._why.get(name, Counter())
        reasons = ", ".join(f"{k} {n}" for k, n in why.most_common())
        if window is None:
            return (f"limiter {name!r} holds jobs back ({reasons}); its waits are summed up here at most every "
                    f"{self.every:.0f}s (each one is logged at DEBUG)")
        return (f"limiter {name!r}: {sum(why.values())} wait(s) in the last {window:.0f}s ({reasons}), "
                f"{self._seconds.get(name, 0.0):.1f}s of waiting in all")


#: The worker process's wait log (every worker and lane of a process shares it).
WAITS = WaitLog()
