"""Store transactions a worker loop keeps in flight (``pipeline=N``), each run by a committer thread.

Without a pipeline a worker's loop takes turns with its store: it sends a batch's outcomes and the
next claim in one transaction, waits for the reply, then starts the claimed jobs and concludes the
outcomes that came back while the store waits for its next request, so the two are never busy at
the same time. With ``pipeline=2`` the loop hands each transaction to a committer thread and
carries on: while one transaction runs on the server, the loop starts the jobs an earlier one
claimed, the pool's threads run them, and their outcomes leave with the next claim in a second
transaction, on a second connection. The default on PostgreSQL (a store says so with
``concurrent_writers``) for a loop that prefetches; SQLite has one writer at a time, so a second
transaction would only wait for the first.

What a request carries is what the loop would have sent itself: outcomes of attempts it concluded,
and a claim of the slots that those outcomes and the free threads leave. An outcome in flight keeps
its lease until its transaction commits (nothing is acknowledged before); a claim in flight holds
the slots it may fill. A request that fails comes back with its error: its claim took nothing, and
the loop keeps its outcomes to save again, as when a transaction of its own fails.

Only the worker's :class:`~firesafe.worker.completer.Completer` submits requests: the pipeline is
how the completer's transactions stay in flight, not another route for outcomes.

Lanes (firesafe/worker/lanes.py) fill the same gap another way: several loops in one process, each
with a connection of its own, one loop's transaction running while another's Python does. A lane's
loop keeps no pipeline (both would compete for the same gap). Both stay because they are not
interchangeable for users: the pipeline is the default, with nothing to set, for the one loop every
worker has; lanes are a public option (``--lanes``, ``lanes=`` in ``app.work``) that deployments may
have set, and on the drains of bench/ the two measure about even. Removing one is for a change that
shows, with benchmarks, that it costs nothing.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from firesafe.store.base import Claimed, ClaimParams, FinishParams

#: Transactions in flight for a loop that prefetches, on a store with concurrent writers.
DEFAULT_DEPTH = 2


def transact(store: Any, finishes: list[FinishParams], claim: ClaimParams | None) -> tuple[list[bool], list[Claimed]]:
    """One store transaction of a worker: ``finishes`` saved under their lease tokens (whether each
    applied) and, with ``claim``, the next jobs claimed in the same commit. The only place a worker
    writes outcomes; :class:`~firesafe.worker.completer.Completer` decides when, on the loop's
    thread or on a committer's."""
    if claim is None:
        return store.job_finish_many(finishes), []
    applied, claimed = store.job_finish_and_claim(finishes, claim)
    return applied, claimed


@dataclass(slots=True, eq=False)  # compared by identity: two requests in flight may hold equal values
class Request:
    """One transaction: outcomes to save (``meta``: the loop's bookkeeping of each) and maybe a claim.
    The committer fills in ``applied`` and ``claimed``, or ``error``."""

    finishes: list[FinishParams]
    meta: list[tuple[Any, Any]]
    claim: ClaimParams | None
    applied: list[bool] = field(default_factory=list)
    claimed: list[Claimed] = field(default_factory=list)
    error: BaseException | None = None

    @property
    def reserved(self) -> int:
        """The slots its claim may fill."""
        return self.claim.limit if self.claim is not None else 0


class StorePipeline:
    """Up to ``depth`` requests in flight, one per committer thread (each uses a connection of the
    store's pool). Only the worker's loop submits and takes requests back; a committer that finishes
    one calls ``wake``."""

    def __init__(self, store: Any, depth: int, wake: Callable[[], None], name: str = "firesafe-commit") -> None:
        self.store = store
        self.depth = depth
        self._wake = wake
        self._todo: queue.SimpleQueue[Request | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[Request] = queue.SimpleQueue()
        self._settled = threading.Condition()
        self.in_flight: list[Request] = []  # submitted and not yet taken back, oldest first
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True) for i in range(depth)]
        for t in self._threads:
            t.start()

    @property
    def room(self) -> bool:
        """Whether another request may be submitted now."""
        return len(self.in_flight) < self.depth

    def reserved(self) -> int:
        """The slots the claims in flight may fill."""
        return sum(r.reserved for r in self.in_flight)

    def submit(self, request: Request) -> None:
        if not self.room:
            raise RuntimeError(f"a store pipeline of depth {self.depth} is full")  # the loop checks room first
        self.in_flight.append(request)
        self._todo.put(request)

    def completed(self) -> list[Request]:
        """The requests that finished since the last call, in the order they finished."""
        out: list[Request] = []
        while True:
            try:
                req = self._done.get_nowait()
            except queue.Empty:
                return out
            self.in_flight.remove(req)
            out.append(req)

    def wait_settled(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until every request in flight has finished (for
        :meth:`completed` to take back); True if they all have."""
        with self._settled:
            return self._settled.wait_for(lambda: self._done.qsize() >= len(self.in_flight), timeout)

    def close(self, timeout: float = 10.0) -> bool:
        """End the committer threads once the requests submitted before have run, waiting up to
        ``timeout`` seconds for them; True if they all ended. (A committer still in a transaction
        when the store is closed would use a connection closed under it: SQLite's then crashes the
        process.)"""
        for _ in self._threads:
            self._todo.put(None)
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def _run(self) -> None:
        while True:
            req = self._todo.get()
            if req is None:
                return
            try:
                req.applied, req.claimed = transact(self.store, req.finishes, req.claim)
            except BaseException as exc:  # raised by the loop: a StoreError backs off, anything else is a bug
                req.error = exc
            with self._settled:
                self._done.put(req)
                self._settled.notify_all()
            self._wake()
