"""The limiter's arithmetic (invariant 6): bucket, line, pause, breaker. No store, no clock."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firesafe.limits import bucket
from firesafe.limits.bucket import CLOSED, HALF_OPEN, OPEN, LimiterSpec, LimiterState
from firesafe.limits.http import parse_retry_after, retry_after_of

specs = st.builds(
    LimiterSpec,
    name=st.just("x"),
    rate=st.floats(0.5, 500.0),
    burst=st.integers(1, 50).map(float),
    concurrency=st.none(),
    breaker_after=st.none(),
)
# Asks for a token at increasing times: gaps between asks, in seconds.
gaps = st.lists(st.floats(0.0, 0.2), min_size=1, max_size=400)


def run(spec: LimiterSpec, times: list[float]) -> list[float]:
    """The times at which asks were granted, deciding each with check/take like the store does."""
    state = LimiterState.fresh(spec, times[0])
    granted = []
    for t in times:
        if bucket.check(spec, state, t).ok:
            state = bucket.take(spec, state, t)
            granted.append(t)
    return granted


def most_in(times: list[float], window: float) -> int:
    best, j = 0, 0
    for i, t in enumerate(times):
        while j < len(times) and times[j] < t + window:
            j += 1
        best = max(best, j - i)
    return best


@settings(max_examples=300, deadline=None)
@given(specs, gaps, st.sampled_from([0.1, 0.5, 1.0, 3.0]))
def test_no_window_ever_holds_more_than_burst_plus_rate_times_its_length(spec: LimiterSpec, steps: list[float],
                                                                         window: float) -> None:
    times = []
    t = 1_000.0
    for gap in steps:
        t += gap
        times.append(t)
    granted = run(spec, times)
    assert most_in(granted, window) <= spec.burst + spec.rate * window + 1e-6  # type: ignore[operator]


@settings(max_examples=100, deadline=None)
@given(specs, st.floats(1.0, 5.0))
def test_a_saturated_bucket_grants_the_rate(spec: LimiterSpec, seconds: float) -> None:
    """Asking every millisecond for ``seconds``: about burst + rate * seconds grants, no fewer.

    (A bucket of one token loses the part of a token that refills between a token's due time and
    the next ask, so its grants are spaced by the interval rounded up to the next ask.)"""
    times = [1_000.0 + i * 0.001 for i in range(int(seconds * 1000))]
    granted = run(spec, times)
    span = times[-1] - times[0]
    expected = spec.burst + spec.rate * span  # type: ignore[operator]
    assert len(granted) <= expected + 1e-6
    if spec.burst >= 2:
        assert len(granted) >= math.floor(expected) - 1
    else:
        assert len(granted) >= math.floor(span / (spec.spacing + 0.001))


@given(specs, st.floats(0.0, 100.0), st.floats(0.0, 0.999))
def test_refused_jobs_get_distinct_turns_one_spacing_apart(spec: LimiterSpec, wait: float, draw: float) -> None:
    state = LimiterState(0.0, 0.0, 0.0)
    turns = []
    for _ in range(20):
        delay, state = bucket.defer(spec, state, 0.0, wait, 0.0)
        turns.append(delay)
    assert turns[0] == pytest.approx(wait)
    for a, b in itertools.pairwise(turns):
        assert b - a == pytest.approx(spec.spacing)
    jittered, _ = bucket.defer(spec, LimiterState(0.0, 0.0, 0.0), 0.0, wait, draw)
    assert wait <= jittered < wait + spec.spacing + 1e-9


@given(st.floats(0.0, 1e6), st.floats(0.0, 3600.0), st.floats(0.0, 3600.0))
def test_a_pause_only_grows_and_refuses_until_it_ends(now: float, first: float, second: float) -> None:
    spec = LimiterSpec("x", rate=10.0, burst=5.0)
    state, started = bucket.pause(LimiterState.fresh(spec, now), now, now + first)
    assert started
    state, _ = bucket.pause(state, now, now + second)
    end = now + max(first, second)
    assert state.paused_until == end
    if end > now:
        check = bucket.check(spec, state, now)
        assert not check.ok and check.why == "paused" and check.earliest == end
    # Afterwards the bucket starts empty: the rate, not a burst, comes first.
    assert bucket.tokens_now(spec, state, end) == 0.0
    assert bucket.tokens_now(spec, state, end + 0.1) == pytest.approx(1.0)


def test_breaker_opens_after_n_failures_in_a_row_and_a_success_resets_the_count() -> None:
    spec = LimiterSpec("x", breaker_after=3, cooldown=10.0)
    state = LimiterState.fresh(spec, 0.0)
    for _ in range(2):
        state = bucket.report(spec, state, 1.0, "failure").state
    state = bucket.report(spec, state, 1.0, "ok").state  # a success in between: not in a row
    assert state.failures == 0
    for _ in range(2):
        state = bucket.report(spec, state, 2.0, "failure").state
    assert state.breaker == CLOSED
    opened = bucket.report(spec, state, 3.0, "failure")
    assert opened.state.breaker == OPEN and opened.state.retry_at == 13.0
    assert [k for k, _ in opened.events] == ["breaker_opened"]
    assert opened.wait_until is None  # the failure that opened it was a real attempt
    assert bucket.report(spec, state, 1.0, "neutral").state.failures == 2  # a permanent error proves nothing


def test_open_breaker_refuses_until_the_cooldown_then_lets_one_probe_through() -> None:
    spec = LimiterSpec("x", breaker_after=1, cooldown=10.0)
    state = bucket.report(spec, LimiterState.fresh(spec, 0.0), 0.0, "failure").state
    refused = bucket.check(spec, state, 5.0)
    assert (refused.ok, refused.why, refused.earliest) == (False, "open", 10.0)
    first = bucket.check(spec, state, 10.0)
    assert first.ok and first.probe
    state = bucket.take(spec, state, 10.0, probe=(7, "tok"))
    assert state.breaker == HALF_OPEN
    assert bucket.check(spec, state, 10.5, probe_alive=True).why == "probing"
    # A probe whose worker died (its lease expired) is replaced by the next job.
    assert bucket.check(spec, state, 40.0, probe_alive=False).probe
    failed = bucket.report(spec, state, 11.0, "failure", job=(7, "tok"))
    assert failed.state.breaker == OPEN and failed.state.retry_at == 21.0 and failed.wait_until == 21.0
    closed = bucket.report(spec, state, 11.0, "ok", job=(7, "tok"))
    assert closed.state.breaker == CLOSED and [k for k, _ in closed.events] == ["breaker_closed"]


def test_failures_while_open_give_the_attempt_back_until_the_probe_time() -> None:
    spec = LimiterSpec("x", breaker_after=1, cooldown=10.0)
    state = bucket.report(spec, LimiterState.fresh(spec, 0.0), 0.0, "failure").state
    late = bucket.report(spec, state, 2.0, "failure", job=(9, "other"))
    assert late.wait_until == 10.0 and late.state.breaker == OPEN and not late.events


def test_retry_after_pauses_and_counts_as_the_provider_answering() -> None:
    spec = LimiterSpec("x", rate=5.0, breaker_after=2, cooldown=10.0)
    state = bucket.report(spec, LimiterState.fresh(spec, 0.0), 0.0, "failure").state
    r = bucket.report(spec, state, 1.0, "failure", pause_until=4.0)
    assert r.state.paused_until == 4.0 and r.wait_until == 4.0 and r.state.failures == 0
    assert [k for k, _ in r.events] == ["paused"]
    again = bucket.report(spec, r.state, 1.5, "failure", pause_until=3.5)  # a shorter one changes nothing
    assert again.state.paused_until == 4.0 and not again.events


def test_concurrency_refuses_when_every_slot_is_held() -> None:
    spec = LimiterSpec("x", concurrency=3)
    state = LimiterState.fresh(spec, 0.0)
    assert bucket.check(spec, state, 0.0, live=2).ok
    assert bucket.check(spec, state, 0.0, live=3).why == "concurrency"


def test_resume_clears_pause_and_breaker() -> None:
    spec = LimiterSpec("x", rate=1.0, breaker_after=1)
    state = bucket.report(spec, LimiterState.fresh(spec, 0.0), 0.0, "failure").state
    state, _ = bucket.pause(state, 0.0, 100.0)
    state = bucket.resume(state, 5.0)
    assert state.breaker == CLOSED and state.paused_until is None
    assert bucket.check(spec, state, 6.0).ok


@given(st.integers(0, 10**6))
def test_retry_after_seconds_round_trip(seconds: int) -> None:
    assert parse_retry_after(str(seconds), 0.0) == min(float(seconds), 86400.0)


def test_retry_after_is_read_from_error_shapes_of_httpx_requests_and_urllib() -> None:
    import urllib.error
    from email.message import Message

    class Response:
        def __init__(self, status: int, headers: dict) -> None:
            self.status_code, self.headers = status, headers

    class HTTPError(Exception):
        def __init__(self, response: Response | None) -> None:
            super().__init__("http error")
            self.response = response

    assert retry_after_of(HTTPError(Response(429, {"Retry-After": "7"})), 0.0) == 7.0
    assert retry_after_of(HTTPError(Response(503, {"Retry-After": "Thu, 01 Jan 1970 00:00:30 GMT"})), 10.0) == 20.0
    assert retry_after_of(HTTPError(Response(500, {"Retry-After": "7"})), 0.0) is None  # not a limit
    assert retry_after_of(HTTPError(Response(429, {})), 0.0) is None  # no header: an ordinary failure
    assert retry_after_of(HTTPError(None), 0.0) is None  # requests: an error without a response
    headers = Message()
    headers["Retry-After"] = "4"
    assert retry_after_of(urllib.error.HTTPError("http://x", 429, "Too Many", headers, None), 0.0) == 4.0
    wrapped = RuntimeError("provider said no")
    wrapped.__cause__ = HTTPError(Response(429, {"Retry-After": "2"}))
    assert retry_after_of(wrapped, 0.0) == 2.0
