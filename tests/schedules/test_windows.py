"""Pure window arithmetic: cron fires, windows and daylight-saving time, with no store and no clock."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firesafe import ConfigError
from firesafe.schedules.plan import decide
from firesafe.schedules.windows import Cron, at, local_instant


def day_fires(expr: str, tz: str, day: str) -> list[str]:
    """The fires of one local day, as local ISO times with their offsets."""
    zone = ZoneInfo(tz)
    d = date.fromisoformat(day)
    start = datetime.combine(d, time(), tzinfo=zone)
    end = datetime.combine(d + timedelta(days=1), time(), tzinfo=zone)
    return [f.isoformat() for f in Cron(expr, tz).fires(start, end)]


# -- DST: a fixed-time daily schedule runs exactly once on days whose local time is skipped or repeated --
@pytest.mark.parametrize(("tz", "day", "expected"), [
    # Europe/Berlin springs forward at 02:00 -> 03:00: 02:30 does not exist; first valid instant is 03:00
    ("Europe/Berlin", "2026-03-29", ["2026-03-29T03:00:00+02:00"]),
    # Europe/Berlin falls back at 03:00 -> 02:00: 02:30 happens twice; it runs at the first one
    ("Europe/Berlin", "2026-10-25", ["2026-10-25T02:30:00+02:00"]),
    ("Europe/Berlin", "2026-10-26", ["2026-10-26T02:30:00+01:00"]),
    # America/New_York springs forward at 02:00 -> 03:00: 02:30 is skipped, runs at 03:00 EDT
    ("America/New_York", "2026-03-08", ["2026-03-08T03:00:00-04:00"]),
    # America/New_York falls back at 02:00 -> 01:00: 02:30 happens once (EST), the day stays single
    ("America/New_York", "2026-11-01", ["2026-11-01T02:30:00-05:00"]),
])
def test_daily_0230_runs_exactly_once_across_dst(tz: str, day: str, expected: list[str]) -> None:
    assert day_fires("30 2 * * *", tz, day) == expected


def test_daily_0130_in_new_york_fall_back_runs_at_the_first_occurrence() -> None:
    assert day_fires("30 1 * * *", "America/New_York", "2026-11-01") == ["2026-11-01T01:30:00-04:00"]


@pytest.mark.parametrize(("tz", "day", "windows"), [
    ("Europe/Berlin", "2026-03-28", 24), ("Europe/Berlin", "2026-03-29", 23), ("Europe/Berlin", "2026-10-25", 25),
    ("America/New_York", "2026-03-08", 23), ("America/New_York", "2026-11-01", 25),
    ("America/New_York", "2026-11-02", 24),
])
def test_hourly_schedule_follows_real_elapsed_time(tz: str, day: str, windows: int) -> None:
    fires = day_fires("0 * * * *", tz, day)
    assert len(fires) == windows
    instants = [datetime.fromisoformat(f).timestamp() for f in fires]
    assert all(b - a == 3600 for a, b in itertools.pairwise(instants))  # one real hour apart


def test_hourly_windows_on_the_berlin_fall_back_day_are_25_real_hours() -> None:
    cron = Cron("0 * * * *", "Europe/Berlin")
    start = datetime(2026, 10, 25, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()
    end = datetime(2026, 10, 26, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()
    windows = [cron.window(w, "hourly") for w in cron.iter_windows_starting(start, end)]
    assert len(windows) == 25
    assert all(w.end - w.start == timedelta(hours=1) for w in windows)  # exact across the change
    keys = [w.key for w in windows]
    assert keys[2:4] == ["hourly@2026-10-25T02:00:00+02:00", "hourly@2026-10-25T02:00:00+01:00"]
    assert len(set(keys)) == 25


def test_every_five_minutes_skips_and_repeats_with_the_clock() -> None:
    assert len(day_fires("*/5 * * * *", "Europe/Berlin", "2026-03-29")) == 23 * 12
    assert len(day_fires("*/5 * * * *", "Europe/Berlin", "2026-10-25")) == 25 * 12


def test_windows_around_a_fall_back_hour_are_contiguous_and_ordered() -> None:
    cron = Cron("*/5 * * * *", "Europe/Berlin")
    after = datetime.fromisoformat("2026-10-25T02:30:00+02:00").timestamp()  # inside the repeated hour
    until = datetime.fromisoformat("2026-10-25T02:30:00+01:00").timestamp()
    windows = cron.windows_ending(after, until)
    assert len(windows) == 12  # one real hour of 5-minute windows
    assert all(a[1] == b[0] for a, b in itertools.pairwise(windows))
    assert cron.iso(windows[0][0]) == "2026-10-25T02:30:00+02:00"
    assert cron.iso(windows[-1][1]) == "2026-10-25T02:30:00+01:00"


def test_next_and_previous_fire() -> None:
    cron = Cron("30 2 * * *", "Europe/Berlin")
    t = datetime.fromisoformat("2026-03-29T01:00:00+01:00")
    assert at(cron.next_fire(t), cron.zone).isoformat() == "2026-03-29T03:00:00+02:00"
    assert at(cron.prev_fire(t), cron.zone).isoformat() == "2026-03-28T02:30:00+01:00"
    nxt = cron.next_fire(t)
    assert cron.prev_fire(nxt + 1) == nxt and cron.next_fire(nxt) != nxt
    assert cron.window_at(nxt) == (nxt, cron.next_fire(nxt))


@pytest.mark.parametrize(("tz", "wall", "instant"), [
    ("Europe/Berlin", "2026-03-29T02:30", "2026-03-29T03:00:00+02:00"),  # skipped: the end of the gap
    ("Europe/Berlin", "2026-03-29T02:00", "2026-03-29T03:00:00+02:00"),
    ("Europe/Berlin", "2026-03-29T03:00", "2026-03-29T03:00:00+02:00"),
    ("America/New_York", "2026-03-08T02:59:59.5", "2026-03-08T03:00:00-04:00"),
    ("Australia/Lord_Howe", "2026-10-04T02:15", "2026-10-04T02:30:00+11:00"),  # a half-hour gap
    ("Europe/Berlin", "2026-10-25T02:30", "2026-10-25T02:30:00+02:00"),  # repeated: the first occurrence
    ("Europe/Berlin", "2026-11-01T00:00:00.250", "2026-11-01T00:00:00.250000+01:00"),
])
def test_a_wall_time_is_read_as_a_fixed_time_schedule_reads_it(tz: str, wall: str, instant: str) -> None:
    assert local_instant(datetime.fromisoformat(wall), ZoneInfo(tz)).isoformat() == instant


def test_rare_schedules() -> None:
    leap = Cron("0 0 29 2 *")
    assert at(leap.next_fire(datetime(2026, 1, 1, tzinfo=UTC)), UTC).date() == date(2028, 2, 29)
    assert at(leap.prev_fire(datetime(2026, 1, 1, tzinfo=UTC)), UTC).date() == date(2024, 2, 29)
    weekdays = Cron("0 9 * * MON-FRI", "America/New_York")
    fires = weekdays.fires(datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 12, 7, tzinfo=UTC))
    assert [f.strftime("%a %H:%M%z") for f in fires] == [
        "Mon 09:00-0500", "Tue 09:00-0500", "Wed 09:00-0500", "Thu 09:00-0500", "Fri 09:00-0500"]
    seconds = Cron("*/10 * * * * *")  # six fields: seconds first
    assert len(seconds.fires(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 0, 1, tzinfo=UTC))) == 6


@pytest.mark.parametrize(("expr", "tz", "message"), [
    ("0 2 * *", "UTC", "invalid cron expression"),
    ("61 * * * *", "UTC", "invalid cron expression"),
    ("every day", "UTC", "invalid cron expression"),
    ("0 2 * * *", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
    ("0 2 * * *", "", "time zone must be"),
])
def test_bad_expressions_and_zones_are_clear_errors(expr: str, tz: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Cron(expr, tz)


# -- properties --------------------------------------------------------------------------------------
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu", "America/Santiago"]
EXPRESSIONS = ["*/5 * * * *", "0 * * * *", "30 2 * * *", "0 0 * * *", "15,45 1-3 * * *", "0 */2 * * *",
               "*/20 * * * * *", "0 12 1 * *", "30 0 * * SUN"]


@settings(max_examples=60, deadline=None)
@given(expr=st.sampled_from(EXPRESSIONS), tz=st.sampled_from(ZONES),
       start=st.integers(1_700_000_000, 1_900_000_000), span=st.integers(60, 3 * 86400))
def test_windows_are_contiguous_ordered_and_match_the_expression(expr: str, tz: str, start: int, span: int) -> None:
    cron = Cron(expr, tz)
    windows = cron.windows_ending(start, start + span, limit=5000)
    assert all(s < e for s, e in windows)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(windows))
    assert all(start < e <= start + span for _, e in windows)
    if windows:
        assert cron.next_fire(start) == windows[0][1]
        assert cron.prev_fire(windows[0][1]) == windows[0][0]
    keys = [cron.iso(s) for s, _ in windows]
    assert len(set(keys)) == len(keys)  # a window's key names one instant
    if cron.follows_elapsed_time:  # every fire is a real instant whose local time matches
        wall = Cron(expr)  # the same expression on wall-clock times (UTC has no DST)
        for _, e in windows[:50]:
            local = datetime.fromtimestamp(e, cron.zone).replace(tzinfo=UTC)
            assert wall.next_fire(local - timedelta(seconds=1)) == int(local.timestamp())


@settings(max_examples=60, deadline=None)
@given(policy=st.sampled_from(["all", "latest", "skip"]), down=st.integers(0, 2 * 86400),
       window=st.integers(0, 86400), grace=st.integers(0, 600))
def test_a_tick_decides_every_due_window_exactly_once(policy: str, down: int, window: int, grace: int) -> None:
    cron = Cron("*/5 * * * *")
    cursor = 1_800_000_000.0
    plan = decide(cron, cursor=cursor, now=cursor + down, catchup=policy, catchup_window=window, grace=grace)
    due = cron.windows_ending(cursor, cursor + down)
    decided = sorted(plan.enqueue + [w for w, _ in plan.missed])
    assert decided == due  # each due window once: enqueued or missed
    assert cursor <= plan.cursor <= cursor + down
    if policy == "skip":
        assert all(e >= cursor + down - grace for _, e in plan.enqueue)
    if policy == "latest" and due:
        assert len([w for w in plan.enqueue if w[1] < cursor + down - grace]) <= 1
    again = decide(cron, cursor=plan.cursor, now=cursor + down, catchup=policy, catchup_window=window, grace=grace)
    assert not again.enqueue and not again.missed  # a restart decides nothing new
