"""Contract: the alert outbox, grouping, delivery leases and rules. Runs on every store."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from firesafe import App, Backoff, InvalidInput, State
from firesafe.alerts import DeliveryError, Sink
from firesafe.alerts.grouping import fmt_count
from firesafe.alerts.store import NewAlert
from firesafe.states import Outcome
from firesafe.store.base import ClaimParams, FinishParams, RescueParams

NO_WAIT = Backoff(base=0.0, cap=0.0, jitter="none")


class Collect(Sink):
    """A sink that keeps what it is given, and fails while ``failing`` is set."""

    kind = "collect"

    def __init__(self, name: str = "collect") -> None:
        super().__init__(name)
        self.got: list[dict[str, Any]] = []
        self.failing: str | None = None

    def deliver(self, document: Mapping[str, Any], attempt: int = 1) -> None:
        if self.failing:
            raise DeliveryError(self.failing)
        self.got.append(dict(document))


@contextmanager
def transaction(store: Any) -> Iterator[Any]:
    """An open transaction of the store, as a part's own store method would hold it."""
    if store.dialect == "sqlite":
        with store._tx() as c:
            yield c
    else:
        with store._conn() as c, c.transaction():
            yield c


def pending_kinds(app: App) -> list[tuple[str, str | None, list[str]]]:
    return [(e.kind, e.job_name, e.keys) for e in app.store.alert_pending(10_000)]


def test_a_dead_letter_is_in_the_outbox_with_its_finish_and_only_if_the_finish_applied(app: App) -> None:
    @app.job(max_attempts=2)
    def pay(ctx, n: int) -> None: ...

    pay.enqueue(1, key="pay:1")
    store = app.store
    [c] = store.job_claim(ClaimParams(("default",), 1, "w1", 30.0))
    retry = FinishParams(c.job.id, c.token, c.job.runs, State.SCHEDULED, Outcome.FAILED, delay=0.0,
                         error_type="TimeoutError", message="slow")
    assert store.job_finish_many([retry]) == [True]
    assert pending_kinds(app) == [], "a retry raises no alert"
    [c2] = store.job_claim(ClaimParams(("default",), 1, "w1", 30.0))
    stale = FinishParams(c2.job.id, c.token, c2.job.runs, State.DEAD, Outcome.FAILED, error_type="TimeoutError",
                         message="late", reason="exhausted")
    assert store.job_finish_many([stale]) == [False]
    assert pending_kinds(app) == [], "a fenced (stale) finish writes no alert either"
    dead = FinishParams(c2.job.id, c2.token, c2.job.runs, State.DEAD, Outcome.FAILED, error_type="TimeoutError",
                        message="slow again", reason="exhausted")
    assert store.job_finish_many([dead]) == [True]
    [event] = store.alert_pending(10)
    assert (event.kind, event.severity, event.job_name, event.keys) == ("dead_letter", "critical", "pay", ["pay:1"])
    assert event.payload["reason"] == "exhausted" and event.payload["error_type"] == "TimeoutError"
    assert event.payload["message"] == "slow again" and event.payload["queue"] == "default"
    assert store.job_finish_many([dead]) == [False]
    assert len(store.alert_pending(10)) == 1


def test_worker_lost_and_unknown_jobs_alert_too(app: App, store_url: str, clock) -> None:
    @app.job(max_attempts=3)
    def crashy(ctx) -> None: ...

    crashy.enqueue(key="crashy:1")
    store = app.store
    store.job_claim(ClaimParams(("default",), 1, "w1", 30.0))
    clock.advance(31)
    [e] = store.job_list_expired(10)
    assert store.job_rescue_many([RescueParams(e.id, e.token, e.runs, State.DEAD, None, "worker_lost",
                                               "lost 3 times")]) == [True]
    other = App(store_url, clock=clock)  # another deployment enqueues a job this app does not know

    @other.job(name="ghost")
    def ghost(ctx) -> None: ...

    try:
        ghost.enqueue(key="ghost:1")
    finally:
        other.close()
    app.work(burst=True)  # the ghost job dies as unknown_job
    events = {ev.keys[0]: ev for ev in store.alert_pending(10)}
    assert events["crashy:1"].payload["reason"] == "worker_lost"
    assert events["ghost:1"].payload["reason"] == "unknown_job" and events["ghost:1"].job_name == "ghost"
    assert app.get("ghost:1").state == State.DEAD


def test_alert_record_commits_or_rolls_back_with_the_callers_transaction(app: App) -> None:
    store = app.store

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction(store) as c:
        assert store.alert_record("schedule_missed", None, "nightly", [], {"windows": 3}, conn=c)
        raise Boom
    assert store.alert_pending(10) == []
    with transaction(store) as c:
        assert store.alert_record("schedule_missed", None, "nightly", [], {"windows": 3}, dedupe="nightly@1", conn=c)
    assert not store.alert_record("schedule_missed", None, "nightly", [], {"windows": 3}, dedupe="nightly@1")
    assert store.alert_record("breaker_opened", "warning", "stripe", [], {"failures": 10})
    assert [(e.kind, e.severity, e.job_name) for e in store.alert_pending(10)] == [
        ("schedule_missed", "warning", "nightly"), ("breaker_opened", "warning", "stripe")]
    with pytest.raises(InvalidInput, match="unknown alert kind"):
        store.alert_record("schedule_mised")
    with pytest.raises(InvalidInput, match="severity"):
        store.alert_record("test", "urgent")


