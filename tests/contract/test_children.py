"""Contract: child jobs, fan-out and fan-in (docs/workflows.md). Runs on every store.

A parent spawns children once (under retry, rescue, rerun and replay), waits for them without a
worker, and is woken by the store's count when the last one ends; it then gets their results, or
dies naming the children that died (``on_dead="fail"``), or collects them (``"collect"``)."""

from __future__ import annotations

import pytest

from firesafe import App, Backoff, State
from firesafe.idempotency.keys import fingerprint
from firesafe.states import Outcome
from firesafe.store.base import Claimed, ClaimParams, FinishParams, InsertParams, RescueParams

FAST = Backoff(base=1.0, jitter="none")


def _fan(app: App, effects: list[str], *, n: int = 3, fail: set[int] = frozenset(), on_dead: str = "fail",
         crash_after_spawn: bool = False):
    @app.job(max_attempts=1)
    def square(ctx, i: int) -> int:
        effects.append(f"square {i}")
        if i in fail:
            raise ValueError(f"bad {i}")
        return i * i

    @app.job(max_attempts=3, backoff=FAST)
    def total(ctx, count: int):
        keys = ctx.spawn_many(square, [[i] for i in range(count)])
        if crash_after_spawn and ctx.job.attempt == 1:
            raise ConnectionError("lost the database after spawning")
        results = ctx.wait_children(keys, on_dead=on_dead)
        effects.append("total")
        return results if on_dead == "collect" else sum(results)

    return square, total


def claimed_parent(app: App) -> Claimed:
    """Declare job ``kid`` (queue kids), and insert and claim a job "p" of it (queue parents) to
    spawn children from, under its lease, through the store."""
    app.job(name="kid", queue="kids")(lambda ctx, i: i)
    app.store.job_insert_many([InsertParams(key="p", name="kid", queue="parents", fingerprint="f",
                                            payload='{"args":[0],"kwargs":{}}', arg_names='["i"]',
                                            max_attempts=3)])
    return app.store.job_claim(ClaimParams(("parents",), 1, "w", 30.0))[0]


def test_a_parent_gets_its_childrens_results_after_they_end(app: App) -> None:
    effects: list[str] = []
    _, total = _fan(app, effects)
    total.enqueue(3, key="sum")
    app.work(burst=True)
    job = app.get("sum")
    assert job.state == State.SUCCEEDED and job.result == 0 + 1 + 4
    assert sorted(effects) == ["square 0", "square 1", "square 2", "total"]
    kids = app.store.job_children(job.id)
    assert [k.key for k in kids] == ["sum/spawn-0/0", "sum/spawn-0/1", "sum/spawn-0/2"]
    assert all(k.parent_id == job.id for k in kids)
    assert app.store.job_children_counts(job.id) == {"succeeded": 3}
    kinds = [e.kind for e in job.events]
    assert "spawned" in kinds and "woken" in kinds
    # The parent parked once (a deferral, no attempt used) and was woken by the count, not a timer.
    assert job.attempt == 1 and job.deferrals == 1 and job.children_pending == 0


def test_a_retry_of_the_parent_does_not_spawn_its_children_again(app: App, clock) -> None:
    effects: list[str] = []
    _, total = _fan(app, effects, crash_after_spawn=True)
    total.enqueue(3, key="sum")
    app.work(burst=True)
    clock.advance(10)
    app.work(burst=True)
    job = app.get("sum")
    assert job.state == State.SUCCEEDED and job.result == 5
    assert sorted(effects) == ["square 0", "square 1", "square 2", "total"]
    assert app.store.job_children_counts(job.id) == {"succeeded": 3}
    steps = job.trace[-1].detail["steps"]
    assert steps[0] == {"name": "spawn-0", "status": "restored"}


