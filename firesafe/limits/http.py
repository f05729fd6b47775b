"""Read a provider's ``Retry-After`` from the HTTP errors of httpx, requests or urllib.

Nothing is imported: the error is read by its shape (``exc.response.status_code`` and
``exc.response.headers`` for httpx and requests, ``exc.code`` and ``exc.headers`` for urllib), so
firesafe depends on none of them.
"""

from __future__ import annotations

import math
from email.utils import parsedate_to_datetime
from typing import Any

#: Statuses whose Retry-After pauses a limiter: too many requests, service unavailable.
STATUSES = frozenset({429, 503})
#: A Retry-After longer than this is taken as this (a day): a broken header must not park jobs for years.
MAX_RETRY_AFTER = 86400.0


def parse_retry_after(value: object, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (seconds or an HTTP date); None if unreadable.

    >>> parse_retry_after("3", 0.0)
    3.0
    >>> parse_retry_after(" 1.5 ", 0.0)
    1.5
    >>> parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470.0)
    10.0
    >>> parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412490.0)  # already past
    0.0
    >>> parse_retry_after("soon", 0.0) is None, parse_retry_after("-4", 0.0) is None
    (True, True)
    >>> parse_retry_after("99999999", 0.0)
    86400.0
    """
    if isinstance(value, bytes):
        value = value.decode("latin-1", "replace")
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:  # an HTTP date is GMT
            from datetime import UTC

            when = when.replace(tzinfo=UTC)
        seconds = max(0.0, when.timestamp() - now)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER)


def _status_and_headers(exc: BaseException) -> tuple[int | None, Any]:
    response = getattr(exc, "response", None)
    if response is not None:
        return getattr(response, "status_code", None), getattr(response, "headers", None)
    code = getattr(exc, "code", None)  # urllib.error.HTTPError
    return (code if isinstance(code, int) else None), getattr(exc, "headers", None)


def retry_after_of(exc: BaseException | None, now: float) -> float | None:
    """Seconds an HTTP error asks to wait: status 429 or 503 with a readable ``Retry-After``.

    ``now`` (seconds since the epoch) turns an HTTP date into seconds. Errors raised ``from`` such
    an HTTP error count too. None for anything else.

    >>> class Response:
    ...     status_code = 429
    ...     headers = {"Retry-After": "3"}
    >>> class HTTPStatusError(Exception):
    ...     response = Response()
    >>> retry_after_of(HTTPStatusError("429 Too Many Requests"), 0.0)
    3.0
    >>> retry_after_of(ValueError("nope"), 0.0) is None
    True
    """
    seen = 0
    while exc is not None and seen < 4:
        try:
            status, headers = _status_and_headers(exc)
            value = headers.get("Retry-After") if status in STATUSES and headers is not None else None
        except Exception:  # an error object of another shape (a property that raises): not ours to judge
            value = None
        seconds = parse_retry_after(value, now)
        if seconds is not None:
            return seconds
        exc = exc.__cause__
        seen += 1
    return None
