"""The store pipeline (firesafe/worker/pipeline.py): a worker keeps up to N transactions in flight.

Its default: 2 on PostgreSQL for a worker that prefetches, 1 elsewhere (SQLite, limiters, lanes, no
prefetch). With requests in flight the worker still runs every job once, an idle worker does not
spin on empty claims, a request that fails keeps its outcomes for the next try, and a stopping
worker waits for the requests in flight before it returns. In-process workers on a real store; an
explicit ``pipeline=2`` runs the same code on SQLite (whose transactions then wait for each other).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from firesafe import App, ConfigError, State, StoreError
from firesafe.store.base import ClaimParams
from firesafe.worker import pipeline as pipeline_module
from firesafe.worker.pipeline import Request, StorePipeline
from tests.processes import wait_until


def declare(app: App, *, seconds: float = 0.0) -> Any:
    @app.job(max_attempts=3)
    def work(ctx, n: int) -> int:
        if seconds:
            time.sleep(seconds)
        return n

    return work


def slower(app: App, monkeypatch: pytest.MonkeyPatch, seconds: float, name: str = "job_finish_and_claim") -> None:
    """Make each call of one store method take ``seconds`` more (a server farther away, a slow one)."""
    store: Any = app.store
    real = getattr(store, name)

    def slow(*args: Any) -> Any:
        time.sleep(seconds)
        return real(*args)

    monkeypatch.setattr(store, name, slow)


class Deepest:
    """Records how many requests a worker's pipelines ever held in flight at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.most = 0
        submit = pipeline_module.StorePipeline.submit

        def recording(pipe: Any, request: Any) -> None:
            submit(pipe, request)
            self.most = max(self.most, len(pipe.in_flight))

        monkeypatch.setattr(pipeline_module.StorePipeline, "submit", recording)


def test_defaults_two_on_a_store_with_concurrent_writers_else_one(app: App) -> None:
    declare(app)
    two_writers = app.store.concurrent_writers
    assert app.worker().pipeline == (2 if two_writers else 1)
    assert app.worker(prefetch=0).pipeline == 1  # nothing is held beyond the threads: no batch runs meanwhile
    assert app.worker(pipeline=3).pipeline == 3
    assert all(w.pipeline == 1 for w in app.runner(None, 2, concurrency=8, pipeline=2).workers)  # lanes
    app.limiter("api", rate=10)
    assert app.worker(pipeline=2).pipeline == 1  # limiters decide each claim's admission in turn


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_a_bad_pipeline_is_a_clear_error(app: App, bad: Any) -> None:
    declare(app)
    with pytest.raises(ConfigError, match="pipeline must be a whole number >= 1"):
        app.worker(pipeline=bad)