def test_a_spawn_whose_record_was_lost_finds_its_children_and_counts_them_once(app: App) -> None:
    """The process died after the children's insert committed and before the spawn's record: the next
    attempt's spawn inserts nothing and the parent's count stays right."""
    app.job(name="child")(lambda ctx, i: i)
    store = app.store
    params = [InsertParams(key=f"p/spawn-0/{i}", name="child", queue="default",
                           fingerprint=fingerprint("child", f'{{"args":[{i}],"kwargs":{{}}}}'),
                           payload=f'{{"args":[{i}],"kwargs":{{}}}}', arg_names='["i"]', max_attempts=3)
              for i in range(2)]
    parent = store.job_insert_many([InsertParams(key="p", name="child", queue="parents", fingerprint="f",
                                                 payload='{"args":[0],"kwargs":{}}', arg_names='["i"]',
                                                 max_attempts=3)])[0]
    claimed = store.job_claim(ClaimParams(("parents",), 1, "w", 30.0))[0]
    first = store.job_spawn_many(parent.id, claimed.token, params)
    again = store.job_spawn_many(parent.id, claimed.token, params)
    assert first is not None and again is not None
    assert [j.created for j in first] == [True, True] and [j.created for j in again] == [False, False]
    assert store.job_get("p").children_pending == 2
    assert store.job_spawn_many(parent.id, "stale-token", params) is None  # fenced on the lease


def test_a_child_key_taken_by_another_job_is_refused_and_nothing_is_spawned(app: App) -> None:
    @app.job
    def child(ctx, i: int) -> int:
        return i

    @app.job(max_attempts=1)
    def parent(ctx) -> None:
        ctx.spawn_many(child, [{"args": [1]}, {"args": [2], "key": "taken"}])

    child.enqueue(2, key="taken")
    parent.enqueue(key="p")
    app.work(burst=True)
    job = app.get("p")
    assert job.state == State.DEAD and "taken" in (job.error_message or "")
    assert app.store.job_children_counts(job.id) == {}
    assert app.store.job_get("p/spawn-0/0") is None  # all or nothing


def test_a_dead_child_fails_the_parent_naming_it(app: App) -> None:
    effects: list[str] = []
    _, total = _fan(app, effects, fail={1})
    total.enqueue(3, key="sum")
    app.work(burst=True)
    job = app.get("sum")
    assert job.state == State.DEAD and job.error_type == "ChildrenFailed"
    assert "sum/spawn-0/1" in (job.error_message or "") and "ValueError" in (job.error_message or "")
    assert "sum/spawn-0/0 " not in (job.error_message or "")


def test_collect_hands_back_results_and_errors(app: App) -> None:
    effects: list[str] = []
    _, total = _fan(app, effects, fail={2}, on_dead="collect")
    total.enqueue(3, key="sum")
    app.work(burst=True)
    job = app.get("sum")
    assert job.state == State.SUCCEEDED
    assert [(r["key"], r["state"], r["result"]) for r in job.result] == [
        ("sum/spawn-0/0", "succeeded", 0), ("sum/spawn-0/1", "succeeded", 1), ("sum/spawn-0/2", "dead", None)]
    assert job.result[2]["error"].startswith("dead: ValueError")


def test_outcomes_read_what_a_wait_needs_and_leave_unknown_keys_out(app: App) -> None:
    effects: list[str] = []
    _, total = _fan(app, effects, fail={2}, on_dead="collect")
    total.enqueue(3, key="sum")
    app.work(burst=True)
    keys = ["sum/spawn-0/2", "sum/spawn-0/0", "never-spawned"]
    got = app.store.job_outcomes(keys)
    assert sorted(got) == ["sum/spawn-0/0", "sum/spawn-0/2"]
    ok, dead = got["sum/spawn-0/0"], got["sum/spawn-0/2"]
    full = app.get("sum/spawn-0/2")
    assert (ok.state, ok.result, ok.name, ok.parent_id) == (State.SUCCEEDED, 0, "square", app.get("sum").id)
    assert (dead.state, dead.error_type, dead.error_message, dead.reason) == (
        State.DEAD, "ValueError", "bad 2", full.reason)
    assert dead.last_error == "ValueError: bad 2" and dead.finished_at == full.finished_at


