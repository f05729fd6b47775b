"""Claim loops (lanes): with ``lanes=N`` a worker process runs N loops sharing its threads.

In-process workers on a real store: both loops claim and run jobs; a suspect still runs alone in the
process (no job of the other loop beside it); stop, statistics and bad values behave as for one loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from firesafe import App, Backoff, ConfigError, State
from firesafe.store.base import ClaimParams
from firesafe.worker import Worker
from firesafe.worker.lanes import Lanes, added, shares
from firesafe.worker.prefetch import HOLD
from firesafe.worker.worker import Running as Held
from tests.processes import wait_until


@pytest.fixture
def app(store_url: str) -> Iterator[App]:
    a = App(store_url)
    yield a
    a.close()


class Running:
    """Which keys run at this moment, and what ran beside each key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now: set[str] = set()
        self.beside: dict[str, set[str]] = {}
        self.order: list[str] = []  # keys in the order they started

    def enter(self, key: str) -> None:
        with self.lock:
            self.beside.setdefault(key, set()).update(self.now)
            for other in self.now:
                self.beside.setdefault(other, set()).add(key)
            self.now.add(key)
            self.order.append(key)

    def leave(self, key: str) -> None:
        with self.lock:
            self.now.discard(key)


def declare(app: App, running: Running) -> Any:
    @app.job(max_attempts=5, backoff=Backoff(base=0.01, cap=0.01))
    def step(ctx: Any, n: int, sleep: float = 0.0) -> int:
        running.enter(ctx.job.key)
        try:
            time.sleep(sleep)
        finally:
            running.leave(ctx.job.key)
        return n

    return step


def test_one_loop_by_default_and_lanes_split_the_threads_and_the_hold(app: App) -> None:
    assert isinstance(app.runner(None, 1, concurrency=8), Worker)
    two = app.runner(None, 2, concurrency=8)
    assert isinstance(two, Lanes) and [w.concurrency for w in two.workers] == [4, 4]
    assert [w.lane for w in two.workers] == [0, 1]
    # the paced prefetch's hold is shared too: each loop holds up to half of it, its 4 threads included
    assert [w.prefetch.most for w in two.workers] == [HOLD // 2 - 4] * 2
    assert [w.pipeline for w in two.workers] == [1, 1]  # lanes take turns with the store one by one
    assert isinstance(app.runner(None, 3, concurrency=1), Worker)  # one thread: one loop
    three = app.runner(None, 3, concurrency=8, prefetch=5)
    assert [(w.concurrency, w.prefetch.most) for w in three.workers] == [(3, 2), (3, 2), (2, 1)]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_a_bad_number_of_lanes_is_a_clear_error(app: App, bad: Any) -> None:
    with pytest.raises(ConfigError, match="lanes must be a whole number >= 1"):
        app.work(burst=True, lanes=bad)


def test_shares_and_added_statistics() -> None:
    assert shares(9, 4) == [3, 2, 2, 2] and sum(shares(129, 2)) == 129
    lanes = Lanes.__new__(Lanes)
    one, two = Worker.__new__(Worker), Worker.__new__(Worker)
    from firesafe.worker.worker import WorkerStats

    one.stats = WorkerStats(succeeded=3, dead=1, claimed=4, by_outcome={"succeeded": 3, "failed": 1})
    two.stats = WorkerStats(succeeded=2, fenced=1, claimed=2, by_outcome={"succeeded": 2})
    lanes.workers = [one, two]
    total = added(w.stats for w in lanes.workers)
    assert (total.succeeded, total.dead, total.fenced, total.claimed) == (5, 1, 1, 6)
    assert total.by_outcome == {"succeeded": 5, "failed": 1}


def test_two_loops_drain_a_backlog_together(app: App, caplog: pytest.LogCaptureFixture) -> None:
    running = Running()
    step = declare(app, running)
    step.enqueue_many([{"args": [i], "key": f"s{i}", "kwargs": {"sleep": 0.002}} for i in range(400)])
    with caplog.at_level(logging.INFO, logger="firesafe.worker"):
        stats = app.work(burst=True, concurrency=4, lanes=2)
    assert stats.succeeded == 400 and stats.claimed == 400
    started = [r.getMessage() for r in caplog.records if " started: " in r.getMessage()]
    assert len(started) == 2 and "lane=1/2" in started[0] + started[1] and "lane=2/2" in started[0] + started[1]
    workers = {a.worker for i in range(400) for a in app.get(f"s{i}").trace}
    assert len(workers) == 2  # both loops claimed, each under its own worker id (host:pid:id)
    assert all(a.outcome == "succeeded" for i in range(0, 400, 37) for a in app.get(f"s{i}").trace)


def test_a_suspect_runs_alone_in_the_process_not_only_in_its_loop(app: App) -> None:
    running = Running()
    step = declare(app, running)
    step.enqueue(0, key="suspect")
    store = app.store
    # The suspect's first worker died: claimed under a 1 s lease that nobody renews, then rescued as
    # lost (runnable again 10 ms later: the job's backoff).
    assert len(store.job_claim(ClaimParams(("default",), 1, "dead-worker", 1.0))) == 1
    time.sleep(1.2)
    app.worker(burst=True)._rescue()
    assert app.get("suspect").lost == 1
    # A backlog of 30 ms attempts (too long to prefetch) that takes the two loops about 2 s.
    step.enqueue_many([{"args": [i], "key": f"s{i}", "kwargs": {"sleep": 0.03}} for i in range(240)])
    runner = app.runner(None, 2, concurrency=4, burst=True, rescue_interval=0.05, poll_interval=0.05)
    assert isinstance(runner, Lanes)
    stats = runner.run()
    assert stats.succeeded == 241
    assert app.get("suspect").state == State.SUCCEEDED
    assert running.beside["suspect"] == set()  # nothing else ran in the process while it ran
    # The other loop stopped claiming for it: it ran early, not after the backlog (which the other
    # loop, claiming on, would otherwise have kept going beside the leader until the end).
    assert running.order.index("suspect") < 60, running.order.index("suspect")
    # and the other loop ran jobs too (the leader did not run everything by itself)
    assert all(w.stats.succeeded > 0 for w in runner.workers)


def test_a_burst_loop_is_not_done_while_another_loop_of_its_process_has_attempts(app: App) -> None:
    # The leader may hold every runnable job (prefetched) and give back those that waited too long:
    # the other loop, finding nothing runnable, must stay to take them rather than end its burst.
    declare(app, Running())
    runner = app.runner(None, 2, concurrency=4, burst=True)
    leader, other = runner.workers
    assert other._idle() and leader._idle()  # nothing runnable, nothing running: done
    held = Held(claimed=None, ctx=None, attempt=None, claimed_at=0.0, lease_until=0.0)  # type: ignore[arg-type]
    leader.running[(1, 1)] = held  # an attempt of the leader's, not yet concluded
    assert not other._idle()
    assert leader._idle()  # the other loop holds nothing: the leader's own attempts are its own test
    held.done = True  # concluded (timed out, say): nothing left to wait for
    assert other._idle()


def test_a_leader_that_ends_while_waiting_for_a_suspect_lets_the_others_claim_again(app: App) -> None:
    # A burst leader can end (nothing runnable: another process took the suspect) while it waits for
    # the other loops to empty; they must not stay held back from claiming.
    runner = app.runner(None, 2, concurrency=4, burst=True)
    leader, other = runner.workers
    group = leader._group
    assert group.clear_for_suspect(leader)  # nothing runs: the leader may run a suspect alone
    assert group.claim_beside(lambda: ["claimed"]) == []  # the other loop is held back
    leader._shutdown()
    assert group.claim_beside(lambda: ["claimed"]) == ["claimed"]
    assert other._wake.is_set()  # and woken to do so


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)  # LISTEN/NOTIFY is PostgreSQL's
def test_one_listen_connection_wakes_every_loop(store_url: str) -> None:
    worker_app, other_app = App(store_url), App(store_url)  # the other enqueues as another process would
    try:
        running = Running()
        declare(worker_app, running)
        step = declare(other_app, Running())
        runner = worker_app.runner(None, 2, concurrency=4, poll_interval=30.0)  # a poll would come too late
        t = threading.Thread(target=runner.run)
        t.start()
        try:
            wait_until(lambda: all(w._wake.is_set() is False for w in runner.workers)
                       and listening(worker_app) == 1, 10, "the loops idle, one LISTEN connection")
            # One NOTIFY. The jobs take a while: the loop holding the listener cannot run them all
            # before the other, woken with it, claims some (no-op jobs made that a race).
            step.enqueue_many([{"args": [i, 0.3], "key": f"n{i}"} for i in range(8)])
            wait_until(lambda: all(worker_app.get(f"n{i}").state == State.SUCCEEDED for i in range(8)), 5,
                       "the notification to wake the loops")
            assert listening(worker_app) == 1
            assert runner.workers[1].stats.claimed > 0  # the loop without a listener was woken too
        finally:
            runner.stop()
            t.join(15)
    finally:
        worker_app.close()
        other_app.close()


