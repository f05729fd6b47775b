"""The records of what the dashboard reads beyond the core; the methods are declared in
:class:`firesafe.store.contract.DashboardStore` (both stores share one mixin, ``DashboardQueries``).

Read-only views: nothing here changes a job. Replay and discard go through :class:`DeadLetters`
(``app.dlq``), which records each change in the job's events with its actor.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bucket:
    """Attempts that ended in one time bucket with one outcome."""

    index: int  # bucket number from ``since``: 0 is [since, since + width)
    outcome: str
    count: int


@dataclass(frozen=True)
class DeadGroup:
    """Dead jobs of one job name and error type."""

    name: str
    error_type: str | None
    count: int
    first_at: float | None
    last_at: float | None


@dataclass(frozen=True)
class QueueLag:
    """Jobs runnable now in a queue, and how long (seconds) the oldest has waited."""

    queue: str
    runnable: int
    lag: float