def test_the_count_wakes_the_parent_once_the_last_child_ends_not_before(app: App) -> None:
    """Children finished one batch at a time: the parent stays parked (not due) until the last one."""
    done: list[int] = []

    @app.job(queue="kids")
    def kid(ctx, i: int) -> int:
        done.append(i)
        return i

    @app.job(queue="parents")
    def parent(ctx) -> list[int]:
        return ctx.wait_children(ctx.spawn_many(kid, [[i] for i in range(4)]))

    parent.enqueue(key="p")
    app.work(burst=True, queues=["parents"])
    p = app.get("p")
    assert p.state == State.SCHEDULED and p.reason == "children" and p.children_pending == 4
    parked_until = p.run_at
    assert parked_until is not None and parked_until.timestamp() > app.store.now() + 3600
    store = app.store
    for i in range(4):
        c = store.job_claim(ClaimParams(("kids",), 1, "w", 30.0))[0]
        assert store.job_finish_many([FinishParams(c.job.id, c.token, c.job.runs, State.SUCCEEDED,
                                                   Outcome.SUCCEEDED, result=str(i), parent_id=p.id)]) == [True]
        p = app.get("p")
        assert p.children_pending == 3 - i
        assert (p.run_at is not None and p.run_at.timestamp() <= store.now()) == (i == 3)
    app.work(burst=True, queues=["parents"])
    assert app.get("p").result == [0, 1, 2, 3]


def test_a_child_that_ends_before_its_parent_parks_does_not_strand_it(app: App) -> None:
    """The last child ends between the parent's look and its park: the park finds the count at 0."""
    store = app.store
    pc = claimed_parent(app)
    kid = InsertParams(key="p/k", name="kid", queue="kids", fingerprint="g", payload='{"args":[1],"kwargs":{}}',
                       arg_names='["i"]', max_attempts=3)
    store.job_spawn_many(pc.job.id, pc.token, [kid])
    kc = store.job_claim(ClaimParams(("kids",), 1, "w", 30.0))[0]
    store.job_finish_many([FinishParams(kc.job.id, kc.token, kc.job.runs, State.SUCCEEDED, Outcome.SUCCEEDED,
                                        result="1", parent_id=pc.job.id)])
    # The parent looked before the child ended and parks now, for a day.
    store.job_finish_many([FinishParams(pc.job.id, pc.token, pc.job.runs, State.SCHEDULED, Outcome.DEFERRED,
                                        delay=86400.0, given_back=1, reason="children")])
    p = store.job_get("p")
    assert p.state == State.SCHEDULED and p.run_at is not None and p.run_at.timestamp() <= store.now()


@pytest.mark.parametrize("call", ["finish", "finish and claim"])
def test_one_batch_that_ends_a_child_its_parent_and_parks_the_grandparent_counts_each_once(
        app: App, call: str) -> None:
    """A worker's batch of outcomes can hold a job and its child (a parent that did not wait, or one
    parking while its last child ends): each child is counted off its parent once, and the parked
    grandparent, whose only child ended in the same batch, is due at once."""
    app.job(name="kid")(lambda ctx, i: i)
    store = app.store

    def one(key: str, queue: str) -> InsertParams:
        return InsertParams(key=key, name="kid", queue=queue, fingerprint="f", payload='{"args":[0],"kwargs":{}}',
                            arg_names='["i"]', max_attempts=3)

    store.job_insert_many([one("a", "a")])
    a = store.job_claim(ClaimParams(("a",), 1, "w", 30.0))[0]
    store.job_spawn_many(a.job.id, a.token, [one("a/b", "b")])
    b = store.job_claim(ClaimParams(("b",), 1, "w", 30.0))[0]
    store.job_spawn_many(b.job.id, b.token, [one("a/b/c", "c")])
    c = store.job_claim(ClaimParams(("c",), 1, "w", 30.0))[0]
    assert (b.job.parent_id, c.job.parent_id) == (a.job.id, b.job.id)
    batch = [  # the parents first: an order that ends nobody's child before its parent's own outcome
        FinishParams(a.job.id, a.token, a.job.runs, State.SCHEDULED, Outcome.DEFERRED, delay=86400.0,
                     given_back=1, reason="children"),
        FinishParams(b.job.id, b.token, b.job.runs, State.SUCCEEDED, Outcome.SUCCEEDED, result="1",
                     parent_id=a.job.id),
        FinishParams(c.job.id, c.token, c.job.runs, State.SUCCEEDED, Outcome.SUCCEEDED, result="2",
                     parent_id=b.job.id)]
    if call == "finish":
        assert store.job_finish_many(batch) == [True, True, True]
    else:
        applied, claimed = store.job_finish_and_claim(batch, ClaimParams(("none",), 1, "w", 30.0))
        assert applied == [True, True, True] and claimed == []
    pa, pb = store.job_get("a"), store.job_get("a/b")
    assert (pa.children_pending, pb.children_pending) == (0, 0)
    assert pb.state == State.SUCCEEDED and store.job_get("a/b/c").state == State.SUCCEEDED
    assert pa.state == State.SCHEDULED and pa.run_at is not None and pa.run_at.timestamp() <= store.now()


