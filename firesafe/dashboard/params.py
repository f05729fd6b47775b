"""Query parameters of the dashboard's pages, validated before anything reaches the store.

Each value is checked against a closed set or a pattern; a bad one is a clear 400, never SQL.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from firesafe.errors import InvalidInput
from firesafe.idempotency.keys import check_name
from firesafe.states import State

PAGE_SIZES = (25, 50, 100, 200)
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = max(PAGE_SIZES)
MAX_PAGE = 10_000
#: How many keys one selection may carry (bulk work goes by filter).
MAX_SELECTION = 500
STATES = tuple(str(s) for s in State)
_ERROR_TYPE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,199}$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d|w)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def check_error_type(value: str) -> str:
    """An exception type name, as firesafe records it.

    >>> check_error_type("TimeoutError"), check_error_type("requests.HTTPError")
    ('TimeoutError', 'requests.HTTPError')
    >>> check_error_type("x' OR 1=1 --")
    Traceback (most recent call last):
    ...
    firesafe.errors.InvalidInput: invalid error type ...
    """
    if not _ERROR_TYPE.match(value):
        raise InvalidInput(f"invalid error type {value!r}: use a Python exception name such as TimeoutError")
    return value


def parse_when(value: str, now: float | None = None) -> float:
    """A time: a duration ago (``30m``, ``2h``, ``7d``) or an ISO date or datetime (UTC if no zone).

    >>> parse_when("2h", now=10_000.0), parse_when("2024-05-01")
    (2800.0, 1714521600.0)
    >>> parse_when("yesterday")
    Traceback (most recent call last):
    ...
    firesafe.errors.InvalidInput: invalid time 'yesterday': ...
    """
    text = value.strip()
    m = _DURATION.match(text.lower())
    if m:
        return (time.time() if now is None else now) - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            f"invalid time {value!r}: write 30m, 2h or 7d ago, or a date like 2024-05-01T12:00") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


@dataclass(frozen=True)
class JobQuery:
    """The filters and page of a jobs (or dead letters) listing."""

    state: str | None = None
    job: str | None = None
    queue: str | None = None
    error: str | None = None
    since: str | None = None
    until: str | None = None
    page: int = 1
    size: int = DEFAULT_PAGE_SIZE
    dead_reason: str | None = None  # dead letters: why they died (exhausted, permanent, ...)

    @classmethod
    def parse(cls, params: Mapping[str, str], *, state: str | None = None) -> JobQuery:
        """Validate query parameters (unknown ones are ignored; empty ones mean 'any').

        >>> q = JobQuery.parse({"state": "dead", "job": "refund", "page": "2", "size": "100"})
        >>> q.state, q.job, q.page, q.size, q.dead_reason
        ('dead', 'refund', 2, 100, None)
        >>> JobQuery.parse({"size": "100000"}).size
        200
        >>> JobQuery.parse({"state": "zombie"})
        Traceback (most recent call last):
        ...
        firesafe.errors.InvalidInput: unknown state 'zombie': ...
        """

        def get(name: str) -> str | None:
            value = params.get(name)
            if value is None:
                return None
            value = value.strip()
            if len(value) > 300:
                raise InvalidInput(f"{name} is too long")
            return value or None

        st = state if state is not None else get("state")
        if st is not None and st not in STATES:
            raise InvalidInput(f"unknown state {st!r}: use one of {', '.join(STATES)}")
        job = get("job")
        queue = get("queue")
        error = get("error")
        dead_reason = get("dead_reason")
        since, until = get("since"), get("until")
        for text in (since, until):
            if text is not None:
                parse_when(text)
        return cls(
            state=st,
            job=check_name(job, "job name") if job else None,
            queue=check_name(queue, "queue name") if queue else None,
            error=check_error_type(error) if error else None,
            since=since,
            until=until,
            page=_int(get("page"), "page", 1, 1, MAX_PAGE),
            size=min(_int(get("size"), "size", DEFAULT_PAGE_SIZE, 1, 10**9), MAX_PAGE_SIZE),
            dead_reason=check_name(dead_reason, "dead reason") if dead_reason else None,
        )

    def times(self, now: float) -> tuple[float | None, float | None]:
        return (None if self.since is None else parse_when(self.since, now),
                None if self.until is None else parse_when(self.until, now))

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.size

    def filters(self) -> dict[str, str]:
        """The non-empty filters (no page), as query parameters."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("page", "size") or value is None:
                continue
            out[f.name] = str(value)
        return out

    def qs(self, **changes: Any) -> str:
        """This query as a URL query string, with ``changes`` applied.

        >>> JobQuery(state="dead", job="refund").qs(page=3)
        'state=dead&job=refund&page=3'
        """
        q = replace(self, **changes) if changes else self
        out = q.filters()
        if q.page != 1:
            out["page"] = str(q.page)
        if q.size != DEFAULT_PAGE_SIZE:
            out["size"] = str(q.size)
        return urlencode(out)


def _int(value: str | None, name: str, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    try:
        n = int(value)
    except ValueError:
        raise InvalidInput(f"{name} must be a whole number, not {value!r}") from None
    if n < low:
        raise InvalidInput(f"{name} must be at least {low}")
    return min(n, high)
