"""What alerts say and when: pure decisions about alert events (invariant 6), no store, no clock.

Kinds, their severity and whether they report a problem (``firing``), its end (``resolved``) or a
fact (``info``); how pending events are grouped into alerts so that a storm becomes a handful of
alerts that carry its count; when the failure-rate and stuck-queue rules fire and resolve.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

SEVERITIES = ("critical", "warning", "info")


@dataclass(frozen=True)
class Kind:
    severity: str
    status: str  # "firing", "resolved" or "info"
    what: str  # how an alert of this kind reads: "{n}" is the count, "{job}" the job name, "{subject}" what it names
    resolves: str | None = None  # the kind whose problem this one reports as over


#: Every kind of alert. Other parts record theirs with ``store.alert_record(kind, ...)``.
KINDS: dict[str, Kind] = {
    "dead_letter": Kind("critical", "firing", "{n} job(s) of {job} dead-lettered"),
    "failure_rate": Kind("warning", "firing", "failure rate of {job} above the threshold"),
    "failure_rate_resolved": Kind("info", "resolved", "failure rate of {job} back to normal", "failure_rate"),
    "queue_stuck": Kind("critical", "firing", "{subject} stuck"),
    "queue_stuck_resolved": Kind("info", "resolved", "{subject} moving again", "queue_stuck"),
    "schedule_missed": Kind("warning", "firing", "{n} window(s) of schedule {job} missed"),
    "backfill_started": Kind("info", "info", "backfill of {job} started"),
    "backfill_finished": Kind("info", "info", "backfill of {job} finished"),
    "breaker_opened": Kind("warning", "firing", "breaker of limiter {job} opened"),
    "breaker_closed": Kind("info", "resolved", "breaker of limiter {job} closed", "breaker_opened"),
    "test": Kind("info", "info", "test alert from firesafe"),
}


def fmt_count(n: int) -> str:
    """A count as people read it.

    >>> fmt_count(1000), fmt_count(7)
    ('1,000', '7')
    """
    return f"{n:,}"


#: Subjects (queues, ...) a title names; more are counted.
TITLE_SUBJECTS = 5


def subject_text(noun: str, subjects: Sequence[str]) -> str:
    """What a title names, as people read it.

    >>> subject_text("queue", ["payments"]), subject_text("queue", ["a", "b"])
    ('queue payments', 'queues a, b')
    >>> subject_text("queue", [f"q{i}" for i in range(7)])
    'queues q0, q1, q2, q3, q4 and 2 more'
    """
    names = list(dict.fromkeys(subjects))
    if len(names) == 1:
        return f"{noun} {names[0]}"
    shown = ", ".join(names[:TITLE_SUBJECTS])
    more = f" and {len(names) - TITLE_SUBJECTS} more" if len(names) > TITLE_SUBJECTS else ""
    return f"{noun}s {shown}{more}" if names else f"{noun}s"


def title(kind: str, job_name: str | None, count: int, subjects: Sequence[str] = (), why: str = "") -> str:
    """The one-line summary of an alert; ``subjects`` are the queues a stuck-queue alert names,
    ``why`` what is added after a colon.

    >>> title("dead_letter", "refund", 1000)
    '1,000 job(s) of refund dead-lettered'
    >>> title("failure_rate_resolved", "sync", 1)
    'failure rate of sync back to normal'
    >>> title("queue_stuck", None, 2, ["payments", "default"], "no live worker")
    'queues payments, default stuck: no live worker'
    """
    spec = KINDS.get(kind)
    what = spec.what if spec else kind.replace("_", " ")
    text = what.format(n=fmt_count(count), job=job_name or "-", subject=subject_text("queue", subjects))
    return f"{text}: {why}" if why else text


def worst(severities: Iterable[str]) -> str:
    """The most severe of several severities.

    >>> worst(["info", "critical", "warning"])
    'critical'
    """
    found = set(severities)
    return next((s for s in SEVERITIES if s in found), "info")


# -- grouping ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    """One pending alert event, as much of it as grouping needs: ``severity`` and ``muted`` are the
    verdict of the job's alert policy (see :mod:`firesafe.alerts.policy`)."""

    id: int
    kind: str
    job_name: str | None
    severity: str
    created_at: float
    muted: bool = False

    @property
    def group(self) -> GroupKey:
        return (self.kind, self.job_name, self.severity, self.muted)


@dataclass(frozen=True)
class Batch:
    """Events that leave as one alert: one kind, one job name, one severity, muted or not."""

    kind: str
    job_name: str | None
    severity: str
    event_ids: tuple[int, ...]
    first_at: float
    last_at: float
    muted: bool = False

    @property
    def count(self) -> int:
        return len(self.event_ids)


#: A group of events: (kind, job name, severity, muted). Events of different severities never
#: share an alert, nor do muted and sent ones.
GroupKey = tuple[str, str | None, str, bool]