def test_a_rescued_dead_child_and_a_cancelled_one_count_as_ended(app: App, clock) -> None:
    store = app.store
    pc = claimed_parent(app)
    kids = [InsertParams(key=f"p/k{i}", name="kid", queue="kids", fingerprint="g",
                         payload='{"args":[1],"kwargs":{}}', arg_names='["i"]', max_attempts=3) for i in range(2)]
    store.job_spawn_many(pc.job.id, pc.token, kids)
    assert store.job_get("p").children_pending == 2
    kc = store.job_claim(ClaimParams(("kids",), 1, "w", 1.0))[0]
    clock.advance(5)
    assert store.job_rescue_many([RescueParams(kc.job.id, kc.token, kc.job.runs, State.DEAD, None, "worker_lost",
                                               "gone")]) == [True]
    assert store.job_get("p").children_pending == 1
    other = store.job_get("p/k1")
    assert store.job_cancel(other.id, "test") == "cancelled"
    assert store.job_get("p").children_pending == 0
    # Replaying the dead child counts it again (the parent waits for it once more).
    assert store.job_replay_many([kc.job.id], "test") == [kc.job.id]
    assert store.job_get("p").children_pending == 1


def test_replaying_a_dead_parent_reruns_only_its_children_that_did_not_succeed(app: App) -> None:
    effects: list[str] = []
    fail = {1}
    _, total = _fan(app, effects, fail=fail)
    total.enqueue(3, key="sum")
    app.work(burst=True)
    parent = app.get("sum")
    assert parent.state == State.DEAD
    fail.clear()  # the bug is fixed
    effects.clear()
    assert app.store.job_replay_many([parent.id], "ops") == [parent.id]
    assert app.get("sum/spawn-0/1").state == State.QUEUED  # the dead child came back with it
    app.work(burst=True)
    job = app.get("sum")
    assert job.state == State.SUCCEEDED and job.result == 5
    assert sorted(effects) == ["square 1", "total"]  # the children that succeeded were reused


def test_rerunning_a_dead_parent_from_scratch_reuses_its_children(app: App) -> None:
    effects: list[str] = []
    fail = {0}
    _, total = _fan(app, effects, fail=fail)
    total.enqueue(3, key="sum")
    app.work(burst=True)
    parent = app.get("sum")
    fail.clear()
    effects.clear()
    assert app.store.job_rerun(parent.id, "ops", 0)
    app.work(burst=True)
    job = app.get("sum")
    assert job.state == State.SUCCEEDED and job.result == 5
    assert sorted(effects) == ["square 0", "total"]


def test_cancelling_a_parent_cancels_its_waiting_children(app: App) -> None:
    @app.job(queue="kids")
    def kid(ctx, i: int) -> int:
        return i

    @app.job(queue="parents")
    def parent(ctx) -> list[int]:
        return ctx.wait_children(ctx.spawn_many(kid, [[i] for i in range(3)]))

    parent.enqueue(key="p")
    app.work(burst=True, queues=["parents"])
    p = app.get("p")
    assert app.store.job_cancel(p.id, "ops", "not needed") == "cancelled"
    assert app.store.job_children_counts(p.id) == {"cancelled": 3}
    kid_events = app.get("p/spawn-0/0").events
    assert [e.kind for e in kid_events] == ["cancelled"] and kid_events[0].detail.get("cascade") is True


