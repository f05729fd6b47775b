"""Fixtures of the process-level tests: real worker subprocesses on a real store.

``procs`` starts ``python -m tests.integration.procs ...`` processes (stdout and stderr go to files the
test reads) and, at teardown, kills whichever of them still run, by pid. ``world`` is the test's own
view: the app (to enqueue and inspect) and the external effects.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from firesafe import App, Job
from firesafe.store.base import JobFilter
from tests.integration.procs import Effects, build_app

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def wait_until(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``pred`` until it returns something true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g}s waiting for {what}")
        time.sleep(interval)


class Proc:
    """One subprocess started by a test."""

    def __init__(self, name: str, args: list[str], folder: Path) -> None:
        self.name = name
        self.out_path = folder / f"{name}.out"
        self.err_path = folder / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen([sys.executable, "-m", "tests.integration.procs", *args], cwd=ROOT,
                                          stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        self.pid = self.popen.pid

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} (pid {self.pid}) still runs after {timeout:g}s:\n"
                                 f"{self.stderr()[-3000:]}") from None

    def kill(self) -> int:
        """SIGKILL (after SIGCONT, in case it is stopped) and reap."""
        if self.alive():
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGKILL)
        return self.popen.wait(30)


class Procs:
    def __init__(self, store_url: str, folder: Path) -> None:
        self.store_url = store_url
        self.folder = folder
        self.started: list[Proc] = []

    def worker(self, name: str, *options: str) -> Proc:
        proc = Proc(name, ["worker", self.store_url, "--dir", str(self.folder), *options], self.folder)
        self.started.append(proc)
        return proc

    def enqueuer(self, name: str, *options: str) -> Proc:
        proc = Proc(name, ["enqueue", self.store_url, "--dir", str(self.folder), *options], self.folder)
        self.started.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(f"----- {p.name} (pid {p.pid}, rc {p.popen.poll()}) -----\n{p.stderr()[-4000:]}"
                         for p in self.started)


@dataclass
class World:
    """What a test sees: the app on the shared store, the effects outside it, its processes."""

    app: App
    effects: Effects
    procs: Procs

    def job(self, key: str) -> Job:
        return self.app.get(key)

    def count(self, **filters: Any) -> int:
        return self.app.store.job_count(JobFilter(**filters))

    def states(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _queue, state, n in self.app.store.job_stats():
            counts[state] = counts.get(state, 0) + n
        return counts

    def stop_all(self) -> None:
        """Kill (by pid) whichever of this test's processes still run."""
        for p in self.procs.started:
            if p.alive():
                p.kill()

    def pause(self, proc: Proc, key: str) -> None:
        """SIGSTOP ``proc`` at a moment it holds no store lock that a rescuer of ``key`` would wait on.

        A process stopped inside a write transaction stalls every writer of a SQLite file (and the
        rows it locked on PostgreSQL) until it resumes: real, but not what a zombie test is about.
        """
        for _ in range(100):
            proc.signal(signal.SIGSTOP)
            if self._lock_free(key):
                return
            proc.signal(signal.SIGCONT)
            time.sleep(0.01)
        raise AssertionError(f"{proc.name} always held a store lock when paused")

    def _lock_free(self, key: str) -> bool:
        store: Any = self.app.store
        if store.dialect == "sqlite":
            conn = sqlite3.connect(store.path, timeout=0.2, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
                return True
            except sqlite3.OperationalError:
                return False
            finally:
                conn.close()
        import psycopg
        from psycopg import sql

        with psycopg.connect(store.conninfo) as conn:
            try:
                conn.execute(sql.SQL("SELECT 1 FROM {}.firesafe_jobs WHERE key = %s FOR UPDATE NOWAIT")
                             .format(sql.Identifier(store.schema)), [key])
                return True
            except psycopg.errors.LockNotAvailable:
                return False

    def running_on(self, pid: int) -> list[Job]:
        """Jobs running under a worker of process ``pid``."""
        return [j for j in self.app.store.job_list(JobFilter(state="running", limit=10_000))
                if j.worker and f":{pid}:" in j.worker]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.stash[_FAILED] = report.failed


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def make_world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[str], World]]:
    """Build a world on a store URL of the test's choosing (the sqlite-only tests use their own files)."""
    made: list[World] = []

    def make(store_url: str) -> World:
        folder = tmp_path / f"world{len(made)}"
        folder.mkdir()
        effects = Effects(folder)
        effects.create()
        app = build_app(store_url, folder)
        app.store.migrate()  # before any subprocess, so they all find the schema in place
        made.append(World(app, effects, Procs(store_url, folder)))
        return made[-1]

    try:
        yield make
    finally:
        for w in made:
            w.stop_all()
            if request.node.stash.get(_FAILED, True):
                print(w.procs.logs())  # the workers' logs, shown by pytest with the failure
            w.app.close()


@pytest.fixture
def world(store_url: str, make_world: Callable[[str], World]) -> World:
    """The test's world on each store (SQLite, then PostgreSQL)."""
    return make_world(store_url)
