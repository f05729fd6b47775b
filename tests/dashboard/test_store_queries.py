"""The dashboard's store queries, on SQLite and PostgreSQL, with an injected clock."""

from __future__ import annotations

from typing import Any

from firesafe import App, Backoff, FakeClock, Permanent
from firesafe.store.dashboard import Bucket, DeadGroup


def declare(app: App) -> tuple[Any, Any]:
    @app.job(queue="q1", max_attempts=2, backoff=Backoff(base=0.0, cap=0.0, jitter="none"))
    def flaky(ctx: Any, n: int) -> int:
        if n < 0:
            raise ValueError("negative")
        return n

    @app.job(queue="q2")
    def poison(ctx: Any, why: str) -> None:
        raise Permanent(why)

    return flaky, poison


def test_attempt_buckets_count_outcomes_per_minute(app: App, clock: FakeClock) -> None:
    flaky, poison = declare(app)
    t0 = clock.now()
    flaky.enqueue(1)
    flaky.enqueue(2)
    app.work(burst=True)
    clock.advance(125)  # two minutes later
    flaky.enqueue(-1)  # two failed attempts
    poison.enqueue("bad")
    app.work(burst=True, wait_scheduled=True)
    buckets = app.store.attempt_buckets(t0, t0 + 600, 60.0)
    assert sorted(buckets, key=lambda b: (b.index, b.outcome)) == [
        Bucket(0, "succeeded", 2), Bucket(2, "failed", 3)]
    assert app.store.attempt_buckets(t0 + 60, t0 + 120, 60.0) == []  # the empty minute between
    assert app.store.attempt_buckets(t0 + 600, t0 + 1200, 60.0) == []


def test_dead_groups_by_name_and_error_type(app: App, clock: FakeClock) -> None:
    flaky, poison = declare(app)
    t0 = clock.now()
    for i in range(3):
        poison.enqueue(f"p{i}")
    app.work(burst=True)
    clock.advance(10)
    flaky.enqueue(-5)
    app.work(burst=True, wait_scheduled=True)
    groups = app.store.dead_groups()
    assert groups == [DeadGroup("poison", "Permanent", 3, t0, t0), DeadGroup("flaky", "ValueError", 1, t0 + 10,
                                                                              t0 + 10)]
    assert app.store.dead_groups(limit=1) == groups[:1]


def test_queue_lags_measure_the_oldest_runnable_job(app: App, clock: FakeClock) -> None:
    flaky, poison = declare(app)
    flaky.enqueue(1)
    clock.advance(30)
    flaky.enqueue(2)
    flaky.enqueue(3, delay=3600)  # not runnable yet: no lag
    poison.enqueue("x", delay=5)
    clock.advance(15)
    lags = {row.queue: (row.runnable, row.lag) for row in app.store.queue_lags()}
    assert lags == {"q1": (2, 45.0), "q2": (1, 10.0)}


def test_attempt_counts_by_name_and_outcome(app: App, clock: FakeClock) -> None:
    flaky, poison = declare(app)
    flaky.enqueue(1)
    flaky.enqueue(-1)
    poison.enqueue("x")
    app.work(burst=True, wait_scheduled=True)
    assert sorted(app.store.attempt_counts()) == [
        ("flaky", "failed", 2), ("flaky", "succeeded", 1), ("poison", "failed", 1)]
