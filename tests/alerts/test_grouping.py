"""Pure decisions of the alerts part (invariant 6): grouping, rules, and what an alert says."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from firesafe.alerts import render
from firesafe.alerts.grouping import Event, GroupKey, plan, rate_transition
from firesafe.alerts.store import OutboxEvent
from firesafe.models import Attempt, Job
from firesafe.states import State


def simulate(times: list[tuple[Any, ...]], *, wait: float, interval: float, poll: float,
             until: float) -> list[tuple[float, GroupKey, tuple[int, ...]]]:
    """A dispatcher polling ``plan`` every ``poll`` seconds over events arriving at ``times``:
    ``(at, kind, job)`` or ``(at, kind, job, severity, muted)``."""
    def event(i: int, t: tuple[Any, ...]) -> Event:
        severity, muted = (t[3], t[4]) if len(t) > 3 else ("critical", False)
        return Event(i, t[1], t[2], severity, t[0], muted)

    pending = [event(i, t) for i, t in enumerate(times)]
    last: dict[GroupKey, float] = {}
    sent = []
    now = 0.0
    while now <= until:
        arrived = [e for e in pending if e.created_at <= now]
        for b in plan(arrived, last, now, wait=wait, interval=interval):
            key = (b.kind, b.job_name, b.severity, b.muted)
            last[key] = now
            sent.append((now, key, b.event_ids))
            gone = set(b.event_ids)
            pending = [e for e in pending if e.id not in gone]
        now += poll
    return sent


def test_a_storm_of_a_thousand_failures_over_ten_minutes_is_a_handful_of_alerts() -> None:
    times = [(i * 0.6, "dead_letter", "refund") for i in range(1000)]  # one failure every 0.6 s for 10 minutes
    sent = simulate(times, wait=5, interval=60, poll=0.5, until=700)
    assert sum(len(ids) for _, _, ids in sent) == 1000
    assert len(sent) <= 11  # the first after 5 s, then at most one a minute
    assert sent[0][0] == 5.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 300), st.sampled_from(["dead_letter", "queue_stuck"]),
                          st.sampled_from(["a", "b", None]), st.sampled_from(["critical", "warning", "info"]),
                          st.booleans()), max_size=200),
       st.floats(0, 30), st.floats(1, 120))
def test_every_event_leaves_once_and_a_group_never_sends_faster_than_its_interval(
        times: list[tuple[float, str, str | None, str, bool]], wait: float, interval: float) -> None:
    sent = simulate(times, wait=wait, interval=interval, poll=1.0, until=300 + wait + interval + 2)
    ids = [i for _, _, batch in sent for i in batch]
    assert sorted(ids) == list(range(len(times))), "each event in exactly one alert"
    for _, (kind, job, severity, muted), batch in sent:  # one alert = one severity, muted or not
        assert {times[i][1:5] for i in batch} == {(kind, job, severity, muted)}
    for key in {k for _, k, _ in sent}:
        at = [t for t, k, _ in sent if k == key]
        assert all(b - a >= interval - 1e-9 for a, b in pairwise(at))
    for t, _, batch in sent:
        assert all(times[i][0] <= t for i in batch), "nothing leaves before it happened"
        assert t >= min(times[i][0] for i in batch) + wait - 1e-9, "a group waits for its storm to gather"


def test_rate_transitions_fire_once_then_resolve_once() -> None:
    firing, moves = False, []
    for failures, total in [(0, 20), (4, 24), (8, 28), (18, 38), (18, 78), (0, 50), (0, 0)]:
        move = rate_transition(firing, failures, total, 0.2, 10)
        if move:
            moves.append(move)
            firing = move == "fire"
    assert moves == ["fire", "resolve"]


def _job(n_attempts: int, secret_tb: bool = True) -> Job:
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    trace = [Attempt(seq=i, attempt=i, worker="host:1", started_at=at, ended_at=at, outcome="failed",
                     error_type="RuntimeError", message=f"boom {i} password=hunter2",
                     traceback=("x" * 10_000 + " token=abc123\nRuntimeError: boom") if secret_tb else None)
             for i in range(1, n_attempts + 1)]
    return Job(id=1, key="refund:o-1", name="refund", queue="default", state=State.DEAD, args=["o-1", "sk_live"],
               kwargs={"note": "x", "api_key": "k"}, arg_names=["order_id", "password"], attempt=n_attempts,
               max_attempts=n_attempts, runs=n_attempts, deferrals=0, lost=0, run_at=at, created_at=at,
               updated_at=at, finished_at=at, error_type="RuntimeError", error_message="boom password=hunter2",
               reason="exhausted", trace=trace)


def test_the_document_carries_a_bounded_masked_trace() -> None:
    events = [OutboxEvent(1, "dead_letter", "critical", "refund", 1, ["refund:o-1"],
                          {"error_type": "RuntimeError", "reason": "exhausted"}, 1_800_000_000.0)]
    doc = render.build("dead_letter", "refund", "critical", events, [_job(3)], dashboard="https://ops.example.com/fs")
    [job] = doc["jobs"]
    assert job["arguments"] == {"order_id": "o-1", "password": "********", "note": "x", "api_key": "********"}
    assert [a["message"] for a in job["attempts"]] == [f"boom {i} password=********" for i in (1, 2, 3)]
    last, first = job["attempts"][-1]["traceback"], job["attempts"][0]["traceback"]
    assert len(last) < render.TRACEBACK_LAST + 40 and len(first) < render.TRACEBACK_EARLIER + 40
    assert last.endswith("RuntimeError: boom") and "abc123" not in last and "token=********" in last
    text = render.to_text(doc)
    slack = str(render.to_slack(doc))
    for rendered in (str(doc), text, slack):
        assert "hunter2" not in rendered and "sk_live" not in rendered and "abc123" not in rendered
    assert "firesafe show refund:o-1" in text and "#3 attempt 3" in text
    assert job["dashboard"] == "https://ops.example.com/fs/job?key=refund%3Ao-1"
    assert job["dashboard"] in text and job["dashboard"] in slack
    assert render.subject(doc) == "[firesafe] CRITICAL dead_letter: 1 job(s) of refund dead-lettered"


def test_a_job_with_very_many_attempts_keeps_the_first_and_the_last() -> None:
    doc = render.build("dead_letter", "refund", "critical", [], [_job(80, secret_tb=False)])
    [job] = doc["jobs"]
    seqs = [a["seq"] for a in job["attempts"]]
    assert len(seqs) == render.MAX_ATTEMPTS and job["attempts_omitted"] == 30
    assert seqs[:3] == [1, 2, 3] and seqs[-1] == 80
