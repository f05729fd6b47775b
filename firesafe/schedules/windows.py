"""Schedule windows: pure arithmetic over a cron expression in a time zone (invariant 6).

A schedule *fires* at the instants its cron expression names in its time zone. Window *i* runs from
fire *i* to fire *i + 1*; it is due (enqueued) at its end, so the job of a window always sees a
complete interval. Instants are whole seconds since the epoch; :class:`Window` carries them as aware
datetimes with the fixed UTC offset in force at each instant, so comparing and subtracting them is
exact across daylight-saving changes.

Daylight-saving time follows cron's long-standing rule:

- a schedule that fires every hour or more often (its hour field matches every hour, like ``*``)
  follows real elapsed time: a skipped local time does not fire, a repeated local time fires twice.
  In Europe/Berlin an hourly schedule has 23 windows on the spring-forward day and 25 on the
  fall-back day;
- any other schedule is a fixed-time schedule: each matching local time fires exactly once. A local
  time that is skipped fires at the first valid instant after the gap; a local time that repeats
  fires at its first occurrence.

>>> berlin = Cron("30 2 * * *", "Europe/Berlin")
>>> [f.isoformat() for f in berlin.fires(parse("2026-03-28T00:00:00+01:00"), parse("2026-03-31T00:00:00+02:00"))]
['2026-03-28T02:30:00+01:00', '2026-03-29T03:00:00+02:00', '2026-03-30T02:30:00+02:00']
>>> hourly = Cron("0 * * * *", "Europe/Berlin")
>>> len(hourly.fires(parse("2026-10-25T00:00:00+02:00"), parse("2026-10-26T00:00:00+01:00")))
25
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from firesafe.errors import ConfigError

_DAY = timedelta(days=1)
#: How far ahead (in days) a search for the next or previous fire gives up: a "29 Feb" schedule
#: fires every 4 years, at worst 8.
MAX_DAYS = 366 * 9


@lru_cache(maxsize=256)
def fixed_offset(seconds: int) -> timezone:
    """The fixed-offset time zone of an offset in seconds (cached: windows share a handful)."""
    return UTC if seconds == 0 else timezone(timedelta(seconds=seconds))


def load_zone(name: object) -> ZoneInfo:
    """The IANA time zone ``name``, or a clear :class:`ConfigError`.

    >>> load_zone("Europe/Berlin")
    zoneinfo.ZoneInfo(key='Europe/Berlin')
    >>> load_zone("Mars/Olympus")
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: unknown time zone 'Mars/Olympus': ...
    """
    if isinstance(name, ZoneInfo):
        return name
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"a time zone must be an IANA name like 'Europe/Berlin' or 'UTC', not {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigError(f"unknown time zone {name!r}: use an IANA name like 'Europe/Berlin', "
                          "'America/New_York' or 'UTC'") from None


def parse(text: str) -> datetime:
    """An aware datetime from ISO text (helper for examples and tests)."""
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset")
    return value


def at(ts: int | float, zone: tzinfo) -> datetime:
    """The instant ``ts`` as an aware datetime carrying the fixed offset ``zone`` has then.

    >>> at(1792886400, ZoneInfo("Europe/Berlin")).isoformat()
    '2026-10-25T02:00:00+02:00'
    >>> at(1792890000, ZoneInfo("Europe/Berlin")).isoformat()
    '2026-10-25T02:00:00+01:00'
    """
    local = datetime.fromtimestamp(ts, zone)
    offset = local.utcoffset()
    assert offset is not None
    return local.replace(tzinfo=fixed_offset(int(offset.total_seconds())), fold=0)


def local_instant(naive: datetime, zone: tzinfo) -> datetime:
    """The instant a wall time of ``zone`` names, by the same rule as a fixed-time schedule: a wall
    time that is skipped (a daylight-saving gap) is the first valid instant after the gap; one that
    happens twice is its first occurrence. Carries the fixed UTC offset in force then.

    >>> berlin = ZoneInfo("Europe/Berlin")
    >>> local_instant(datetime(2026, 3, 29, 2, 30), berlin).isoformat()
    '2026-03-29T03:00:00+02:00'
    >>> local_instant(datetime(2026, 10, 25, 2, 30), berlin).isoformat()
    '2026-10-25T02:30:00+02:00'
    >>> local_instant(datetime(2026, 11, 1, 0, 0, 0, 250000), berlin).isoformat()
    '2026-11-01T00:00:00.250000+01:00'
    """
    a = naive.replace(tzinfo=zone, fold=0)
    b = naive.replace(tzinfo=zone, fold=1)
    off_a, off_b = a.utcoffset(), b.utcoffset()
    assert off_a is not None and off_b is not None
    if off_a < off_b:  # skipped: the gap ends between the two readings of this wall time
        return at(gap_end(zone, math.floor(b.timestamp()), math.ceil(a.timestamp()), off_b), zone)
    return naive.replace(tzinfo=fixed_offset(int(off_a.total_seconds())), fold=0)


def gap_end(zone: tzinfo, lo: int, hi: int, after: timedelta) -> int:
    """The first instant in (lo, hi] whose UTC offset in ``zone`` is ``after``: the end of a DST gap."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, zone).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class Window:
    """One window of a schedule: from ``start`` (included) to ``end`` (excluded), aware datetimes.

    The job of the window is keyed ``<schedule>@<start isoformat>``, so it runs at most once.
    """

    start: datetime
    end: datetime
    schedule: str = ""

    @property
    def key(self) -> str:
        return window_key(self.schedule, self.start)


