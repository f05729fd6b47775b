"""Fixtures of the limiter process tests: a provider on 127.0.0.1 and a fleet of worker processes.

Workers are ``python -m tests.limits.procs`` subprocesses on the test's store; the test waits until
all of them heartbeat before it enqueues (so their start-up does not blur the timings), waits for the
jobs through the store, then stops them with SIGTERM. Whatever still runs at teardown is killed by pid.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from firesafe import App
from firesafe.store.base import JobFilter
from tests.limits.procs import build_app
from tests.limits.provider import Provider

ROOT = Path(__file__).resolve().parents[2]


class Fleet:
    """Worker processes sharing one store and one provider, plus the test's own app on them."""

    def __init__(self, store_url: str, provider: Provider, folder: Path, **limiter: Any) -> None:
        self.store_url = store_url
        self.provider = provider
        self.folder = folder
        self.limiter = limiter
        self.app: App = build_app(store_url, provider.url, **limiter)
        self.app.store.migrate()
        self.procs: list[subprocess.Popen[bytes]] = []

    def _args(self) -> list[str]:
        args: list[str] = []
        for name, value in self.limiter.items():
            if value is not None:
                args += [f"--{name.replace('_', '-')}", str(value)]
        return args

    def start(self, n: int, concurrency: int = 8, timeout: float = 30.0) -> None:
        for i in range(n):
            err = open(self.folder / f"worker{i}.err", "wb")  # noqa: SIM115 - closed by the child's exit
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "tests.limits.procs", self.store_url, self.provider.url, *self._args(),
                 "--concurrency", str(concurrency)],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL))
            err.close()
        deadline = time.monotonic() + timeout
        while len(self.app.store.worker_list()) < n:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise AssertionError(f"workers did not start:\n{self.logs()}")
            time.sleep(0.05)

    def count(self, **filters: Any) -> int:
        return self.app.store.job_count(JobFilter(**filters))

    def wait_done(self, total: int, timeout: float) -> float:
        """Wait until ``total`` jobs succeeded; fail at once if one dies. Returns the seconds it took."""
        start = time.monotonic()
        while True:
            if self.count(state="dead"):
                raise AssertionError(f"a job died:\n{self.app.jobs_list(state='dead')}\n{self.logs()}")
            if self.count(state="succeeded") >= total:
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise AssertionError(f"gave up after {timeout:g}s: {self.app.store.job_stats()}\n{self.logs()}")
            time.sleep(0.1)

    def stop(self) -> list[str]:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        outs = []
        for p in self.procs:
            out, _ = p.communicate(timeout=60)
            outs.append(out.decode())
        return outs

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)

    def logs(self) -> str:
        return "\n".join(f"--- worker{i} ---\n{(self.folder / f'worker{i}.err').read_text(errors='replace')[-3000:]}"
                         for i in range(len(self.procs)))


@pytest.fixture
def provider() -> Iterator[Provider]:
    with Provider() as p:
        yield p


@pytest.fixture
def fleet(store_url: str, provider: Provider, tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    made: list[Fleet] = []

    def make(**limiter: Any) -> Fleet:
        folder = tmp_path / f"fleet{len(made)}"
        folder.mkdir()
        made.append(Fleet(store_url, provider, folder, **limiter))
        return made[-1]

    try:
        yield make
    finally:
        for f in made:
            f.kill()
            f.app.close()
