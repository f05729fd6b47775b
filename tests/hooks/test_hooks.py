"""The public hook interface (firesafe/hooks.py), on both stores, with real workers.

Given an app with a hook, when a worker runs its jobs (or someone replays them), then the hook is
told what happened, after the store recorded it, on the threads the interface names; and a hook that
raises changes no outcome and stops no worker.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from firesafe import (
    App,
    AttemptEnded,
    AttemptStarted,
    ConfigError,
    Hook,
    JobDead,
    JobsReplayed,
    Permanent,
    State,
)
from firesafe.hooks import MAX_CONTEXT, Hooks
from tests.processes import wait_until


class Recorder(Hook):
    """Every event, with the thread it came on."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any, str]] = []
        self.lock = threading.Lock()

    def note(self, kind: str, value: Any) -> None:
        with self.lock:
            self.events.append((kind, value, threading.current_thread().name))

    def worker_started(self, worker: Any) -> None:
        self.note("worker_started", worker)

    def worker_stopped(self, worker: Any) -> None:
        self.note("worker_stopped", worker)

    def attempt_started(self, attempt: AttemptStarted) -> None:
        self.note("attempt_started", attempt)

    def attempt_ended(self, attempt: AttemptEnded) -> None:
        self.note("attempt_ended", attempt)

    def job_dead(self, job: JobDead) -> None:
        self.note("job_dead", job)

    def job_replayed(self, replayed: JobsReplayed) -> None:
        self.note("job_replayed", replayed)

    def of(self, kind: str) -> list[Any]:
        with self.lock:
            return [v for k, v, _ in self.events if k == kind]

    def kinds(self) -> list[str]:
        with self.lock:
            return [k for k, _, _ in self.events]


def declare(app: App) -> tuple[Any, Any]:
    @app.job(queue="default")
    def charge(ctx: Any, order: str) -> str:
        return f"charged {order}"

    @app.job(queue="default")
    def broken(ctx: Any, order: str) -> None:
        raise Permanent(f"card declined for {order}")

    return charge, broken


def test_a_hook_hears_each_attempt_its_outcome_and_the_dead_letter(app: App) -> None:
    recorder = app.add_hook(Recorder())
    charge, broken = declare(app)
    charge.enqueue("o-1", key="charge:o-1")
    broken.enqueue("o-2", key="broken:o-2")

    loop = {}

    class Loop(Hook):
        def worker_started(self, worker: Any) -> None:
            loop["thread"] = threading.current_thread().name

    app.add_hook(Loop())
    worker = app.worker(burst=True, concurrency=2)
    stats = worker.run()

    assert stats.succeeded == 1 and stats.dead == 1
    kinds = recorder.kinds()
    assert kinds[0] == "worker_started" and kinds[-1] == "worker_stopped"
    assert recorder.of("worker_started") == [worker] and recorder.of("worker_stopped") == [worker]
    started = {a.key: a for a in recorder.of("attempt_started")}
    ended = {a.key: a for a in recorder.of("attempt_ended")}
    assert set(started) == set(ended) == {"charge:o-1", "broken:o-2"}
    ok, bad = ended["charge:o-1"], ended["broken:o-2"]
    assert (ok.name, ok.queue, ok.attempt, ok.outcome, ok.state, ok.error_type, ok.failed) == \
        ("charge", "default", 1, "succeeded", "succeeded", None, False)
    assert (bad.outcome, bad.state, bad.error_type, bad.reason, bad.failed) == \
        ("failed", "dead", "Permanent", "permanent", True)
    assert "card declined for o-2" in (bad.message or "")
    assert ok.worker == worker.id and ok.job_id == app.get("charge:o-1").id and ok.duration >= 0
    assert started["charge:o-1"].run == ok.run == 1 and started["charge:o-1"].max_attempts == 5
    [dead] = recorder.of("job_dead")
    assert (dead.key, dead.name, dead.reason, dead.error_type, dead.worker) == \
        ("broken:o-2", "broken", "permanent", "Permanent", worker.id)
    # each attempt's end comes after its start, and the dead letter after the attempt that made it
    assert kinds.index("job_dead") > max(i for i, k in enumerate(kinds) if k == "attempt_ended" and
                                         recorder.events[i][1].key == "broken:o-2")
    # threads: an attempt starts on the thread that runs it; outcomes are told on the loop's thread
    threads = {k: {t for kind, _, t in recorder.events if kind == k} for k in set(kinds)}
    assert threads["attempt_ended"] == threads["job_dead"] == threads["worker_started"] == {loop["thread"]}
    assert loop["thread"] not in threads["attempt_started"]


def test_a_hook_that_raises_changes_no_outcome_and_stops_no_worker(app: App, caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Hook):
        def worker_started(self, worker: Any) -> None:
            raise RuntimeError("bug in worker_started")

        def worker_stopped(self, worker: Any) -> None:
            raise RuntimeError("bug in worker_stopped")

        def start_duty(self, worker: Any) -> Any:
            return self.stop_duty

        def stop_duty(self) -> None:
            raise RuntimeError("bug in a duty's stop")

        def attempt_started(self, attempt: AttemptStarted) -> None:
            raise RuntimeError("bug in attempt_started")

        def attempt_ended(self, attempt: AttemptEnded) -> None:
            raise RuntimeError("bug in attempt_ended")

        def job_dead(self, job: JobDead) -> None:
            raise RuntimeError("bug in job_dead")

        def job_context(self) -> str | None:
            raise RuntimeError("bug in job_context")

    app.add_hook(Broken())
    recorder = app.add_hook(Recorder())  # after the broken one: still told
    charge, broken = declare(app)
    charge.enqueue_many([{"args": [f"o-{i}"], "key": f"charge:o-{i}"} for i in range(6)])
    broken.enqueue("o-x", key="broken:o-x")

    with caplog.at_level(logging.ERROR, logger="firesafe.hooks"):
        stats = app.worker(burst=True, concurrency=3).run()

    assert (stats.succeeded, stats.dead) == (6, 1)
    assert {j.state for j in app.jobs_list(job="charge")} == {State.SUCCEEDED}
    assert app.get("broken:o-x").state == State.DEAD
    assert len(recorder.of("attempt_ended")) == 7 and len(recorder.of("job_dead")) == 1
    assert len(recorder.of("worker_stopped")) == 1
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for method in ("worker_started", "worker_stopped", "stop_duty", "attempt_started", "attempt_ended", "job_dead",
                   "job_context"):
        assert f"Broken.{method} raised" in logged


