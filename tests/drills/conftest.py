"""Fixtures of the recovery drills: real worker processes on a real store, a provider outside it,
and one check of the pass criteria that every drill ends with.

Pass criteria (issue 8), exact: 0 jobs lost, 0 effects applied twice, every job ends ``succeeded`` or
``dead``, every dead job has its trace and its dead-letter alert. Duplicate calls that the provider
absorbed (the at-least-once attempts) are counted and printed, not hidden.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from firesafe import App, Job, State
from firesafe.steps.steps import step_key
from firesafe.store.base import JobFilter
from tests.drills.procs import Provider, build_app
from tests.processes import Proc, lock_free, logs, pause, running_on, sqlite_unlocked, wait_until

__all__ = ["SOAK", "Drill", "Proc", "wait_until"]

MODULE = "tests.drills.procs"
SOAK = os.environ.get("FIRESAFE_SOAK") == "1"

#: The effects each job of the drill app applies, by job name (one idempotency key per step).
EFFECTS = {"pay": ("pay",), "transfer": ("debit", "credit"), "long": ("long",), "broken": ("broken",),
           "poison": (), "fanout": ("announce",)}


@dataclass
class Report:
    """What a drill measured (printed with the test's output)."""

    jobs: int
    states: dict[str, int]
    attempts: int  # trace entries, every claim counted
    lost_attempts: int
    effects: int  # effects applied (one per idempotency key)
    calls: int  # raw calls that reached the provider
    duplicates_absorbed: int  # calls the provider's key deduplicated
    dead: list[str] = field(default_factory=list)

    def line(self, name: str) -> str:
        return (f"[{name}] jobs={self.jobs} states={self.states} attempts={self.attempts} "
                f"lost_attempts={self.lost_attempts} effects={self.effects} calls={self.calls} "
                f"duplicates_absorbed={self.duplicates_absorbed}")


@dataclass
class Drill:
    """A drill's world: the app on the store, the provider outside it, the processes it started."""

    store_url: str
    folder: Path
    app: App
    provider: Provider
    started: list[Proc] = field(default_factory=list)

    # -- processes -----------------------------------------------------------------------------
    def worker(self, name: str, *options: str) -> Proc:
        proc = Proc(MODULE, name, ["worker", self.store_url, "--dir", str(self.folder), *options], self.folder)
        self.started.append(proc)
        return proc

    def replayer(self, name: str, seed: int) -> Proc:
        proc = Proc(MODULE, name, ["replay", self.store_url, "--dir", str(self.folder), "--name", name,
                                   "--seed", str(seed)], self.folder)
        self.started.append(proc)
        return proc

    def stop(self, workers: list[Proc], codes: tuple[int, ...] = (0,)) -> None:
        """SIGTERM each worker once it is ready (its handlers in: before that, SIGTERM's default
        kills it, which a worker started late in a drill, while the others end the jobs, may still
        be), then wait for each to exit with one of ``codes``."""
        for w in workers:
            wait_until(lambda w=w: (self.folder / f"worker-{w.pid}.ready").exists() or not w.alive(), 60,
                       f"{w.name} to be ready")
            w.signal(signal.SIGTERM)
        for w in workers:
            assert w.wait(30) in codes, w.stderr()[-3000:]

    def stop_all(self) -> None:
        for p in self.started:
            if p.alive():
                p.kill()

    def logs(self) -> str:
        return logs(self.started)

    # -- the store -----------------------------------------------------------------------------
    def job(self, key: str) -> Job:
        return self.app.get(key)

    def count(self, **filters: Any) -> int:
        return self.app.store.job_count(JobFilter(**filters))

    def finished(self) -> int:
        return self.count(state="succeeded") + self.count(state="dead")

    def states(self) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for _queue, state, n in self.app.store.job_stats():
            counts[state] += n
        return dict(counts)

    def running_on(self, pid: int) -> list[Job]:
        return running_on(self.app.store, pid)

    def all_jobs(self) -> list[Job]:
        out: list[Job] = []
        while True:
            page = self.app.store.job_list(JobFilter(limit=5000, offset=len(out)))
            out += page
            if len(page) < 5000:
                return out

    def pause(self, proc: Proc) -> None:
        """SIGSTOP ``proc`` at a moment it holds no store lock and no lock of the provider's log (a
        process stopped inside a write transaction stalls every writer of a SQLite file, which is
        not what a zombie drill is about: a rescuer's call to the provider would wait for it)."""
        pause(proc, lambda: lock_free(self.app.store, [j.id for j in self.running_on(proc.pid)])
              and sqlite_unlocked(self.provider.db))

    # -- the pass criteria ---------------------------------------------------------------------
    def dead_letter_alerts(self) -> Counter[int]:
        """How many dead-letter alert events each job has in the outbox (nothing groups them here:
        the drill app has no sinks, so the events wait in the outbox where they were written)."""
        events = self.app.store.alert_pending(10_000_000)  # type: ignore[attr-defined]
        return Counter(e.job_id for e in events if e.kind == "dead_letter")

    def verify(self, keys: list[str], *, allow_dead: bool = True) -> Report:
        """Check the pass criteria for the jobs ``keys``; returns the figures."""
        jobs = {j.key: j for j in self.all_jobs()}
        missing = [k for k in keys if k not in jobs]
        assert not missing, f"{len(missing)} job(s) lost: {missing[:10]}"
        ours = [jobs[k] for k in keys]
        states = Counter(str(j.state) for j in ours)
        assert set(states) <= {"succeeded", "dead"}, f"jobs that never ended: {dict(states)}"
        if not allow_dead:
            assert states == {"succeeded": len(keys)}, dict(states)

        applied = self.provider.applied()
        calls = self.provider.calls()
        per_key = Counter(c[0] for c in calls)
        assert sum(1 for c in calls if c[4]) == len(applied)  # one applying call per effect, never two
        alerts = self.dead_letter_alerts()
        attempts = lost = 0
        dead: list[str] = []
        for job in ours:
            attempts += job.runs
            lost += job.lost
            assert job.attempt <= job.max_attempts, (job.key, job.attempt, job.max_attempts)
            idem = [step_key(job.key, s) for s in EFFECTS[job.name]]
            repeated = [k for k in idem if per_key[k] > 1]
            # The trace is read where there is something to see: more than one run, a death, a repeat.
            full = self.job(job.key) if (job.runs != 1 or job.state == State.DEAD or repeated) else None
            if full is not None:
                assert len(full.trace) == full.runs, (job.key, len(full.trace), full.runs)
                assert all(a.outcome is not None for a in full.trace), (job.key, "an attempt never ended")
                assert sum(a.outcome == "lost" for a in full.trace) == full.lost, job.key
            if job.state == State.SUCCEEDED:
                if full is not None:  # one committed completion
                    assert [a.outcome for a in full.trace].count("succeeded") == 1, (job.key, full.trace)
                for k in idem:  # every effect of a succeeded job applied, exactly once
                    assert k in applied, (job.key, k, "effect missing")
            else:
                assert full is not None
                dead.append(job.key)
                assert full.trace, (job.key, "a dead job without its trace")
                last = full.trace[-1]
                assert last.outcome in ("failed", "lost", "timed_out") and last.error_type, (job.key, last)
                assert full.reason, (job.key, "a dead job without its reason")
                assert alerts[full.id] >= 1, (job.key, "a dead job without its dead-letter alert")
            for k in repeated:  # a repeated call only ever comes from a job that ran more than once
                assert job.runs > 1, (job.key, k, per_key[k])
        return Report(jobs=len(keys), states=dict(states), attempts=attempts, lost_attempts=lost,
                      effects=len(applied), calls=len(calls), duplicates_absorbed=len(calls) - len(applied),
                      dead=dead)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "pg_restart: restarts the shared PostgreSQL server (runs last)")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that restart the PostgreSQL server run after every other test of the session."""
    last = [item for item in items if item.get_closest_marker("pg_restart")]
    if last:
        items[:] = [item for item in items if not item.get_closest_marker("pg_restart")] + last


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.stash[_FAILED] = report.failed


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def make_drill(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Drill]]:
    made: list[Drill] = []

    def make(store_url: str, lease: float | None = None) -> Drill:
        folder = tmp_path / f"drill{len(made)}"
        folder.mkdir()
        provider = Provider(folder)
        provider.create()
        app = build_app(store_url, folder) if lease is None else build_app(store_url, folder, lease=lease)
        app.store.migrate()  # before any subprocess, so they all find the schema in place
        made.append(Drill(store_url, folder, app, provider))
        return made[-1]

    try:
        yield make
    finally:
        for d in made:
            d.stop_all()
            if request.node.stash.get(_FAILED, True):
                print(d.logs())
            d.app.close()


@pytest.fixture
def drill(store_url: str, make_drill: Callable[..., Drill]) -> Drill:
    """The drill's world on each store (SQLite, then PostgreSQL)."""
    return make_drill(store_url)