def test_a_thousand_identical_failures_make_a_handful_of_alerts(app: App, clock) -> None:
    sink = Collect()
    app.alerts.sinks = [sink]
    app.alert_rules(failure_rate=None, stuck_after=None, group_wait=5, group_interval=60, dispatch=False)

    @app.job(max_attempts=1)
    def flaky(ctx, n: int) -> None:
        raise ConnectionError("provider down")

    def burst(start: int, n: int) -> None:
        flaky.enqueue_many([{"args": [i], "key": f"flaky:{i}"} for i in range(start, start + n)])
        app.work(burst=True, concurrency=50)
        app.alerts.group()
        app.alerts.deliver(limit=100)

    for chunk in range(4):  # 1,000 failures within the group's wait: one alert that says so
        burst(chunk * 250, 250)
        clock.advance(1)
    assert sink.got == []
    clock.advance(5)
    app.alerts.group()
    app.alerts.deliver()
    [doc] = sink.got
    assert doc["count"] == 1000 and doc["title"] == "1,000 job(s) of flaky dead-lettered"
    assert doc["summary"]["errors"] == {"ConnectionError": 1000} and doc["keys_omitted"] == 950
    assert len(doc["jobs"]) == 3 and all(len(j["attempts"]) == 1 for j in doc["jobs"])

    sink.got.clear()
    for chunk in range(10):  # 1,000 more spread over 100 seconds: still a handful
        burst(1000 + chunk * 100, 100)
        clock.advance(10)
    clock.advance(60)
    app.alerts.group()
    app.alerts.deliver(limit=100)
    assert 1 <= len(sink.got) <= 5
    assert sum(d["count"] for d in sink.got) == 1000
    assert all(d["title"].startswith(fmt_count(d["count"])) for d in sink.got)
    assert app.store.alert_pending(10) == []
    assert sum(a.count for a in app.alerts.list(limit=100)) == 2000


def test_failure_rate_crossing_the_threshold_alerts_once_and_resolves_once(app: App, clock) -> None:
    app.alert_rules(failure_rate=0.2, failure_window=600, min_attempts=10, stuck_after=None, dispatch=False)

    @app.job(max_attempts=1)
    def sync(ctx, ok: bool) -> str:
        if not ok:
            raise TimeoutError("upstream timed out")
        return "ok"

    def run(ok: bool, n: int, tag: str) -> int:
        sync.enqueue_many([{"args": [ok], "key": f"sync:{tag}:{i}"} for i in range(n)])
        app.work(burst=True)
        return app.alerts.evaluate()

    assert run(True, 20, "a") == 0
    assert run(False, 4, "b") == 0          # 4/24 = 0.17: under the threshold
    assert run(False, 4, "c") == 1          # 8/28 = 0.29: fires
    assert run(False, 10, "d") == 0         # still firing: nothing new
    assert app.alerts.evaluate() == 0
    clock.advance(300)
    assert run(True, 20, "e") == 0          # 18/58 = 0.31 and later 18/78 = 0.23: still above half the threshold
    clock.advance(301)                       # the failures leave the window
    assert run(True, 30, "f") == 1          # 0/50: resolved
    assert app.alerts.evaluate() == 0 and run(True, 5, "g") == 0
    kinds = [(e.kind, e.job_name) for e in app.store.alert_pending(100) if e.kind != "dead_letter"]
    assert kinds == [("failure_rate", "sync"), ("failure_rate_resolved", "sync")]
    app.alerts.group(force=True)
    fired, resolved = sorted(app.alerts.list(kind="failure_rate") + app.alerts.list(kind="failure_rate_resolved"),
                             key=lambda a: a.id)
    assert fired.status == "firing" and resolved.status == "resolved"
    details = fired.document["details"][0]
    assert details["failures"] == 8 and details["attempts"] == 28 and details["threshold"] == 0.2
    keys = fired.document["keys"]
    assert len(keys) == 3 and all(k.startswith(("sync:b:", "sync:c:")) for k in keys), "jobs that failed"
    assert fired.document["jobs"][0]["attempts"][0]["error_type"] == "TimeoutError"


def test_a_stuck_queue_alerts_once_and_resolves_once(app: App, clock) -> None:
    app.alert_rules(failure_rate=None, stuck_after=600, dispatch=False)

    @app.job(queue="reports")
    def report(ctx) -> None: ...

    report.enqueue(key="report:1")
    assert app.alerts.evaluate() == 0
    clock.advance(2 * app.lease + 1)     # no worker has heartbeated for the queue
    assert app.alerts.evaluate() == 1
    assert app.alerts.evaluate() == 0
    app.work(burst=True)
    assert app.alerts.evaluate() == 1   # the backlog is gone: resolved
    assert [(e.kind, e.payload.get("queue"), e.payload.get("reason")) for e in app.store.alert_pending(10)] == [
        ("queue_stuck", "reports", "no_worker"), ("queue_stuck_resolved", "reports", None)]


