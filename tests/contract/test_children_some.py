"""Contract: waiting for children as they finish (``ctx.wait_any(keys, at_least=N)``, docs/workflows.md).
Runs on every store.

The parent parks until at least N of the children it waits for have ended: the store wakes it when
its count of children not ended reaches the mark the wait set (one row's update per child's end,
as for a wait on all). It then gets the ended ones' results, recorded like a step, and can wait
again for the rest."""

from __future__ import annotations

from typing import Any

import pytest

from firesafe import App, Backoff, State
from firesafe.errors import InvalidInput
from firesafe.states import Outcome
from firesafe.store.base import ClaimParams, FinishParams, InsertParams
from tests.contract.test_children import claimed_parent

FAST = Backoff(base=1.0, jitter="none")


def _kid(i: int) -> InsertParams:
    return InsertParams(key=f"p/k{i}", name="kid", queue="kids", fingerprint=f"f{i}",
                        payload=f'{{"args":[{i}],"kwargs":{{}}}}', arg_names='["i"]', max_attempts=3)


def _finish_one_kid(app: App, result: str, parent_id: int) -> None:
    store = app.store
    c = store.job_claim(ClaimParams(("kids",), 1, "w", 30.0))[0]
    assert store.job_finish_many([FinishParams(c.job.id, c.token, c.job.runs, State.SUCCEEDED, Outcome.SUCCEEDED,
                                               result=result, parent_id=parent_id)]) == [True]


def test_the_count_wakes_the_parent_once_enough_children_ended_not_before(app: App) -> None:
    """Four children, a wait for two: parked (not due) after the first ends, due after the second."""
    @app.job(queue="kids")
    def kid(ctx, i: int) -> int:
        return i

    answers: list[Any] = []

    @app.job(queue="parents")
    def parent(ctx) -> dict[str, Any]:
        keys = ctx.spawn_many(kid, [[i] for i in range(4)])
        got = ctx.wait_any(keys, at_least=2, name="some")
        answers.append(got)
        return got

    parent.enqueue(key="p")
    app.work(burst=True, queues=["parents"])
    p = app.get("p")
    assert p.state == State.SCHEDULED and p.reason == "children" and p.children_pending == 4
    assert p.run_at is not None and p.run_at.timestamp() > app.store.now() + 3600
    for i in range(2):
        _finish_one_kid(app, str(i * 10), p.id)
        p = app.get("p")
        assert p.children_pending == 3 - i
        assert (p.run_at is not None and p.run_at.timestamp() <= app.store.now()) == (i == 1)
    assert [e.kind for e in p.events].count("woken") == 1
    _finish_one_kid(app, "20", p.id)  # one more ends before the parent runs: it is not woken again
    assert [e.kind for e in app.get("p").events].count("woken") == 1
    app.work(burst=True, queues=["parents"])
    p = app.get("p")
    assert p.state == State.SUCCEEDED and p.result == {"p/spawn-0/0": 0, "p/spawn-0/1": 10, "p/spawn-0/2": 20}
    assert p.attempt == 1 and p.deferrals == 1


def test_a_parent_waits_again_for_the_rest_and_a_retry_gets_the_same_first_answer(app: App, clock) -> None:
    """The first answer is recorded: a retry after the third child ended still gets the first two."""
    @app.job(max_attempts=1)
    def square(ctx, i: int) -> int:
        return i * i

    crashed: list[bool] = []
    seen: list[list[str]] = []

    @app.job(max_attempts=3, backoff=FAST, queue="parents")
    def total(ctx) -> dict[str, Any]:
        keys = ctx.spawn_many(square, [{"args": [i], "delay": 0 if i < 2 else 100} for i in range(3)])
        first = ctx.wait_any(keys, at_least=2, name="first")
        seen.append(sorted(first))
        if not crashed:
            crashed.append(True)
            raise ConnectionError("lost the database after the first answer")
        rest = ctx.wait_any([k for k in keys if k not in first], at_least=1, name="rest")
        return {"first": first, "rest": rest}

    total.enqueue(key="sum")
    app.work(burst=True, queues=["parents"])  # the parent spawns and parks
    app.work(burst=True, queues=["default"])  # two children end (the third is not due)
    app.work(burst=True, queues=["parents"])  # the parent is woken, gets two, and fails once
    clock.advance(200)  # the third child is due; the parent's retry too
    app.work(burst=True, queues=["default"])  # the third child ends before the retry runs
    keys = [f"sum/spawn-0/{i}" for i in range(3)]
    assert app.store.job_get(keys[2]).state == State.SUCCEEDED
    app.work(burst=True, queues=["parents"])
    job = app.get("sum")
    assert job.state == State.SUCCEEDED
    assert job.result == {"first": {keys[0]: 0, keys[1]: 1}, "rest": {keys[2]: 4}}
    assert seen == [keys[:2], keys[:2]]  # the retry got the recorded answer, though all three had ended
    assert app.store.job_children_counts(job.id) == {"succeeded": 3}


def test_a_later_wait_for_all_is_woken_by_the_last_child_not_by_the_mark_of_the_first_wait(app: App) -> None:
    @app.job(queue="kids")
    def kid(ctx, i: int) -> int:
        return i

    @app.job(queue="parents")
    def parent(ctx) -> list[int]:
        keys = ctx.spawn_many(kid, [[i] for i in range(3)])
        ctx.wait_any(keys, at_least=1, name="one")
        return ctx.wait_children(keys, name="all")

    parent.enqueue(key="p")
    app.work(burst=True, queues=["parents"])
    _finish_one_kid(app, "0", app.get("p").id)
    app.work(burst=True, queues=["parents"])  # woken: the first wait is answered, the second parks
    p = app.get("p")
    assert p.state == State.SCHEDULED and p.children_pending == 2
    assert p.run_at is not None and p.run_at.timestamp() > app.store.now() + 3600
    _finish_one_kid(app, "1", p.id)
    p = app.get("p")
    assert p.run_at is not None and p.run_at.timestamp() > app.store.now() + 3600  # one left: still parked
    _finish_one_kid(app, "2", p.id)
    app.work(burst=True, queues=["parents"])
    assert app.get("p").result == [0, 1, 2]


