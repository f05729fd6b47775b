"""Whether any worker is alive: what ``/healthz`` tells an external monitor (pure, no store).

Alerts leave through the workers and through ``firesafe dashboard`` / ``firesafe serve``; when no
process of the fleet runs at all, nothing inside it can tell anyone. ``/healthz?workers=1`` answers
503 when fewer than that many workers heartbeated recently, so an uptime checker outside the fleet
pages instead (docs/alerts.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from firesafe.errors import InvalidInput

#: The most workers ``?workers=`` may ask for, and the longest ``?within=`` window, in seconds.
MAX_WORKERS = 100_000
MAX_WITHIN = 7 * 86400.0


def worker_health(workers: Iterable[Mapping[str, Any]], now: float, within: float) -> dict[str, Any]:
    """How many workers heartbeated in the last ``within`` seconds, and how long ago the last beat was.

    >>> worker_health([{"last_seen": 90.0}, {"last_seen": 20.0}], 100.0, 30.0)
    {'alive': 1, 'seen': 2, 'last_beat_seconds_ago': 10.0, 'within_seconds': 30.0}
    >>> worker_health([], 100.0, 30.0)["last_beat_seconds_ago"] is None
    True
    """
    ages = [max(0.0, now - float(w["last_seen"])) for w in workers]
    return {"alive": sum(1 for a in ages if a <= within), "seen": len(ages),
            "last_beat_seconds_ago": round(min(ages), 3) if ages else None, "within_seconds": within}


def health_query(params: Mapping[str, str], default_within: float) -> tuple[int, float]:
    """``?workers=N&within=SECONDS`` of a health check: how many live workers it requires (0: none)
    and the window a heartbeat must fall in. A bad value is a clear :class:`InvalidInput`.

    >>> health_query({}, 30.0), health_query({"workers": "2", "within": "90"}, 30.0)
    ((0, 30.0), (2, 90.0))
    >>> health_query({"workers": "x"}, 30.0)
    Traceback (most recent call last):
    ...
    firesafe.errors.InvalidInput: workers must be a whole number from 0 to 100000, not 'x'
    """
    raw_need, raw_within = params.get("workers"), params.get("within")
    try:
        need = int(raw_need) if raw_need not in (None, "") else 0
        if not 0 <= need <= MAX_WORKERS:
            raise ValueError
    except ValueError:
        raise InvalidInput(f"workers must be a whole number from 0 to {MAX_WORKERS}, not {raw_need!r}") from None
    try:
        within = float(raw_within) if raw_within not in (None, "") else default_within
        if not 0 < within <= MAX_WITHIN:
            raise ValueError
    except ValueError:
        raise InvalidInput(f"within must be a number of seconds above 0 and at most {MAX_WITHIN:.0f}, "
                           f"not {raw_within!r}") from None
    return need, within
