"""The one clock every decision reads (invariant 5).

Stores take a clock; SQLite uses it directly, PostgreSQL uses the database's own clock unless a
test hands it a fake one.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol, overload


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to; thread-safe."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._t = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._t += seconds

    def set(self, t: float) -> None:
        with self._lock:
            self._t = float(t)


@overload
def to_datetime(ts: float) -> datetime: ...
@overload
def to_datetime(ts: None) -> None: ...
@overload
def to_datetime(ts: float | None) -> datetime | None: ...
def to_datetime(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


def to_timestamp(value: datetime) -> float:
    if value.tzinfo is None:
        raise ValueError("datetimes must be timezone-aware (for example datetime.now(UTC))")
    return value.timestamp()
