"""What the dashboard reads beyond the core store contract; both stores implement it in a mixin.

Read-only views: nothing here changes a job. Replay and discard go through :class:`DeadLetters`
(``app.dlq``), which records each change in the job's events with its actor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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


class DashboardStore(Protocol):
    def attempt_buckets(self, since: float, until: float, width: float) -> list[Bucket]:
        """Attempts that ended in ``[since, until)``, counted per ``width``-second bucket and outcome."""
        ...

    def dead_groups(self, limit: int = 200) -> list[DeadGroup]:
        """Dead jobs grouped by job name and error type, largest group first."""
        ...

    def queue_lags(self) -> list[QueueLag]:
        """Per queue with runnable jobs: how many, and the wait of the oldest (by the store's clock)."""
        ...

    def attempt_counts(self) -> list[tuple[str, str, int]]:
        """``(job name, outcome, count)`` over the attempts the store holds (``running`` for open ones)."""
        ...