def test_a_wait_times_out(app: App, clock) -> None:
    @app.job(queue="kids")
    def kid(ctx, i: int) -> int:
        return i

    @app.job(queue="parents", max_attempts=1)
    def parent(ctx) -> list[int]:
        return ctx.wait_children(ctx.spawn_many(kid, [[1]]), timeout=60)

    parent.enqueue(key="p")
    app.work(burst=True, queues=["parents"])
    assert app.get("p").state == State.SCHEDULED
    clock.advance(61)
    app.work(burst=True, queues=["parents"])
    p = app.get("p")
    assert p.state == State.DEAD and p.error_type == "ChildrenTimedOut" and "p/spawn-0/0" in (p.error_message or "")


def test_spawn_and_wait_in_an_async_job(app: App) -> None:
    @app.job
    def kid(ctx, i: int) -> int:
        return i + 1

    @app.job
    async def parent(ctx) -> list[int]:
        key = await ctx.spawn(kid, 1)
        return await ctx.wait_children(key)

    parent.enqueue(key="p")
    app.work(burst=True)
    assert app.get("p").result == [2]


@pytest.mark.parametrize("bad", [{"on_dead": "ignore"}, {"timeout": -1}])
def test_a_wrong_wait_option_is_one_clear_line(app: App, bad: dict) -> None:
    @app.job
    def kid(ctx) -> None:
        return None

    @app.job(max_attempts=1)
    def parent(ctx) -> None:
        ctx.wait_children(ctx.spawn(kid), **bad)

    parent.enqueue(key="p")
    app.work(burst=True)
    job = app.get("p")
    assert job.state == State.DEAD and job.error_type == "InvalidInput"


def test_a_window_that_fans_out_stays_once_per_window_through_a_backfill_rerun(app: App, clock) -> None:
    """A schedule's window job spawns children: a repeated backfill adds none, and a rerun of the
    failed window reruns only its child that died, reusing the others."""
    from datetime import UTC, date, datetime

    from firesafe.schedules.windows import Window
    from firesafe.store.base import JobFilter

    clock.set(datetime(2026, 12, 5, tzinfo=UTC).timestamp())
    runs: list[str] = []
    broken = {"part": 1}

    @app.job(max_attempts=1)
    def part(ctx, day: int, n: int) -> int:
        runs.append(f"{day}/{n}")
        if (day, n) == (2, broken["part"]):
            raise ValueError("upstream had a hole")
        return n

    @app.schedule("0 2 * * *", tz="UTC")
    def nightly(ctx, window: Window) -> int:
        day = window.start.day
        return sum(ctx.wait_children(ctx.spawn_many(part, [[day, n] for n in range(3)])))

    app.backfill("nightly", date(2026, 11, 1), date(2026, 11, 2))
    app.work(burst=True)
    assert app.backfill("nightly", date(2026, 11, 1), date(2026, 11, 2)).enqueued == 0
    app.work(burst=True)
    assert app.store.job_count(JobFilter(name="part")) == 6 and len(runs) == 6  # once per window
    assert app.store.job_count(JobFilter(name="nightly", state="dead")) == 1
    broken["part"] = None
    runs.clear()
    assert app.backfill("nightly", date(2026, 11, 1), date(2026, 11, 2), rerun="failed").rerun_count == 1
    app.work(burst=True)
    assert runs == ["2/1"]  # only the child that died ran again
    assert app.store.job_count(JobFilter(name="nightly", state="succeeded")) == 2
    assert app.store.job_count(JobFilter(name="part")) == 6


def test_a_parent_rescued_mid_spawn_spawns_nothing_from_its_old_attempt(app: App, clock) -> None:
    """The parent's attempt lost its lease (rescued elsewhere) before its spawn: the spawn is fenced
    out and inserts nothing; the next attempt spawns the children, once."""
    app.job(name="kid", queue="kids")(lambda ctx, i: i)
    store = app.store
    store.job_insert_many([InsertParams(key="p", name="kid", queue="parents", fingerprint="f",
                                        payload='{"args":[0],"kwargs":{}}', arg_names='["i"]', max_attempts=3)])
    old = store.job_claim(ClaimParams(("parents",), 1, "w1", 1.0))[0]
    clock.advance(5)
    assert store.job_rescue_many([RescueParams(old.job.id, old.token, old.job.runs, State.QUEUED, 0.0,
                                               "worker_lost", "gone")]) == [True]
    new = store.job_claim(ClaimParams(("parents",), 1, "w2", 30.0, suspects=True))[0]  # it lost a worker
    kids = [InsertParams(key=f"p/k{i}", name="kid", queue="kids", fingerprint="g",
                         payload='{"args":[1],"kwargs":{}}', arg_names='["i"]', max_attempts=3) for i in range(3)]
    assert store.job_spawn_many(old.job.id, old.token, kids) is None
    assert store.job_children_counts(old.job.id) == {} and store.job_get("p").children_pending == 0
    assert [j.created for j in store.job_spawn_many(new.job.id, new.token, kids) or []] == [True] * 3
    assert store.job_get("p").children_pending == 3


