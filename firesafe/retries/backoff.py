"""Capped exponential backoff with jitter: a pure function of the attempt and a random draw."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from firesafe.errors import InvalidInput

Jitter = Literal["full", "equal", "none"]


@dataclass(frozen=True)
class Backoff:
    """How long to wait before the next attempt.

    The ceiling for attempt ``n`` (1-based: the wait after the first failure is ``n=1``) is
    ``min(cap, base * factor ** (n - 1))``. ``jitter`` spreads the wait below that ceiling:
    ``full`` draws from ``[0, ceiling]``, ``equal`` from ``[ceiling/2, ceiling]``, ``none`` waits
    exactly the ceiling. The defaults (1 s doubling, capped at 5 minutes) with the default 5
    attempts wait at most 1 + 2 + 4 + 8 = 15 seconds in total before the last attempt.

    >>> b = Backoff(base=1.0, factor=2.0, cap=300.0, jitter="none")
    >>> [b.delay(n, 0.5) for n in (1, 2, 3, 10, 20)]
    [1.0, 2.0, 4.0, 300.0, 300.0]
    >>> Backoff(base=10, jitter="full").delay(1, 0.25)
    2.5
    >>> Backoff(base=10, jitter="equal").delay(1, 0.0)
    5.0
    """

    base: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    jitter: Jitter = "full"

    def __post_init__(self) -> None:
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (self.base, self.factor, self.cap)):
            raise InvalidInput(f"Backoff takes numbers of seconds (base, cap) and a factor, not "
                               f"base={self.base!r}, factor={self.factor!r}, cap={self.cap!r}")
        if not (self.base >= 0 and self.factor >= 1 and self.cap >= self.base):
            raise InvalidInput("Backoff needs base >= 0, factor >= 1 and cap >= base")
        if self.jitter not in ("full", "equal", "none"):
            raise InvalidInput(f"unknown jitter {self.jitter!r}: use 'full', 'equal' or 'none'")

    def ceiling(self, attempt: int) -> float:
        exponent = max(0, attempt - 1)
        # Compare in logs-free form without overflowing: stop multiplying once past the cap.
        value = self.base
        for _ in range(min(exponent, 2048)):
            value *= self.factor
            if value >= self.cap:
                return self.cap
        return min(self.cap, value)

    def delay(self, attempt: int, draw: float) -> float:
        """The wait after failed attempt ``attempt``, given a uniform ``draw`` in ``[0, 1)``."""
        top = self.ceiling(attempt)
        if self.jitter == "full":
            return top * draw
        if self.jitter == "equal":
            return top / 2 + top / 2 * draw
        return top

    def worst_case_total(self, max_attempts: int) -> float:
        """The longest total wait across ``max_attempts`` attempts (every draw at its top).

        >>> Backoff().worst_case_total(5)
        15.0
        """
        return sum(self.ceiling(n) for n in range(1, max_attempts))
