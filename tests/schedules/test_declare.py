"""Declaring schedules: bad input is a clear error at declaration; a schedule is a job like any other."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from firesafe import App, ConfigError, FakeClock, InvalidInput, State
from firesafe.schedules.scheduler import Scheduler
from firesafe.schedules.windows import Window


@pytest.fixture
def fresh(tmp_path) -> App:
    return App(f"sqlite:///{tmp_path}/s.db", clock=FakeClock(datetime(2026, 11, 30, 12, tzinfo=UTC).timestamp()))


@pytest.mark.parametrize(("expr", "options", "message"), [
    ("0 2 * *", {}, "invalid cron expression '0 2 \\* \\*'"),
    ("0 25 * * *", {}, "invalid cron expression"),
    ("0 2 * * *", {"tz": "Europe/Berln"}, "unknown time zone 'Europe/Berln'"),
    ("0 2 * * *", {"catchup": "some"}, "unknown catch-up policy 'some': use 'all', 'latest' or 'skip'"),
    ("0 2 * * *", {"catchup_window": -1}, "catchup_window must be a finite duration >= 0"),
    ("0 2 * * *", {"grace": "1m"}, "grace must be a timedelta"),
])
def test_bad_declarations_fail_when_declared(fresh: App, expr: str, options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        fresh.schedule(expr, **options)
    assert fresh.schedules == {} and fresh.jobs == {}


def test_function_must_take_ctx_and_window_and_names_are_unique(fresh: App) -> None:
    with pytest.raises(ConfigError, match=r"must take \(ctx, window\)"):
        @fresh.schedule("0 2 * * *")
        def no_window(ctx) -> None: ...

    @fresh.job
    def sync(ctx) -> None: ...

    with pytest.raises(ConfigError, match="already declared"):
        @fresh.schedule("0 2 * * *")
        def sync(ctx, window) -> None: ...

    with pytest.raises(InvalidInput, match="invalid schedule name"):
        fresh.schedule("0 2 * * *", name="bad name")(lambda ctx, window: None)


def test_a_schedule_is_a_job_called_directly_with_a_window(fresh: App) -> None:
    @fresh.schedule("0 2 * * *", tz="Europe/Berlin", max_attempts=2, queue="nightly")
    def nightly_sync(ctx, window: Window) -> str:
        """Sync one night."""
        return f"{window.start:%d}-{window.end:%d}"

    w = Window(datetime.fromisoformat("2026-11-29T02:00:00+01:00"), datetime.fromisoformat("2026-11-30T02:00:00+01:00"))
    assert nightly_sync(None, w) == "29-30"  # direct call: the user's function
    assert nightly_sync.__doc__ == "Sync one night."
    assert fresh.jobs["nightly_sync"] is nightly_sync and nightly_sync.max_attempts == 2
    assert fresh.queues() == ("nightly",)
    assert "nightly_sync" in repr(fresh.schedules["nightly_sync"])


def test_async_schedule_function_gets_its_window(fresh: App) -> None:
    seen: list[Window] = []

    @fresh.schedule("*/5 * * * *", catchup_window=timedelta(hours=1))
    async def tick(ctx, window: Window) -> None:
        seen.append(window)

    Scheduler(fresh, "w").run()
    fresh._clock.advance(600)  # type: ignore[union-attr]
    assert Scheduler(fresh, "w").run()["tick"].enqueued == 2
    fresh.work(burst=True)
    assert sorted(w.start.isoformat() for w in seen) == ["2026-11-30T12:00:00+00:00", "2026-11-30T12:05:00+00:00"]
    assert fresh.get("tick@2026-11-30T12:05:00+00:00").state == State.SUCCEEDED
    fresh.close()