def test_the_store_counts_the_ended_children_under_the_lease(app: App) -> None:
    store = app.store
    pc = claimed_parent(app)
    store.job_spawn_many(pc.job.id, pc.token, [_kid(i) for i in range(3)])
    keys = [f"p/k{i}" for i in range(3)]
    assert store.job_children_wait(pc.job.id, pc.token, keys, 2) == 0
    assert store.job_children_wait(pc.job.id, "not-the-token", keys, 2) is None
    _finish_one_kid(app, "1", pc.job.id)
    assert store.job_children_wait(pc.job.id, pc.token, keys, 2) == 1
    assert store.job_children_wait(pc.job.id, pc.token, keys[1:], 2) in (0, 1)  # which kid ended: claim order
    # The parent, having looked (one ended), parks; the second child's end wakes it.
    store.job_children_wait(pc.job.id, pc.token, keys, 2)
    store.job_finish_many([FinishParams(pc.job.id, pc.token, pc.job.runs, State.SCHEDULED, Outcome.DEFERRED,
                                        delay=86400.0, given_back=1, reason="children")])
    p = store.job_get("p")
    assert p.run_at is not None and p.run_at.timestamp() > store.now() + 3600
    _finish_one_kid(app, "2", pc.job.id)
    p = store.job_get("p")
    assert p.run_at is not None and p.run_at.timestamp() <= store.now()


def test_enough_children_ending_before_the_parent_parks_do_not_strand_it(app: App) -> None:
    store = app.store
    pc = claimed_parent(app)
    store.job_spawn_many(pc.job.id, pc.token, [_kid(i) for i in range(3)])
    assert store.job_children_wait(pc.job.id, pc.token, [f"p/k{i}" for i in range(3)], 1) == 0
    _finish_one_kid(app, "0", pc.job.id)  # ends between the parent's look and its park
    store.job_finish_many([FinishParams(pc.job.id, pc.token, pc.job.runs, State.SCHEDULED, Outcome.DEFERRED,
                                        delay=86400.0, given_back=1, reason="children")])
    p = store.job_get("p")
    assert p.state == State.SCHEDULED and p.run_at is not None and p.run_at.timestamp() <= store.now()


def test_dead_children_among_the_ended_fail_or_are_collected(app: App) -> None:
    @app.job(max_attempts=1)
    def kid(ctx, i: int) -> int:
        if i == 0:
            raise ValueError("bad 0")
        return i

    @app.job(max_attempts=1)
    def strict(ctx) -> Any:
        return ctx.wait_any(ctx.spawn_many(kid, [[0], [1]]), at_least=2)

    @app.job(max_attempts=1)
    def lenient(ctx) -> Any:
        return ctx.wait_any(ctx.spawn_many(kid, [[0], [1]]), at_least=2, on_dead="collect")

    strict.enqueue(key="s")
    lenient.enqueue(key="l")
    app.work(burst=True)
    s = app.get("s")
    assert s.state == State.DEAD and s.error_type == "ChildrenFailed" and "s/spawn-0/0" in (s.error_message or "")
    got = app.get("l").result
    assert got["l/spawn-0/1"] == {"state": "succeeded", "result": 1, "error": None}
    assert got["l/spawn-0/0"]["state"] == "dead" and "bad 0" in got["l/spawn-0/0"]["error"]


def test_a_wait_for_some_times_out(app: App, clock) -> None:
    @app.job(queue="kids")
    def kid(ctx, i: int) -> int:
        return i

    @app.job(queue="parents", max_attempts=1)
    def parent(ctx) -> Any:
        return ctx.wait_any(ctx.spawn_many(kid, [[0], [1]]), at_least=1, timeout=60)

    parent.enqueue(key="p")
    app.work(burst=True, queues=["parents"])
    clock.advance(61)
    app.work(burst=True, queues=["parents"])
    p = app.get("p")
    assert p.state == State.DEAD and p.error_type == "ChildrenTimedOut"


@pytest.mark.parametrize("bad", [{"at_least": 0}, {"at_least": 3}, {"at_least": True}, {"at_least": "1"},
                                 {"keys": []}, {"keys": 5}, {"on_dead": "ignore"}])
def test_a_wrong_wait_any_option_is_one_clear_line(app: App, bad: dict[str, Any]) -> None:
    @app.job(queue="kids")
    def kid(ctx, i: int) -> int:
        return i

    @app.job(max_attempts=1)
    def parent(ctx) -> Any:
        keys = ctx.spawn_many(kid, [[0], [1]])
        options = {k: v for k, v in bad.items() if k != "keys"}
        return ctx.wait_any(bad.get("keys", keys), **options)

    parent.enqueue(key="p")
    app.work(burst=True, queues=["default"])
    p = app.get("p")
    assert p.state == State.DEAD and p.error_type == InvalidInput.__name__
    assert "\n" not in (p.error_message or "")


def test_wait_any_in_an_async_job(app: App) -> None:
    @app.job
    def kid(ctx, i: int) -> int:
        return i + 1

    @app.job
    async def parent(ctx) -> dict[str, Any]:
        keys = await ctx.spawn_many(kid, [[1], [2]])
        return await ctx.wait_any(keys, at_least=2)

    parent.enqueue(key="p")
    app.work(burst=True)
    assert app.get("p").result == {"p/spawn-0/0": 2, "p/spawn-0/1": 3}