def window_key(schedule: str, start: datetime) -> str:
    """The job key of a window.

    >>> window_key("nightly_sync", parse("2026-11-30T02:00:00+01:00"))
    'nightly_sync@2026-11-30T02:00:00+01:00'
    """
    return f"{schedule}@{start.isoformat()}"


def _to_ts(value: datetime | float | int) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("datetimes must be timezone-aware")
        return value.timestamp()
    return float(value)


class Cron:
    """A cron expression in a time zone: when it fires, and the windows between its fires.

    Five fields (minute hour day-of-month month day-of-week), or six with a leading seconds field.
    Every method is pure: it reads no clock.
    """

    def __init__(self, expression: str, tz: str | ZoneInfo = "UTC") -> None:
        if not isinstance(expression, str):
            raise ConfigError(f"a cron expression must be a string, not {type(expression).__name__}")
        self.expression = " ".join(expression.split())
        try:
            sim = CronSim(self.expression, datetime(2000, 1, 1))
        except (CronSimError, ValueError, IndexError) as exc:
            why = str(exc) or type(exc).__name__
            raise ConfigError(
                f"invalid cron expression {expression!r}: {why} (write five fields, minute hour "
                "day-of-month month day-of-week, like '0 2 * * *'; an optional leading sixth field "
                "gives seconds)") from None
        self.zone = load_zone(tz)
        self.tz = self.zone.key
        hours = set(sim.hours)
        #: True when it fires every hour or more often: it then follows real elapsed time across DST.
        self.follows_elapsed_time = hours == set(range(24))
        self._months = frozenset(sim.months)
        self._match_day = sim.match_day
        self._offsets = sorted(h * 3600 + m * 60 + s for h in hours for m in sim.minutes for s in sim.seconds)
        self._day_cache: dict[date, tuple[list[int], bool]] = {}

    def __repr__(self) -> str:
        return f"Cron({self.expression!r}, {self.tz!r})"

    # -- one local day -----------------------------------------------------------------------------
    def _day(self, d: date) -> tuple[list[int], bool]:
        """The fires of local date ``d`` (sorted) and whether the day has a UTC-offset change."""
        cached = self._day_cache.get(d)
        if cached is not None:
            return cached
        if d.month not in self._months or not self._match_day(d):
            result: tuple[list[int], bool] = ([], False)
        else:
            midnight = datetime.combine(d, time())
            first = midnight.replace(tzinfo=self.zone)
            nxt = datetime.combine(d + _DAY, time())
            u0 = int(first.timestamp())
            steady = (first.utcoffset() == midnight.replace(tzinfo=self.zone, fold=1).utcoffset()
                      == nxt.replace(tzinfo=self.zone).utcoffset() == nxt.replace(tzinfo=self.zone, fold=1).utcoffset()
                      and int(nxt.replace(tzinfo=self.zone).timestamp()) - u0 == 86400)
            if steady:
                result = ([u0 + off for off in self._offsets], False)
            else:
                fires: set[int] = set()
                for off in self._offsets:
                    fires.update(self._resolve(midnight + timedelta(seconds=off)))
                result = (sorted(fires), True)
        if len(self._day_cache) > 64:
            self._day_cache.clear()
        self._day_cache[d] = result
        return result

    def _resolve(self, naive: datetime) -> list[int]:
        """The instants a local wall time fires at, by the DST rule (0, 1 or 2 of them)."""
        a = naive.replace(tzinfo=self.zone)
        b = naive.replace(tzinfo=self.zone, fold=1)
        off_a, off_b = a.utcoffset(), b.utcoffset()
        assert off_a is not None and off_b is not None
        if off_a == off_b:
            return [int(a.timestamp())]
        if off_a > off_b:  # repeated (fall back): fold 0 is the first occurrence
            return [int(a.timestamp()), int(b.timestamp())] if self.follows_elapsed_time else [int(a.timestamp())]
        if self.follows_elapsed_time:  # skipped (spring forward): no such instant
            return []
        return [gap_end(self.zone, int(b.timestamp()), int(a.timestamp()), off_b)]

    def _local_date(self, ts: int) -> date:
        return datetime.fromtimestamp(ts, self.zone).date()

    # -- fires -------------------------------------------------------------------------------------
    def iter_fires(self, after: datetime | float, *, inclusive: bool = False) -> Iterator[int]:
        """Fires (epoch seconds) after ``after`` (or at it, with ``inclusive``), in order, for ever."""
        t = _to_ts(after)
        first = math.ceil(t) if inclusive else math.floor(t) + 1
        d = self._local_date(first) - _DAY
        pending: list[int] = []
        last = None
        empty_days = 0
        while True:
            fires, shifted = self._day(d)
            bound = int(datetime.combine(d + _DAY, time(), tzinfo=self.zone).timestamp())
            if shifted or pending:
                for f in fires:
                    if f >= first:
                        heapq.heappush(pending, f)
                ready = []
                while pending and pending[0] < bound:
                    ready.append(heapq.heappop(pending))
            else:
                ready = fires[bisect_left(fires, first):] if fires and fires[0] < first else fires
            for f in ready:
                if f != last:
                    last = f
                    yield f
            empty_days = 0 if ready or pending else empty_days + 1
            if empty_days > MAX_DAYS:
                return
            d += _DAY

    def next_fire(self, after: datetime | float) -> int | None:
        """The first fire strictly after ``after`` (None if there is none within 9 years)."""
        return next(self.iter_fires(after), None)

    def prev_fire(self, before: datetime | float) -> int | None:
        """The last fire strictly before ``before`` (None if there is none within 9 years)."""
        t = _to_ts(before)
        # Days are in order but around a DST change, where a day's last instants may come after the
        # next day's first ones: so look from the day after, and one unshifted day past a find.
        d = self._local_date(math.floor(t)) + _DAY
        best: int | None = None
        found = False
        for _ in range(MAX_DAYS):
            fires, shifted = self._day(d)
            i = bisect_left(fires, t)
            if i and (best is None or fires[i - 1] > best):
                best = fires[i - 1]
            if found and not shifted:
                return best
            found = best is not None
            d -= _DAY
        return best

    def fires(self, start: datetime | float, end: datetime | float) -> list[datetime]:
        """The fires in [start, end), as aware datetimes."""
        stop = _to_ts(end)
        out = []
        for f in self.iter_fires(start, inclusive=True):
            if f >= stop:
                break
            out.append(at(f, self.zone))
        return out

    # -- windows -----------------------------------------------------------------------------------
    def windows_ending(self, after: float, until: float, limit: int | None = None) -> list[tuple[int, int]]:
        """Windows ``(start, end)`` whose end is in (after, until], oldest first, at most ``limit``."""
        out: list[tuple[int, int]] = []
        prev: int | None = None
        for f in self.iter_fires(after):
            if f > until or (limit is not None and len(out) >= limit):
                break
            if prev is None:
                prev = self.prev_fire(f)
                if prev is None:
                    prev = f
                    continue
            out.append((prev, f))
            prev = f
        return out

    def iter_windows_starting(self, start: float, end: float) -> Iterator[tuple[int, int]]:
        """Windows ``(start, end)`` whose start is in [start, end), oldest first."""
        prev: int | None = None
        for f in self.iter_fires(start, inclusive=True):
            if prev is not None:
                yield prev, f
            if f >= end:
                return
            prev = f

    def window_at(self, t: float) -> tuple[int, int] | None:
        """The window in progress at ``t``: start <= t < end."""
        end = self.next_fire(t)
        start = self.prev_fire(math.floor(t) + 1)
        if start is None or end is None:
            return None
        return start, end

    def iso(self, ts: int | float) -> str:
        """The instant ``ts`` in ISO form with the offset in force then (as in window keys).

        >>> Cron("0 * * * *", "Europe/Berlin").iso(1792890000)
        '2026-10-25T02:00:00+01:00'
        """
        return datetime.fromtimestamp(ts, self.zone).isoformat()

    def window(self, bounds: tuple[int, int], schedule: str = "") -> Window:
        """A :class:`Window` of aware datetimes from epoch-second bounds."""
        return Window(at(bounds[0], self.zone), at(bounds[1], self.zone), schedule)
