"""Schedules name their queue: a worker runs the scheduler only for the schedules of the queues it
serves, and ``--no-scheduler`` runs none. Real worker processes on both stores."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from firesafe import App
from firesafe.schedules.scheduler import Scheduler, SchedulerDuty
from firesafe.states import State
from firesafe.store.base import JobFilter

APP = '''
from firesafe import App
from firesafe.schedules.scheduler import Scheduler

Scheduler.INTERVAL = 0.2
app = App({url!r}, lease=5.0)


@app.schedule("* * * * * *", catchup="all", queue="payments")   # every second, into payments
def settle(ctx, window):
    return None


@app.schedule("* * * * * *", catchup="all")   # every second, into default
def report(ctx, window):
    return None


@app.job(queue="payments")
def marker(ctx):
    return "ok"
'''


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def user_app(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, App]]:
    monkeypatch.delenv("FIRESAFE_STORE", raising=False)
    name = f"fs_sched_q_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP.format(url=store_url))
    app = App(store_url)

    @app.job(queue="payments")
    def marker(ctx: object) -> str:  # the user's module declares it too
        return "ok"

    app.store.migrate()  # once, before the worker starts
    yield name, app
    app.close()


def start_worker(tmp_path: Path, module: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    env.pop("FIRESAFE_STORE", None)
    log = tmp_path / f"worker-{uuid.uuid4().hex[:6]}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "firesafe", "worker", f"{module}:app", "--concurrency", "2",
                                 "--grace", "5s", *args], cwd=tmp_path, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return proc, log


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def windows(app: App, name: str) -> int:
    return app.store.job_count(JobFilter(name=name))


def succeeded(app: App, key: str) -> bool:
    job = app.store.job_get(key)
    return job is not None and job.state == State.SUCCEEDED


def test_a_payments_worker_enqueues_the_windows_of_payments_schedules_only(
        tmp_path: Path, user_app: tuple[str, App]) -> None:
    module, app = user_app
    proc, log = start_worker(tmp_path, module, "--queues", "payments")
    try:
        # When the payments worker's scheduler has enqueued (and run) several windows of `settle`
        wait_for(lambda: windows(app, "settle") >= 3, 30, "three windows of the payments schedule")
        wait_for(lambda: app.store.job_count(JobFilter(name="settle", state="succeeded")) >= 2, 30,
                 "payments windows run by the worker")
        # Then `report`, a schedule on the default queue this worker does not serve, got no window
        assert windows(app, "report") == 0
    finally:
        stop(proc)
    text = log.read_text()
    assert "is the active scheduler for queue payments" in text, text
    assert "for queue default" not in text


def test_no_scheduler_enqueues_no_window(tmp_path: Path, user_app: tuple[str, App]) -> None:
    module, app = user_app
    proc, log = start_worker(tmp_path, module, "--queues", "payments,default", "--no-scheduler")
    try:
        # Given the worker is up (it ran a job), and then two seconds of windows have ended (a job
        # delayed by 2.5 s ran): a scheduler ticking every 0.2 s would have enqueued them by now
        marker = app.jobs["marker"]
        marker.enqueue(key="up")
        wait_for(lambda: succeeded(app, "up"), 30, "the worker to run a job")
        first = app.store.now()
        marker.enqueue(key="later", delay=2.5)
        wait_for(lambda: succeeded(app, "later"), 30, "the delayed job")
        assert app.store.now() - first >= 2.5
        # Then no window of either schedule was enqueued
        assert windows(app, "settle") == 0 and windows(app, "report") == 0
        assert app.store.schedule_state_list() == []
    finally:
        stop(proc)
    assert "scheduler off in this worker" in log.read_text()


def test_scheduler_runs_only_the_schedules_of_its_queues_and_leads_per_queue(app: App) -> None:
    @app.schedule("*/5 * * * *", queue="payments")
    def settle(ctx: object, window: object) -> None:
        return None

    @app.schedule("*/5 * * * *")
    def report(ctx: object, window: object) -> None:
        return None

    assert app.schedules["settle"].queue == "payments" and app.schedules["report"].queue == "default"
    payments = Scheduler(app, "w-payments", queues=["payments"])
    default = Scheduler(app, "w-default", queues=["default", "mail"])
    assert [s.name for s in payments.schedules()] == ["settle"]
    # each queue has its own active scheduler: the payments one does not keep the default's out
    assert set(payments.tick() or {}) == {"settle"}
    assert set(default.tick() or {}) == {"report"}
    assert payments.leading and default.leading
    # a second scheduler of the same queue waits for the lease
    assert Scheduler(app, "w-payments-2", queues=["payments"]).tick() is None
    payments.stop()
    assert set(Scheduler(app, "w-payments-2", queues=["payments"]).tick() or {}) == {"settle"}


def test_a_worker_made_with_scheduler_false_starts_no_scheduler(app: App) -> None:
    @app.schedule("*/5 * * * *", queue="payments")
    def settle(ctx: object, window: object) -> None:
        return None

    stops = app.start_duties(app.worker(["payments"], scheduler=False))
    stops += app.start_duties(app.worker(["default"]))  # serves no schedule's queue
    try:
        assert not [s for s in stops if isinstance(getattr(s, "__self__", None), SchedulerDuty)]
    finally:
        for s in stops:
            s()
    served = app.start_duties(app.worker(["payments"]))
    try:
        assert [s for s in served if isinstance(getattr(s, "__self__", None), SchedulerDuty)]
    finally:
        for s in served:
            s()