def test_grouping_is_fenced_each_event_joins_one_alert(app: App) -> None:
    store = app.store
    for n in range(3):
        store.alert_record("test", payload={"n": n})
    ids = [e.id for e in store.alert_pending(10)]

    def new(event_ids: list[int]) -> NewAlert:
        return NewAlert("test", "info", "info", None, len(event_ids), 0.0, 0.0, "t", json.dumps({"title": "t"}),
                        event_ids, ["s1", "s2"])

    first = store.alert_create(new(ids[:2]))
    assert first is not None
    assert store.alert_create(new(ids[1:])) is None, "an event already grouped: nothing written"
    assert [e.id for e in store.alert_pending(10)] == ids[2:]
    [alert] = store.alert_list()
    assert alert.id == first and sorted(d.sink for d in alert.deliveries) == ["s1", "s2"]


def test_a_delivery_is_leased_to_one_dispatcher_and_retried_when_its_lease_expires(app: App, clock) -> None:
    store = app.store
    store.alert_record("test", payload={})
    [event] = store.alert_pending(10)
    alert_id = store.alert_create(NewAlert("test", "info", "info", None, 1, 0.0, 0.0, "t", json.dumps({"t": 1}),
                                           [event.id], ["hook"]))
    [mine] = store.alert_delivery_claim("hook", 10, 60.0)
    assert mine.alert_id == alert_id and mine.document == {"t": 1} and mine.attempts == 0
    assert store.alert_delivery_claim("hook", 10, 60.0) == [], "leased: no second dispatcher gets it"
    assert store.alert_delivery_claim("other", 10, 60.0) == []
    clock.advance(61)  # the first dispatcher died mid-delivery
    [theirs] = store.alert_delivery_claim("hook", 10, 60.0)
    assert theirs.token != mine.token
    assert not store.alert_delivery_finish(alert_id, "hook", mine.token, "delivered", 1, None, None), "fenced"
    assert store.alert_delivery_finish(alert_id, "hook", theirs.token, "delivered", 1, None, None)
    [alert] = store.alert_list()
    [d] = alert.deliveries
    assert (d.state, d.attempts, d.delivered_at) == ("delivered", 1, clock.now())
    assert store.alert_delivery_claim("hook", 10, 60.0) == []


def test_failed_deliveries_back_off_are_visible_and_arrive_after_recovery(app: App, clock) -> None:
    sink = Collect("hook")
    app.alerts.sinks = [sink]
    app.alert_rules(failure_rate=None, stuck_after=None, dispatch=False, give_up_after=3600,
                    delivery_backoff=Backoff(base=10.0, factor=2.0, cap=100.0, jitter="none"))
    app.alerts.record("test", payload={"n": 1})
    [alert_id] = app.alerts.group(force=True)
    sink.failing = "HTTP 503: down for maintenance"
    assert app.alerts.deliver() == [(alert_id, "hook", "HTTP 503: down for maintenance")]
    [d] = app.alerts.list()[0].deliveries
    assert (d.state, d.attempts, d.last_error) == ("pending", 1, "HTTP 503: down for maintenance")
    assert d.next_at == pytest.approx(clock.now() + 10.0)
    assert app.alerts.deliver() == [], "not due before its backoff"
    clock.advance(10)
    assert app.alerts.deliver()[0][2] is not None
    [d] = app.alerts.list()[0].deliveries
    assert d.attempts == 2 and d.next_at == pytest.approx(clock.now() + 20.0)
    sink.failing = None
    clock.advance(20)
    assert app.alerts.deliver() == [(alert_id, "hook", None)]
    assert [g["id"] for g in sink.got] == [alert_id]
    [d] = app.alerts.list()[0].deliveries
    assert (d.state, d.attempts) == ("delivered", 3)
    [row] = app.alerts.history()
    assert row["delivery"] == "hook: delivered (3 attempts)" and row["kind"] == "test"
    # One that keeps failing past give_up_after is marked failed for good.
    app.alerts.record("test", payload={"n": 2})
    [second] = app.alerts.group(force=True)
    sink.failing = "HTTP 410: gone"
    app.alerts.deliver()
    clock.advance(3601)
    app.alerts.deliver()
    [d] = next(a for a in app.alerts.list() if a.id == second).deliveries
    assert (d.state, d.last_error) == ("failed", "HTTP 410: gone")


def test_old_alerts_are_pruned_but_not_while_a_delivery_is_pending(app: App, clock) -> None:
    sink = Collect("hook")
    app.alerts.sinks = [sink]
    app.alert_rules(failure_rate=None, stuck_after=None, dispatch=False, keep=86400)
    app.alerts.record("test", payload={"n": 1})
    app.alerts.group(force=True)
    app.alerts.deliver()
    sink.failing = "down"
    app.alerts.record("test", payload={"n": 2})
    app.alerts.group(force=True)
    app.alerts.deliver()
    clock.advance(86401)
    assert app.alerts.prune() == 1
    [left] = app.alerts.list()
    assert left.deliveries[0].state == "pending"