def test_a_pipelined_worker_runs_every_job_once_with_two_transactions_in_flight(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each transaction takes 20 ms more (a server farther away): a batch ends while the next one's
    transaction still runs, so the loop sends another beside it. Attempts of 1 ms: no-op ones could
    all end while the loop waits for the GIL, and their outcomes then leave in one transaction."""
    work = declare(app, seconds=0.001)
    deepest = Deepest(monkeypatch)
    work.enqueue_many([{"args": [i], "key": f"k{i}"} for i in range(3000)])
    slower(app, monkeypatch, 0.02)
    store: Any = app.store
    held, done = [0], threading.Event()

    def sample() -> None:  # the jobs running (claimed) at once: never more than the worker may hold
        while not done.is_set():
            held[0] = max(held[0], sum(n for _q, state, n in store.job_stats() if state == State.RUNNING))
            time.sleep(0.003)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        w = app.worker(pipeline=2, burst=True)
        stats = w.run()
    finally:
        done.set()
        sampler.join()
    assert (stats.succeeded, stats.claimed, stats.fenced) == (3000, 3000, 0)
    assert deepest.most == 2, "the drain never had two transactions in flight"
    assert w.concurrency < held[0] <= w.concurrency + w.prefetch.most, held  # claims in flight hold their slots
    counts = {state: n for _q, state, n in app.store.job_stats()}
    assert counts == {"succeeded": 3000}
    for key in ("k0", "k1499", "k2999"):
        job = app.get(key)
        assert job.result == int(key[1:]) and [a.outcome for a in job.trace] == ["succeeded"]


def test_an_idle_pipelined_worker_claims_about_once_a_poll_not_in_a_loop(app: App) -> None:
    """A claim that comes back empty wakes the loop like any reply; without the pause it takes
    after one, the loop sent the next empty claim at once (about 1,300 a second here)."""
    declare(app)
    calls = []
    store: Any = app.store
    real = store.job_finish_and_claim  # what the pipeline calls for a claim (the look for suspects is apart)

    def counting(*args: Any) -> Any:
        calls.append(time.monotonic())
        return real(*args)

    store.job_finish_and_claim = counting
    w = app.worker(pipeline=2, poll_interval=0.2)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        time.sleep(1.5)
    finally:
        w.stop()
        t.join(10)
    assert not t.is_alive()
    assert 3 <= len(calls) <= 12, f"{len(calls)} claims in 1.5 s with a poll interval of 0.2 s"


def test_a_request_that_fails_keeps_its_outcomes_and_nothing_is_lost_or_run_twice(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store refuses two transactions of the pipeline mid-drain: their claims took nothing,
    their outcomes are saved on a later try (under leases still held), every job runs once."""
    work = declare(app)
    work.enqueue_many([{"args": [i], "key": f"k{i}"} for i in range(3000)])
    store: Any = app.store
    real = store.job_finish_and_claim
    seen = {"saves": 0, "refused": 0}
    lock = threading.Lock()

    def flaky(finishes: Any, claim: Any) -> Any:
        with lock:
            seen["saves"] += bool(finishes)
            refuse = bool(finishes) and seen["saves"] in (2, 3)
            seen["refused"] += refuse
        if refuse:
            raise StoreError("the store is away for a moment (test)")
        return real(finishes, claim)

    monkeypatch.setattr(store, "job_finish_and_claim", flaky)
    w = app.worker(pipeline=2, burst=True)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the drain never ended: outcomes of a failed request were dropped"
    stats = w.stats
    assert seen["refused"] == 2, seen
    assert seen["saves"] > 3  # the drain went on through the pipeline after the faults
    assert (stats.succeeded, stats.fenced) == (3000, 0)
    assert {state: n for _q, state, n in app.store.job_stats()} == {"succeeded": 3000}
    assert all(len(app.get(f"k{i}").trace) == 1 for i in range(0, 3000, 50))


def test_a_stopping_worker_waits_for_its_requests_in_flight(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each transaction takes 0.3 s (a slow store): the worker is stopped while requests are in
    flight, and returns only once their outcomes are saved and their claims given back."""
    work = declare(app)
    work.enqueue_many([{"args": [i]} for i in range(400)])
    slower(app, monkeypatch, 0.3)
    deepest = Deepest(monkeypatch)
    w = app.worker(pipeline=2, grace=5)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        wait_until(lambda: w.stats.succeeded >= 20 and w.completer.pipe is not None and w.completer.pipe.in_flight, 30,
                   "a request in flight after some jobs ran")
    finally:
        w.stop()
        t.join(30)
    assert not t.is_alive()
    assert deepest.most >= 1
    counts = {state: n for _q, state, n in app.store.job_stats()}
    assert counts.get(State.RUNNING, 0) == 0, counts  # nothing left under this worker's leases
    assert counts[State.SUCCEEDED] == w.stats.succeeded and sum(counts.values()) == 400


def test_heartbeats_leave_out_the_outcomes_in_flight(app: App, monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A heartbeat every 0.1 s, each on its way for 30 ms, while transactions take 20 ms: an outcome
    in flight is not beaten (its commit ends its lease), so no beat finds a lease gone and warns
    that it was lost."""
    work = declare(app)
    work.enqueue_many([{"args": [i]} for i in range(3000)])
    slower(app, monkeypatch, 0.02)
    slower(app, monkeypatch, 0.03, "job_heartbeat_many")  # a commit lands while the beat is on its way
    with caplog.at_level("WARNING", logger="firesafe.worker"):
        stats = app.work(burst=True, pipeline=2, lease=0.3)
    assert stats.succeeded == 3000
    assert [r.getMessage() for r in caplog.records if "was lost" in r.getMessage()] == []


def test_a_claim_in_flight_holds_the_slots_it_may_fill(app: App) -> None:
    """One claim of 300 is in flight: the next claim takes only what is left of the hold, so the
    worker never holds more than its threads and prefetch even before the first reply comes."""
    declare(app)
    w = app.worker(pipeline=2)
    w.prefetch.pace = 0.0001  # attempts well under a millisecond: the whole hold
    pipe = w.completer.pipe = StorePipeline(app.store, 2, lambda: None)
    try:
        first = Request([], [], ClaimParams(w.queues, 300, w.id, 30.0))
        pipe.in_flight.append(first)  # as if submitted, its reply not yet back
        assert w.claim_free([]) == []  # the jobs come with the reply
        [sent] = [r for r in pipe.in_flight if r is not first]
        assert sent.claim is not None and sent.claim.limit == w.concurrency + w.prefetch.most - 300
    finally:
        pipe.close()


@pytest.mark.parametrize("depth", [2, 3])
def test_each_pipelined_claim_takes_a_share_of_the_hold_so_the_next_has_slots(app: App, depth: int) -> None:
    """With nothing in flight, a claim takes the hold's share of one transaction (a claim of the
    whole hold would leave nothing for a second one beside it: the loop and the store would take
    turns again); the next claims take the next shares, until the pipeline is full."""
    declare(app)
    w = app.worker(pipeline=depth)
    w.prefetch.pace = 0.0001
    hold = w.concurrency + w.prefetch.most
    pipe = w.completer.pipe = StorePipeline(app.store, depth, lambda: None)
    try:
        for _ in range(depth + 1):
            assert w.claim_free([]) == []
        limits = [r.claim.limit for r in pipe.in_flight if r.claim is not None]
        share = -(-hold // depth)
        assert limits == [share] * (depth - 1) + [hold - share * (depth - 1)], limits
        assert sum(limits) == hold
    finally:
        pipe.close()


@pytest.mark.parametrize("depth", [2, 3])
def test_a_pipelined_claim_without_prefetch_fills_every_thread(app: App, depth: int) -> None:
    """Only the prefetch's hold is split into shares: with nothing measured yet (so no prefetch),
    the first claim takes one job per thread, as it would without a pipeline, and the next claim
    has nothing left to take."""
    declare(app)
    w = app.worker(pipeline=depth, concurrency=3)
    assert w.prefetch.pace is None
    pipe = w.completer.pipe = StorePipeline(app.store, depth, lambda: None)
    try:
        for _ in range(depth):
            assert w.claim_free([]) == []
        limits = [r.claim.limit for r in pipe.in_flight if r.claim is not None]
        assert limits == [3], limits
    finally:
        pipe.close()


def test_heartbeats_leave_out_exactly_the_outcomes_in_flight(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two attempts run under leases; one's outcome is in a transaction in flight, whose commit ends
    its lease. The heartbeat extends the other one only (else it would find the first one's lease
    gone and warn that it was lost)."""
    work = declare(app)
    work.enqueue_many([{"args": [i]} for i in range(2)])
    w = app.worker(pipeline=2)
    claimed = app.store.job_claim(ClaimParams(w.queues, 2, w.id, 30.0))
    from firesafe.worker.worker import Running

    for c in claimed:
        w.running[(c.job.id, c.job.runs)] = Running(c, None, None, 0.0, 0.0, started=0.0)  # type: ignore[arg-type]
    flying, beaten = w.running[(claimed[0].job.id, claimed[0].job.runs)], w.running[(claimed[1].job.id,
                                                                                         claimed[1].job.runs)]
    flying.saving = True
    w.completer.pipe = StorePipeline(app.store, 2, lambda: None)
    asked: list[Any] = []
    beat = app.store.job_heartbeat_many
    monkeypatch.setattr(app.store, "job_heartbeat_many", lambda items, lease: asked.extend(items) or beat(items, lease))
    try:
        w.completer.pipe.in_flight.append(Request([], [(flying, None)], None))
        w._heartbeat()
    finally:
        w.completer.pipe.close()
    assert asked == [(beaten.claimed.job.id, beaten.claimed.token)]
    assert not flying.done and not beaten.done


def test_a_worker_whose_grace_ends_with_a_transaction_in_flight_waits_for_it(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The grace (0.05 s) ends while a transaction (0.5 s each) is in flight: before returning, the
    worker waits for it, saves its outcomes and gives back the jobs its claim took, so none is left
    running under a lease nobody holds."""
    work = declare(app)
    work.enqueue_many([{"args": [i]} for i in range(2000)])
    slower(app, monkeypatch, 0.5)
    w = app.worker(pipeline=2, grace=0.05)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        wait_until(lambda: w.stats.succeeded and w.completer.pipe is not None and any(
            r.claim is not None for r in w.completer.pipe.in_flight), 30, "a claim in flight after some jobs ran")
    finally:
        w.stop()
        t.join(30)
    assert not t.is_alive()
    time.sleep(1.0)  # a transaction the worker had not waited for would have ended by now
    counts = {state: n for _q, state, n in app.store.job_stats()}
    assert counts.get(State.RUNNING, 0) == 0, counts
    assert counts[State.SUCCEEDED] == w.stats.succeeded
