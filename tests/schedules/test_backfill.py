"""Backfill edge cases, on every store: what a re-run resumes, ranges that cannot be scheduled, empty
ranges, windows stored under another expression, and bounds inside a daylight-saving gap."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from firesafe import App, FakeClock, InvalidInput, Permanent, State
from firesafe.schedules import backfill as backfill_module
from firesafe.schedules.windows import Window
from firesafe.store.base import JobFilter

#: 2026-12-05 00:00 UTC: every window of November and of 2026-12-01 has ended.
NOW = datetime(2026, 12, 5, tzinfo=UTC).timestamp()


def hourly(app: App, expression: str = "0 * * * *", tz: str = "UTC", **options) -> list[Window]:
    seen: list[Window] = []

    @app.schedule(expression, tz=tz, name="sync", **options)
    def sync(ctx, window: Window) -> None:
        seen.append(window)

    return seen


def test_rerun_all_resumes_dead_windows_and_runs_succeeded_ones_from_scratch(app: App, clock: FakeClock) -> None:
    # Given a day of hourly windows that each charge in a step; the even hours then fail for good
    clock.set(NOW)
    charged: list[str] = []
    failing = [True]

    @app.schedule("0 * * * *", max_attempts=1)
    def sync(ctx, window: Window) -> None:
        ctx.step("charge", lambda: charged.append(window.key))
        if failing[0] and window.start.hour % 2 == 0:
            raise Permanent("upstream refused")

    day = date(2026, 12, 1)
    app.backfill("sync", day, day)
    app.work(burst=True)
    assert len(charged) == 24 and app.store.job_count(JobFilter(name="sync", state="dead")) == 12
    # When every finished window of the day is re-run, upstream fixed
    failing[0] = False
    charged.clear()
    result = app.backfill("sync", day, day, rerun="all")
    app.work(burst=True)
    # Then the succeeded windows charge again (from scratch) and the dead ones resume past their charge
    assert result.rerun_count == 24
    assert sorted(charged) == sorted(f"sync@2026-12-01T{h:02}:00:00+00:00" for h in range(1, 24, 2))
    assert app.store.job_count(JobFilter(name="sync", state="succeeded")) == 24


@pytest.mark.parametrize(("start", "end"), [
    (date(9000, 1, 1), date(9999, 12, 31)),  # the end date's day ends past year 9999
    (date(1, 1, 1), date(1, 1, 3)),  # the window before the first needs a fire before year 1
    ("9999-12-30T00:00", "9999-12-31T00:00"),  # the last window ends past year 9999
    (datetime(1, 1, 1, tzinfo=UTC), datetime(1, 1, 2, tzinfo=UTC)),
])
def test_a_range_outside_what_can_be_scheduled_is_a_clear_error(app: App, clock: FakeClock, start: object,
                                                                 end: object) -> None:
    clock.set(NOW)
    hourly(app, "0 2 * * *", tz="Europe/Berlin")
    with pytest.raises(InvalidInput, match="is outside what can be scheduled"):
        app.backfill("sync", start, end)
    assert app.store.schedule_event_list(name="sync") == []  # nothing was recorded
    assert app.store.job_count(JobFilter(name="sync")) == 0


@pytest.mark.parametrize(("start", "end", "message"), [
    (date(2026, 3, 29), date(2026, 3, 28), "from 2026-03-29 is not before to 2026-03-28 (a date as 'to' covers "
                                           "its whole day"),
    ("2026-03-29", "2026-03-28", "from 2026-03-29 is not before to 2026-03-28 (a date as 'to' covers"),
    (datetime(2026, 3, 29, 5), datetime(2026, 3, 29, 5), "from 2026-03-29T05:00:00 is not before to "
                                                         "2026-03-29T05:00:00$"),
])
def test_an_empty_range_names_the_bounds_given(app: App, start: object, end: object, message: str) -> None:
    hourly(app, tz="Europe/Berlin")
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(")):
        app.backfill("sync", start, end)


def test_windows_stored_under_another_expression_are_skipped_and_reported(
        app: App, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # Given the hourly windows of 2026-12-01, and then the expression changed to every two hours
    clock.set(NOW)
    hourly(app)
    assert app.backfill("sync", date(2026, 12, 1), date(2026, 12, 1)).enqueued == 24
    changed = App(app.store_url, clock=clock)
    hourly(changed, "0 */2 * * *")
    monkeypatch.setattr(backfill_module, "CHUNK", 5)  # conflicts in several chunks, and chunks after them
    # When the two days are backfilled under the new expression
    with caplog.at_level("WARNING", logger="firesafe.schedules"):
        result = changed.backfill("sync", date(2026, 12, 1), date(2026, 12, 2))
    # Then the 12 windows of the 1st, stored with other bounds, keep their jobs and are reported;
    # the 12 windows of the 2nd are enqueued all the same
    clashing = [f"sync@2026-12-01T{h:02}:00:00+00:00" for h in range(0, 24, 2)]
    assert (result.windows, result.enqueued, result.conflicts, result.skipped) == (24, 12, 12, 12)
    assert result.conflict_keys == clashing
    assert result.keys == [f"sync@2026-12-02T{h:02}:00:00+00:00" for h in range(0, 24, 2)]
    assert result.as_dict()["skipped_conflict"] == 12 and result.as_dict()["conflict_keys"] == clashing
    for key in clashing:  # the stored (hourly) bounds are kept
        start, end = (datetime.fromisoformat(b) for b in changed.get(key).args)
        assert end - start == timedelta(hours=1)
    assert changed.store.job_count(JobFilter(name="sync")) == 36
    assert sum("exists with other bounds" in r.message for r in caplog.records) == 12
    finished = changed.store.schedule_event_list(name="sync")[-1]
    assert finished.kind == "backfill_finished" and finished.detail["conflicts"] == 12
    # and a repeat enqueues nothing new and reports the same conflicts
    again = changed.backfill("sync", date(2026, 12, 1), date(2026, 12, 2))
    assert (again.enqueued, again.conflicts, again.active) == (0, 12, 12)
    changed.close()


@pytest.mark.parametrize(("start", "end", "starts"), [
    # 02:00 to 03:00 does not exist in Berlin on 2026-03-29: 02:30 is read as 03:00 summer time
    ("2026-03-29T02:30", "2026-03-29T05:00", ["03:00:00+02:00", "04:00:00+02:00"]),
    (datetime(2026, 3, 29, 2, 30), datetime(2026, 3, 29, 5), ["03:00:00+02:00", "04:00:00+02:00"]),
    ("2026-03-29T00:00", "2026-03-29T02:30", ["00:00:00+01:00", "01:00:00+01:00"]),
])
def test_a_bound_inside_a_daylight_saving_gap_is_the_first_instant_after_it(
        app: App, clock: FakeClock, start: object, end: object, starts: list[str]) -> None:
    clock.set(NOW)
    hourly(app, tz="Europe/Berlin")
    result = app.backfill("sync", start, end)
    assert result.keys == [f"sync@2026-03-29T{s}" for s in starts]
    assert app.get(result.keys[0]).state == State.QUEUED