def plan(pending: Sequence[Event], last_sent: Mapping[GroupKey, float], now: float, *, wait: float,
         interval: float, force: bool = False) -> list[Batch]:
    """Group pending events by kind, job name, severity and muting into the alerts to send now.

    A group leaves once its oldest event has waited ``wait`` seconds (so the events of a storm
    gather first) and at least ``interval`` seconds after the group's previous alert; all of its
    pending events leave together, as one alert that carries their count. ``force`` sends every
    group now. Groups that are not ready stay pending.

    >>> storm = [Event(i, "dead_letter", "refund", "critical", 100.0 + i / 100) for i in range(1000)]
    >>> [(b.kind, b.job_name, b.count) for b in plan(storm, {}, 115.0, wait=5, interval=60)]
    [('dead_letter', 'refund', 1000)]
    >>> plan(storm, {}, 102.0, wait=5, interval=60)   # still gathering
    []
    >>> key = ("dead_letter", "refund", "critical", False)
    >>> plan(storm, {key: 90.0}, 115.0, wait=5, interval=60)   # sent one at 90
    []
    >>> [b.count for b in plan(storm, {key: 50.0}, 115.0, wait=5, interval=60)]
    [1000]
    >>> mixed = storm[:2] + [Event(5000, "dead_letter", "refund", "info", 100.0, muted=True)]
    >>> [(b.severity, b.muted, b.count) for b in plan(mixed, {}, 115.0, wait=5, interval=60)]
    [('critical', False, 2), ('info', True, 1)]
    """
    groups: dict[GroupKey, list[Event]] = {}
    for e in pending:
        if e.created_at <= now or force:
            groups.setdefault(e.group, []).append(e)
    batches = []
    for key, events in groups.items():
        oldest = min(e.created_at for e in events)
        previous = last_sent.get(key)
        ready = force or (now >= oldest + wait and (previous is None or now >= previous + interval))
        if not ready:
            continue
        events.sort(key=lambda e: (e.created_at, e.id))
        batches.append(Batch(key[0], key[1], key[2], tuple(e.id for e in events), events[0].created_at,
                             events[-1].created_at, key[3]))
    batches.sort(key=lambda b: (b.first_at, b.event_ids[0]))
    return batches


def next_ready(pending: Sequence[Event], last_sent: Mapping[GroupKey, float], now: float, *, wait: float,
               interval: float) -> float:
    """How many seconds from ``now`` until :func:`plan` can have something to send: the earliest
    moment a pending group becomes ready, or ``wait`` (a new event's group is ready no sooner).

    >>> storm = [Event(i, "dead_letter", "refund", "critical", 100.0) for i in range(3)]
    >>> next_ready(storm, {}, 101.0, wait=5, interval=60)
    4.0
    >>> next_ready(storm, {("dead_letter", "refund", "critical", False): 90.0}, 101.0, wait=5, interval=60)
    5
    >>> next_ready([], {}, 101.0, wait=5, interval=60)
    5
    """
    soonest = wait
    oldest: dict[GroupKey, float] = {}
    for e in pending:
        oldest[e.group] = min(oldest.get(e.group, e.created_at), e.created_at)
    for key, first in oldest.items():
        previous = last_sent.get(key)
        at = max(first + wait, previous + interval if previous is not None else first)
        soonest = min(soonest, max(0.0, at - now))
    return soonest


# -- rules ---------------------------------------------------------------------------------------
#: A firing failure rate resolves once it falls to this fraction of its threshold (hysteresis: a
#: rate hovering at the threshold does not flap between firing and resolved).
RESOLVE_FRACTION = 0.5


def rate_transition(firing: bool, failures: int, total: int, threshold: float, min_attempts: int) -> str | None:
    """Whether a job name's failure rate fires (``"fire"``), resolves (``"resolve"``) or neither.

    It fires when at least ``min_attempts`` attempts ended in the window and more than
    ``threshold`` of them failed; it resolves when the rate falls to half the threshold or below
    (or nothing ran in the window).

    >>> rate_transition(False, 3, 10, 0.2, 10)
    'fire'
    >>> rate_transition(False, 3, 9, 0.2, 10) is None   # too few attempts to judge
    True
    >>> rate_transition(True, 2, 10, 0.2, 10) is None    # 0.2: below the threshold, not yet resolved
    True
    >>> rate_transition(True, 1, 10, 0.2, 10)
    'resolve'
    >>> rate_transition(True, 0, 0, 0.2, 10)
    'resolve'
    """
    rate = failures / total if total else 0.0
    if not firing:
        return "fire" if total >= max(1, min_attempts) and rate > threshold else None
    return "resolve" if rate <= threshold * RESOLVE_FRACTION else None


def stuck_reason(oldest_age: float | None, live_workers: int, stuck_after: float,
                 no_worker_after: float) -> str | None:
    """Why a queue is stuck (``"too_old"``, ``"no_worker"``), or None if it is not.

    ``oldest_age`` is how long its oldest runnable job has been due (None: nothing runnable).

    >>> stuck_reason(None, 0, 900, 90) is None
    True
    >>> stuck_reason(1000, 2, 900, 90)
    'too_old'
    >>> stuck_reason(120, 0, 900, 90)
    'no_worker'
    >>> stuck_reason(30, 0, 900, 90) is None
    True
    """
    if oldest_age is None:
        return None
    if live_workers == 0 and oldest_age >= min(no_worker_after, stuck_after):
        return "no_worker"
    if oldest_age >= stuck_after:
        return "too_old"
    return None
