"""Fixtures of the process-level tests: real worker subprocesses on a real store.

``procs`` starts ``python -m tests.integration.procs ...`` processes (stdout and stderr go to files the
test reads) and, at teardown, kills whichever of them still run, by pid. ``world`` is the test's own
view: the app (to enqueue and inspect) and the external effects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from firesafe import App, Job
from firesafe.store.base import JobFilter
from tests.integration.procs import Effects, build_app
from tests.processes import Proc, lock_free, logs, pause, running_on, wait_until

__all__ = ["Proc", "World", "wait_until"]

MODULE = "tests.integration.procs"


class Procs:
    def __init__(self, store_url: str, folder: Path) -> None:
        self.store_url = store_url
        self.folder = folder
        self.started: list[Proc] = []

    def worker(self, name: str, *options: str) -> Proc:
        proc = Proc(MODULE, name, ["worker", self.store_url, "--dir", str(self.folder), *options], self.folder)
        self.started.append(proc)
        return proc

    def enqueuer(self, name: str, *options: str) -> Proc:
        proc = Proc(MODULE, name, ["enqueue", self.store_url, "--dir", str(self.folder), *options], self.folder)
        self.started.append(proc)
        return proc

    def logs(self) -> str:
        return logs(self.started, tail=4000)


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
        """SIGSTOP ``proc`` at a moment it holds no store lock that a rescuer of ``key`` would wait on."""
        job_id = self.app.get(key).id
        pause(proc, lambda: lock_free(self.app.store, [job_id]), tries=100)

    def running_on(self, pid: int) -> list[Job]:
        """Jobs running under a worker of process ``pid``."""
        return running_on(self.app.store, pid)


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