def test_a_child_dying_with_hostile_text_fails_only_its_parent_with_that_text_stored(app: App) -> None:
    @app.job(max_attempts=1)
    def kid(ctx, i: int) -> int:
        raise ValueError(f"bad \x00 row \udce9 {'x' * 5000}")

    @app.job(max_attempts=1)
    def parent(ctx) -> None:
        ctx.wait_children(ctx.spawn_many(kid, [[1], [2]]))

    parent.enqueue(key="p")
    app.work(burst=True)
    job = app.get("p")
    assert job.state == State.DEAD and job.error_type == "ChildrenFailed"
    message = job.error_message or ""
    assert "p/spawn-0/0" in message and "p/spawn-0/1" in message and "\x00" not in message
    message.encode()  # stored as text that has UTF-8, whatever the children raised


def test_replaying_a_dead_child_while_its_parent_waits_makes_the_parent_wait_for_its_new_run(app: App) -> None:
    broken = {"n": 0}

    @app.job(queue="kids", max_attempts=1)
    def kid(ctx, n: int) -> int:
        if n == broken["n"]:
            raise ValueError("not yet")
        return n + 1

    @app.job(queue="parents")
    def parent(ctx) -> list[int]:
        return ctx.wait_children(ctx.spawn_many(kid, [[0], [1]]))

    parent.enqueue(key="p")
    app.work(burst=True, queues=["parents"])
    store = app.store
    first = store.job_claim(ClaimParams(("kids",), 1, "w", 30.0))[0]  # kid 0 dies
    assert first.job.key == "p/spawn-0/0"
    store.job_finish_many([FinishParams(first.job.id, first.token, first.job.runs, State.DEAD, Outcome.FAILED,
                                        error_type="ValueError", message="not yet", reason="permanent",
                                        parent_id=first.job.parent_id)])
    assert app.get("p").children_pending == 1
    broken["n"] = -1  # fixed
    assert store.job_replay_many([first.job.id], "ops") == [first.job.id]
    assert app.get("p").children_pending == 2  # it waits for the new run too
    app.work(burst=True, queues=["kids"])
    p = app.get("p")
    assert p.children_pending == 0 and p.run_at is not None and p.run_at.timestamp() <= store.now()  # woken
    app.work(burst=True, queues=["parents"])
    assert app.get("p").result == [1, 2]


def test_children_pruned_before_their_parent_collects_answer_from_their_records(store_url: str, clock) -> None:
    """A parent that collects after its children's history was pruned gets their outcomes from the
    records that keep their keys reserved (a result longer than a record keeps is a clear error)."""
    from firesafe import Retention
    from tests.contract.test_reserved_keys import prune_settled

    hour = 3600.0
    app = App(store_url, clock=clock, retention=Retention(succeeded=hour, keys=24 * hour))
    try:
        @app.job(queue="kids", max_attempts=1)
        def square(ctx, i: int) -> int:
            return i * i

        @app.job(queue="parents")
        def total(ctx, count: int) -> int:
            keys = ctx.spawn_many(square, [[i] for i in range(count)])
            return sum(ctx.wait_children(keys))

        total.enqueue(3, key="late")
        app.work(["parents"], burst=True)  # spawns and parks
        app.work(["kids"], burst=True)  # the children end; the parent is due, but no worker takes it yet
        removed = prune_settled(app, clock, hour)
        assert removed["succeeded"] == 3 and app.get("late/spawn-0/0").pruned
        app.work(["parents"], burst=True)
        job = app.get("late")
        assert job.state == State.SUCCEEDED and job.result == 0 + 1 + 4
    finally:
        app.close()
