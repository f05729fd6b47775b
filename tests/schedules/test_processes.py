"""Real worker processes running their schedulers at once on one store: each window is enqueued once,
none is lost when the active scheduler's process is killed, another takes over within its lease."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from firesafe import App
from firesafe.store.base import JobFilter

APP = '''
import os
from pathlib import Path

from firesafe import App
from firesafe.schedules.scheduler import Scheduler

Scheduler.LEASE = 2.0     # a dead scheduler is replaced within 2 s
Scheduler.INTERVAL = 0.2
HERE = Path({here!r})
app = App({url!r}, lease=5.0)


@app.schedule("* * * * * *", catchup="all")   # every second
def every_second(ctx, window):
    with open(HERE / "runs.log", "a") as f:
        f.write(ctx.job.key + "\\n")
'''

ACTIVE = re.compile(r"scheduler \S+:(\d+):[\w.]+ is the active scheduler")
ENQUEUED = re.compile(r"schedule every_second: enqueued (\d+) window")


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def test_three_worker_processes_enqueue_each_window_once_and_survive_the_leaders_death(
        tmp_path: Path, store_url: str) -> None:
    name = f"fs_sched_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP.format(here=str(tmp_path), url=store_url))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    env.pop("FIRESAFE_STORE", None)
    app = App(store_url)
    app.store.migrate()  # once, before the workers start
    logs = [tmp_path / f"worker{n}.log" for n in range(3)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for log in logs:
            with open(log, "wb") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "firesafe", "worker", f"{name}:app", "--concurrency", "2",
                     "--grace", "5s"], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL))

        def windows() -> int:
            return app.store.job_count(JobFilter(name="every_second"))

        def leaders() -> list[int]:
            return [int(p) for log in logs for p in ACTIVE.findall(log.read_text())]

        wait_for(lambda: windows() >= 3 and leaders(), 30, "three windows enqueued by an active scheduler")
        first = leaders()[0]
        victim = next(p for p in procs if p.pid == first)
        victim.send_signal(signal.SIGKILL)  # the active scheduler dies mid-flight
        victim.wait(10)
        killed_at, before = time.monotonic(), windows()
        wait_for(lambda: len(set(leaders())) >= 2, 15, "another scheduler to take over")
        took_over = time.monotonic() - killed_at
        wait_for(lambda: windows() >= before + 3, 15, "windows after the takeover")
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    jobs = app.store.job_list(JobFilter(name="every_second", limit=100_000))
    starts = sorted(datetime.fromisoformat(j.key.split("@", 1)[1]).timestamp() for j in jobs)
    assert len(starts) == len(set(starts)) >= 6
    gaps = [b - a for a, b in itertools.pairwise(starts) if b - a != 1.0]
    assert gaps == [], "a window was lost"
    assert app.store.schedule_missed_list("every_second") == []  # the takeover was within the grace
    logged = sum(int(n) for log in logs for n in ENQUEUED.findall(log.read_text()))
    assert len(jobs) - 1 <= logged <= len(jobs)  # each window created by one scheduler (the killed one
    assert took_over < 2.0 + 5.0                 # may die between its enqueue and its log line)
    runs = (tmp_path / "runs.log").read_text().split()
    assert set(runs) <= {j.key for j in jobs}
    app.close()


@pytest.fixture(autouse=True)
def _quiet_pythonpath(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRESAFE_STORE", raising=False)