def listening(app: App) -> int:
    """Connections of this server LISTENing on the store's channel."""
    with app.store._conn() as c:
        row = c.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE query ILIKE %s",
                        [f"LISTEN%{app.store.channel}%"]).fetchone()
    return int(row["n"])


def test_stop_ends_every_loop_and_releases_what_waits(app: App) -> None:
    running = Running()
    step = declare(app, running)
    step.enqueue_many([{"args": [i], "key": f"s{i}", "kwargs": {"sleep": 0.2}} for i in range(40)])
    runner = app.runner(None, 2, concurrency=4, grace=5.0)
    result: list[Any] = []
    t = threading.Thread(target=lambda: result.append(runner.run()))
    t.start()
    try:
        wait_until(lambda: len(running.now) == 4, 10, "both loops running two attempts each")
    finally:
        runner.stop()
        t.join(15)
    assert not t.is_alive()
    stats = result[0]
    assert stats.succeeded >= 4
    states = {app.get(f"s{i}").state for i in range(40)}
    assert states <= {State.SUCCEEDED, State.QUEUED, State.SCHEDULED}  # none left running
    assert sum(app.get(f"s{i}").state == State.SUCCEEDED for i in range(40)) == stats.succeeded < 40


def test_a_bug_in_one_loop_stops_the_others_and_is_raised(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    running = Running()
    step = declare(app, running)
    step.enqueue_many([{"args": [i], "key": f"s{i}", "kwargs": {"sleep": 0.05}} for i in range(50)])
    runner = app.runner(None, 2, concurrency=4)
    second = runner.workers[1]

    def broken() -> Any:
        raise RuntimeError("a bug in the second loop")

    monkeypatch.setattr(second, "_claim", broken)
    done: list[BaseException] = []

    def run() -> None:
        try:
            runner.run()
        except BaseException as exc:
            done.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(40)
    if t.is_alive():  # not to leave a loop running into the next test
        runner.stop()
        t.join(15)
    assert not t.is_alive()  # the first loop stopped too (not a worker running forever beside a dead loop)
    assert len(done) == 1 and "a bug in the second loop" in str(done[0])
