"""Retry-After as real clients raise it: httpx, requests and urllib against a provider on 127.0.0.1."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest

from firesafe.limits.http import retry_after_of
from tests.limits.provider import Provider


def raised(fn) -> BaseException:
    try:
        fn()
    except Exception as exc:
        return exc
    raise AssertionError("no error raised")


@pytest.fixture
def throttled() -> Provider:
    with Provider() as p:
        p.throttle_at, p.throttle_for = 1, 5.0
        yield p


def test_httpx_status_error(throttled: Provider) -> None:
    httpx = pytest.importorskip("httpx")
    exc = raised(lambda: httpx.get(f"{throttled.url}/call").raise_for_status())
    assert type(exc).__name__ == "HTTPStatusError"
    assert retry_after_of(exc, time.time()) == 5.0


def test_requests_http_error(throttled: Provider) -> None:
    requests = pytest.importorskip("requests")
    exc = raised(lambda: requests.get(f"{throttled.url}/call", timeout=5).raise_for_status())
    assert type(exc).__name__ == "HTTPError"
    assert retry_after_of(exc, time.time()) == 5.0


def test_urllib_http_error_with_an_http_date(throttled: Provider) -> None:
    throttled.date_form = True
    exc = raised(lambda: urllib.request.urlopen(f"{throttled.url}/call", timeout=5))
    assert isinstance(exc, urllib.error.HTTPError)
    exc.close()
    seconds = retry_after_of(exc, time.time())
    assert seconds is not None and 3.5 <= seconds <= 5.0  # an HTTP date has whole seconds


def test_a_500_or_a_200_is_not_a_retry_after() -> None:
    httpx = pytest.importorskip("httpx")
    with Provider() as p:
        p.down_until = time.time() + 60  # 503 without Retry-After: an ordinary transient failure
        exc = raised(lambda: httpx.get(f"{p.url}/call").raise_for_status())
        assert retry_after_of(exc, time.time()) is None
