"""A fixed set of daemon threads that run attempts.

Daemon threads, so a hung job can never keep the process from exiting after shutdown; its lease
token is already void by then, so whatever it writes late changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol


class Threads(Protocol):
    """What a worker needs of the threads its attempts run on."""

    def submit(self, task: Callable[[], Any]) -> None: ...

    def shutdown(self) -> None: ...


class Pool:
    def __init__(self, size: int, name: str = "firesafe-run") -> None:
        self._tasks: queue.SimpleQueue[Callable[[], Any] | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True) for i in range(size)]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        runner = asyncio.Runner()
        _local.runner = runner
        while True:
            task = self._tasks.get()
            if task is None:
                break
            try:
                task()
            except BaseException:  # tasks record their own failures: a thread never dies of one
                log.exception("a worker thread's task failed")
        runner.close()

    def submit(self, task: Callable[[], Any]) -> None:
        self._tasks.put(task)

    def shutdown(self) -> None:
        for _ in self._threads:
            self._tasks.put(None)


_local = threading.local()
log = logging.getLogger("firesafe.worker")


def run_coroutine(coro: Any, timeout: float | None) -> Any:
    """Run a coroutine on this pool thread's own event loop, cancelling it after ``timeout``."""
    runner: asyncio.Runner | None = getattr(_local, "runner", None)
    if runner is None:
        return asyncio.run(asyncio.wait_for(coro, timeout))
    return runner.run(asyncio.wait_for(coro, timeout))
