"""Fuzzed declarations: job and queue names, job options, cron expressions and time zones, limiter
settings. Each either works or raises a clear FiresafeError (ConfigError, InvalidInput) at once, when
it is declared; nothing else escapes, and a refused declaration registers nothing.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from firesafe import App, Backoff, FiresafeError
from firesafe.schedules.windows import Cron

FUZZ = settings(max_examples=300, deadline=None, database=None)
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]{0,127}$")
ANYTHING = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
                     st.lists(st.integers(), max_size=2), st.binary(max_size=3))
NAMES = st.one_of(st.text(max_size=140), st.from_regex(r"[A-Za-z_][A-Za-z0-9_.:\-]{0,30}", fullmatch=True),
                  st.integers(), st.none())


def app() -> App:
    return App("sqlite:////nonexistent-dir/never-opened.db")  # declaring never opens the store


def job_fn(ctx: Any, a: int = 0) -> None:
    return None


@FUZZ
@given(name=NAMES, queue=NAMES, max_attempts=ANYTHING, timeout=ANYTHING, max_deferrals=ANYTHING)
def test_job_declarations_work_or_say_why(name: Any, queue: Any, max_attempts: Any, timeout: Any,
                                          max_deferrals: Any) -> None:
    a = app()
    try:
        jd = a.job(job_fn, name=name, queue=queue if queue is not None else "default",
                   max_attempts=max_attempts if max_attempts is not None else 5, timeout=timeout,
                   max_deferrals=max_deferrals if max_deferrals is not None else 100)
    except FiresafeError as exc:
        assert str(exc).strip()
        assert list(a.jobs) == []  # refused: nothing registered
        return
    except TypeError:  # a name that is not a string falls back to the function's name
        raise
    assert jd.name == (name or "job_fn") and NAME.match(jd.name) and NAME.match(jd.queue)
    assert isinstance(jd.max_attempts, int) and jd.max_attempts >= 1
    assert a.jobs[jd.name] is jd


@FUZZ
@given(base=ANYTHING, factor=ANYTHING, cap=ANYTHING, jitter=st.one_of(st.sampled_from(["full", "equal", "none"]),
                                                                      ANYTHING))
def test_backoff_settings_work_or_say_why(base: Any, factor: Any, cap: Any, jitter: Any) -> None:
    try:
        b = Backoff(base=base, factor=factor, cap=cap, jitter=jitter)
    except FiresafeError:
        return
    except TypeError:  # comparing a str with a number: not a clear error
        raise AssertionError(f"Backoff({base!r}, {factor!r}, {cap!r}, {jitter!r}) raised TypeError") from None
    for n in (1, 2, 50):
        assert 0 <= b.delay(n, 0.5) <= b.cap


CRON_ALPHABET = "0123456789*/,-?LW# " + "MONTUEWEDTHUFRISATSUNJANFEBMARAPRMAYJUNJULAUGSEPOCTNOVDEC"
ZONES = st.one_of(st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]),
                  st.text(max_size=20), st.sampled_from(["../../etc/passwd", "/etc/localtime", "", "Europe/"]),
                  st.integers())


@settings(max_examples=600, deadline=None, database=None)
@given(expression=st.one_of(st.text(alphabet=CRON_ALPHABET, max_size=30),
                            st.lists(st.sampled_from(["*", "*/5", "0", "1-5", "59", "60", "MON-FRI", "L", "1W",
                                                      "5#2", "JAN", "?", "0,30", "*/0", "-1", "31"]),
                                     min_size=1, max_size=7).map(" ".join),
                            st.text(max_size=20), st.integers(), st.none()),
       tz=ZONES)
def test_cron_expressions_and_zones_work_or_say_why(expression: Any, tz: Any) -> None:
    try:
        cron = Cron(expression, tz)
    except FiresafeError as exc:
        assert str(exc).strip()
        return
    # It parsed: its fires and windows can be asked for, without an exception
    start = 1_800_000_000
    fire = cron.next_fire(start)
    assert fire is None or fire > start
    windows = cron.windows_ending(start, start + 3 * 86400, limit=5)
    for lo, hi in windows:
        assert lo < hi


@settings(max_examples=150, deadline=None, database=None)
@given(expression=st.text(alphabet=CRON_ALPHABET, max_size=20), tz=ZONES, catchup=st.one_of(
    st.sampled_from(["all", "latest", "skip"]), ANYTHING), window=ANYTHING, grace=ANYTHING, name=NAMES)
def test_schedule_declarations_work_or_say_why(expression: str, tz: Any, catchup: Any, window: Any, grace: Any,
                                               name: Any) -> None:
    a = app()
    try:
        decorator = a.schedule(expression, tz=tz, catchup=catchup, catchup_window=window if window is not None
                               else 86400, grace=grace if grace is not None else 60, name=name)
        decorator(lambda ctx, window: None)
    except FiresafeError:
        assert a.schedules == {} and a.jobs == {}  # refused: nothing registered
        return
    assert len(a.schedules) == 1


@settings(max_examples=400, deadline=None, database=None)
@given(name=NAMES, rate=ANYTHING, per=ANYTHING, burst=ANYTHING, concurrency=ANYTHING, breaker_after=ANYTHING,
       cooldown=ANYTHING)
def test_limiter_settings_work_or_say_why(name: Any, rate: Any, per: Any, burst: Any, concurrency: Any,
                                          breaker_after: Any, cooldown: Any) -> None:
    a = app()
    options = {"rate": rate, "per": per if per is not None else 1.0, "burst": burst, "concurrency": concurrency,
               "breaker_after": breaker_after, "cooldown": cooldown if cooldown is not None else 30.0}
    try:
        limiter = a.limiter(name, **options)
    except FiresafeError as exc:
        assert str(exc).strip()
        assert a.limiters == {}
        return
    spec = limiter.spec
    assert spec.rate is None or spec.rate > 0
    assert spec.burst >= 1 and (spec.concurrency is None or spec.concurrency >= 1) and spec.cooldown > 0
    # and a job may name it
    a.job(job_fn, name="limited", limiter=spec.name)
