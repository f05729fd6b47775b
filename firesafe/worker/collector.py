"""Python's cyclic garbage collector while a worker runs in the process.

A worker that drains short jobs allocates a handful of objects per attempt (the claimed job, its
context, its outcome), almost none of them in reference cycles: reference counting frees them. With
the collector's default first threshold (700 net allocations), it still ran a young-generation pass
every few dozen jobs, and every few hundred a pass over everything alive since start-up (modules,
the app, the store's pool): on a no-op drain of 10,000 jobs on PostgreSQL, 50 to 90 ms of the loop's
CPU, 5 to 9 µs a job (docs/benchmarks.md). While a worker runs, :func:`tuned`:

- freezes what is alive when it starts (``gc.freeze()``: start-up objects, which live as long as
  the process, are left out of every pass), and
- raises the first threshold to :data:`FIRST_THRESHOLD` (unless the collector was off).

It puts both back when the last worker of the process returns: the threshold it found, and the
frozen objects back into the collector's care (only if it was the one that froze them). Cycles
(an exception's traceback, mostly) are still collected, a little later.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: The collector's first threshold while a worker runs (Python's default is 700).
FIRST_THRESHOLD = 20_000

_lock = threading.Lock()
_users = 0
_saved: tuple[int, int, int] = (700, 10, 10)
_froze = False


@contextmanager
def tuned() -> Iterator[None]:
    """Tune the collector for the duration of the block; re-entrant (claim loops of one process)."""
    global _users, _saved, _froze
    with _lock:
        if _users == 0:
            _saved = gc.get_threshold()
            _froze = gc.get_freeze_count() == 0  # someone else's freeze (a pre-fork server) is left alone
            if _froze:
                gc.freeze()
            if _saved[0]:  # 0: the collector is off, and stays off
                gc.set_threshold(max(_saved[0], FIRST_THRESHOLD), _saved[1], _saved[2])
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                gc.set_threshold(*_saved)
                if _froze:
                    gc.unfreeze()
                    _froze = False