def test_replays_and_reruns_are_told_with_who_and_why(app: App) -> None:
    recorder = app.add_hook(Recorder())
    charge, broken = declare(app)
    broken.enqueue("o-1", key="broken:o-1")
    broken.enqueue("o-2", key="broken:o-2")
    charge.enqueue("o-3", key="charge:o-3")
    app.worker(burst=True).run()

    result = app.dlq.replay(["broken:o-1", "broken:o-2", "charge:o-3"], actor="ana", reason="card fixed")
    assert sorted(result.keys) == ["broken:o-1", "broken:o-2"]
    app.rerun("charge:o-3", actor="bo", reason="check")
    app.dlq.replay(["broken:o-1"], actor="ana", dry_run=True)  # a dry run moves nothing: no event

    replay, rerun = recorder.of("job_replayed")
    assert (sorted(replay.keys), replay.actor, replay.reason, replay.how) == \
        (["broken:o-1", "broken:o-2"], "ana", "card fixed", "replay")
    assert (rerun.keys, rerun.actor, rerun.reason, rerun.how) == (("charge:o-3",), "bo", "check", "rerun")
    assert {j.state for j in app.jobs_list()} == {State.QUEUED}


def test_a_duty_starts_with_the_worker_and_stops_with_it(app: App) -> None:
    events: list[str] = []

    class Duty(Hook):
        def start_duty(self, worker: Any) -> Any:
            events.append(f"start {worker.id}")
            return lambda: events.append("stop")

        def worker_stopped(self, worker: Any) -> None:
            events.append("worker stopped")

    app.add_hook(Duty())
    worker = app.worker(burst=True)
    worker.run()
    assert events == [f"start {worker.id}", "stop", "worker stopped"]


def test_a_job_enqueued_in_the_process_wakes_its_idle_worker(app: App) -> None:
    recorder = app.add_hook(Recorder())
    charge, _ = declare(app)
    worker = app.worker(poll_interval=60.0)  # it would not look again for a minute by itself
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: recorder.of("worker_started"), 20, "the worker to start")
        wait_until(lambda: worker.stats.claimed == 0 and worker._wake.is_set() is False, 20, "the worker to idle")
        charge.enqueue("o-1", key="charge:o-1")
        wait_until(lambda: recorder.of("attempt_ended"), 20, "the job to run at once")
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()
    # once stopped, it is no longer woken (the app forgets it)
    assert recorder.of("worker_stopped") == [worker]
    woken: list[int] = []
    worker.wake = lambda: woken.append(1)  # type: ignore[method-assign]
    charge.enqueue("o-2", key="charge:o-2")
    assert woken == []


def test_the_context_a_hook_gives_at_enqueue_reaches_each_attempt(app: App) -> None:
    class Context(Hook):
        text: str | None = "trace-1"

        def job_context(self) -> str | None:
            return self.text

    given = app.add_hook(Context())
    recorder = app.add_hook(Recorder())
    charge, _ = declare(app)
    charge.enqueue("o-1", key="one")
    charge.enqueue_many([{"args": [f"o-{i}"], "key": f"many{i}"} for i in range(3)])
    given.text = "x" * (MAX_CONTEXT + 100) + "\x00"
    charge.enqueue("o-9", key="long")
    given.text = None
    charge.enqueue_many([{"args": ["o-8"], "key": "none"}])
    app.worker(burst=True).run()

    contexts = {a.key: a.context for a in recorder.of("attempt_started")}
    assert contexts == {"one": "trace-1", "many0": "trace-1", "many1": "trace-1", "many2": "trace-1",
                        "long": "x" * MAX_CONTEXT, "none": None}
    assert {a.key: a.context for a in recorder.of("attempt_ended")} == contexts
    assert app.get("one").trace_context == "trace-1"


def test_only_hook_instances_are_taken_and_unused_events_cost_nothing(store_url: str) -> None:
    with pytest.raises(ConfigError, match=r"firesafe\.Hook"):
        App(store_url, hooks=[object()])  # type: ignore[list-item]

    class OnlyDead(Hook):
        def job_dead(self, job: JobDead) -> None:
            pass

    app = App(store_url, hooks=[OnlyDead()])
    try:
        # no hook of the app listens to these: the worker builds no value for them
        assert app.hooks.attempt_started == () and app.hooks.attempt_ended == () and app.hooks.job_context == ()
        assert len(app.hooks.job_dead) == 1
        hook = app.hooks.job_dead[0].__self__
        assert hook in app.hooks
        app.hooks.remove(hook)
        app.hooks.remove(hook)  # twice: nothing happens
        assert app.hooks.job_dead == ()
    finally:
        app.close()
    hooks = Hooks()
    one = OnlyDead()
    hooks.add(one)
    hooks.add(one)  # once is enough
    assert len(hooks) == 1 and one in hooks
