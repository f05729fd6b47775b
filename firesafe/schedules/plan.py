"""What the scheduler does with the windows that came due: a pure decision (invariant 6).

The scheduler remembers a *cursor* per schedule: every window that ended at or before it has been
decided (enqueued or recorded as missed). On each tick, the windows that ended since then, up to
``now``, are decided by the catch-up policy:

- a window found within ``grace`` of its end is *on time* and always enqueued;
- an older one is *late* (no scheduler ran when it came due): ``all`` enqueues every late window
  that ended within ``catchup_window``, ``latest`` only the most recent due window, ``skip`` none;
- late windows not enqueued, and every window that ended before ``catchup_window``, are missed.

>>> from firesafe.schedules.windows import Cron
>>> five = Cron("*/5 * * * *")
>>> noon = 1_800_000_000 - 1_800_000_000 % 86400 + 43200  # a UTC noon
>>> p = decide(five, cursor=noon, now=noon + 3 * 3600 + 150, catchup="all", catchup_window=86400, grace=60)
>>> len(p.enqueue), len(p.missed)
(36, 0)
>>> p = decide(five, cursor=noon, now=noon + 3 * 3600 + 150, catchup="latest", catchup_window=86400, grace=60)
>>> len(p.enqueue), len(p.missed), p.enqueue[0][1] == noon + 3 * 3600
(1, 35, True)
>>> p = decide(five, cursor=noon, now=noon + 3 * 3600 + 150, catchup="skip", catchup_window=86400, grace=60)
>>> len(p.enqueue), len(p.missed), p.cursor == noon + 3 * 3600
(0, 36, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from firesafe.schedules.windows import Cron

CATCHUP_POLICIES = ("all", "latest", "skip")
#: Most windows one tick decides; the next tick goes on where it stopped.
TICK_LIMIT = 10_000

#: Why a window was missed.
OUTSIDE_WINDOW = "outside_catchup_window"
POLICY_LATEST = "catchup_latest"
POLICY_SKIP = "catchup_skip"


@dataclass(frozen=True)
class Plan:
    """The decision of one tick: windows ``(start, end)`` in epoch seconds."""

    enqueue: list[tuple[int, int]] = field(default_factory=list)
    missed: list[tuple[tuple[int, int], str]] = field(default_factory=list)
    cursor: float = 0.0  # the new cursor: every window ending at or before it is decided
    more: bool = False  # more due windows remain than one tick decides
    unrecorded: bool = False  # windows older than the catch-up window were too many to record one by one

    @property
    def changed(self) -> bool:
        return bool(self.enqueue or self.missed or self.unrecorded)


def decide(cron: Cron, *, cursor: float, now: float, catchup: str, catchup_window: float, grace: float,
           limit: int = TICK_LIMIT) -> Plan:
    """Decide the windows that ended in (cursor, now]: which to enqueue, which are missed."""
    if catchup not in CATCHUP_POLICIES:
        raise ValueError(f"unknown catch-up policy {catchup!r}")
    if now <= cursor:
        return Plan(cursor=cursor)
    horizon = now - max(catchup_window, grace)  # windows that ended at or before it are too old
    missed: list[tuple[tuple[int, int], str]] = []
    start = cursor
    unrecorded = False
    if cursor < horizon:
        old = cron.windows_ending(cursor, horizon, limit + 1)
        if len(old) > limit:
            old, unrecorded = old[:limit], True
        missed.extend((w, OUTSIDE_WINDOW) for w in old)
        start = horizon  # every window ending at or before the horizon is decided: missed
    recent = cron.windows_ending(start, now, limit + 1)
    more = len(recent) > limit
    recent = recent[:limit]
    late = [w for w in recent if w[1] < now - grace]
    on_time = [w for w in recent if w[1] >= now - grace]
    if catchup == "all":
        enqueue = late + on_time
    elif catchup == "latest":
        if on_time or more:
            missed.extend((w, POLICY_LATEST) for w in late)
            enqueue = on_time
        else:
            missed.extend((w, POLICY_LATEST) for w in late[:-1])
            enqueue = late[-1:]
    else:
        missed.extend((w, POLICY_SKIP) for w in late)
        enqueue = on_time
    new_cursor = recent[-1][1] if recent else start
    return Plan(enqueue=enqueue, missed=missed, cursor=max(cursor, new_cursor), more=more, unrecorded=unrecorded)
