"""What a provider sees from two ``firesafe worker`` processes sharing a limiter (issue 29).

Given two worker processes started with the CLI, one serving queue ``a`` and one queue ``b``, under
one limiter, and a provider on 127.0.0.1 that stamps each request when it arrives: when the worker
of queue ``a`` stalls right after it was granted tokens (as a process the OS does not run for a
while does), then its late starts neither pile onto the other worker's nor start inside a pause
the other worker stored meanwhile.

The stall is the app's (tests/limits/cli_app.py): it holds the worker's loop between the grant and
the start until the test releases it, so the late start comes at a known moment.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from firesafe import App
from tests.limits.cli_app import build
from tests.limits.provider import Provider, max_in_window
from tests.processes import ROOT, wait_until

RATE, BURST = 20.0, 5.0
#: Window lengths the provider-side bound is checked on (seconds).
WINDOWS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


class Workers:
    """Two ``firesafe worker`` processes (queues ``a`` and ``b``) and the test's own app."""

    def __init__(self, store_url: str, provider: Provider, folder: Path, hold: str = "a", skip: int = 0) -> None:
        self.folder = folder
        self.app: App = build(store_url, provider.url, RATE, BURST)
        self.app.store.migrate()
        self.app.limiters["provider"].status()  # records the limiter: a full bucket
        env = {**_environ(), "FIRESAFE_TEST_STORE": store_url, "FIRESAFE_TEST_PROVIDER": provider.url,
               "FIRESAFE_TEST_RATE": str(RATE), "FIRESAFE_TEST_BURST": str(BURST),
               "FIRESAFE_TEST_HOLD": str(folder), "FIRESAFE_TEST_HOLD_QUEUE": hold,
               "FIRESAFE_TEST_HOLD_SKIP": str(skip)}
        self.procs: list[subprocess.Popen[bytes]] = []
        for queue in ("a", "b"):
            with open(folder / f"worker-{queue}.err", "wb") as err:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "firesafe", "worker", "tests.limits.cli_app:app", "--queues", queue,
                     "--concurrency", "8", "--no-scheduler"],
                    cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL))
        wait_until(lambda: len(self.app.store.worker_list()) >= 2 or self._died(), 30, "both workers to start")
        assert not self._died(), self.logs()

    def _died(self) -> bool:
        return any(p.poll() is not None for p in self.procs)

    def enqueue(self, queue: str, keys: list[str]) -> None:
        self.app.jobs[f"call_{queue}"].enqueue_many([{"key": k} for k in keys])

    def held(self) -> int:
        """How many jobs the stalled worker holds, granted (waits for its stall to begin)."""
        return int(wait_until(lambda: (self.folder / "held").exists() and (self.folder / "held").read_text(), 30,
                              "the stalled worker to be granted tokens"))

    def release(self) -> None:
        (self.folder / "release").write_text("go")

    def wait_done(self, total: int, timeout: float = 60) -> None:
        def done() -> bool:
            assert not self._died(), self.logs()
            jobs = self.app.jobs_list(limit=10_000)
            assert not [j for j in jobs if j.state == "dead"], self.logs()
            return sum(j.state == "succeeded" for j in jobs) >= total

        wait_until(done, timeout, f"{total} jobs to succeed", interval=0.1)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(30)

    def logs(self) -> str:
        return "\n".join(f"--- worker {q} ---\n{(self.folder / f'worker-{q}.err').read_text(errors='replace')[-3000:]}"
                         for q in ("a", "b"))


def _environ() -> dict[str, str]:
    return dict(os.environ)


@pytest.fixture
def provider() -> Iterator[Provider]:
    with Provider() as p:
        yield p


@pytest.fixture
def workers(store_url: str, provider: Provider, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Workers]:
    hold, skip = getattr(request, "param", ("a", 0))
    w = Workers(store_url, provider, tmp_path, hold, skip)
    try:
        yield w
    finally:
        w.stop()
        w.app.close()


def first_attempts_only(app: App) -> None:
    used = sorted({(j.attempt, j.deferrals) for j in app.jobs_list(limit=10_000)})
    assert used == [(1, 0)], f"(attempt, deferrals) pairs seen: {used}"  # waiting used no attempt


def test_a_late_start_does_not_pile_onto_the_other_workers_burst(workers: Workers, provider: Provider) -> None:
    # Worker a is granted the whole burst, then stalls before its jobs start.
    workers.enqueue("a", [f"a{i}" for i in range(5)])
    assert workers.held() == 5
    # Meanwhile the bucket fills up again and worker b spends it.
    wait_until(lambda: (workers.app.limiters["provider"].status().tokens or 0) >= BURST - 0.01, 10,
               "the bucket to fill up again")
    workers.enqueue("b", [f"b{i}" for i in range(5)])
    wait_until(lambda: len(provider.hits_of("b")) >= 5, 10, "worker b's burst to reach the provider")
    # Worker a wakes up; both go on for a few seconds.
    workers.release()
    workers.enqueue("a", [f"a{i}" for i in range(5, 35)])
    workers.enqueue("b", [f"b{i}" for i in range(5, 35)])
    workers.wait_done(70)
    times = provider.times()
    assert len(times) == 70 and len(provider.times(200)) == 70
    for w in WINDOWS:
        most = max_in_window(times, w)
        bound = BURST + RATE * w + 1  # one for the jitter between the workers' clocks and the provider's
        assert most <= bound, f"{most} requests in {w:g}s at the provider (bound {bound:g})"
    first_attempts_only(workers.app)


def test_a_retry_after_reaches_the_jobs_another_worker_was_granted(workers: Workers, provider: Provider) -> None:
    provider.once_at, provider.once_retry_after = 1, 2.0
    # Worker a is granted tokens, then stalls before its jobs start.
    workers.enqueue("a", [f"a{i}" for i in range(3)])
    assert workers.held() == 3
    # Worker b's job meets the provider's 429: the pause is stored at once, from its thread.
    workers.enqueue("b", ["b0"])
    paused = wait_until(lambda: [e for e in workers.app.store.limiter_event_list() if e.kind == "paused"], 10,
                        "the pause to be stored")
    t_429 = provider.once_sent_at
    assert t_429 is not None and [h.key for h in provider.hits] == ["b0"]
    assert paused[0].at.timestamp() - t_429 < 0.05, "the pause was stored later than 50 ms after the 429"
    assert paused[0].detail["job"] == "b0" and paused[0].detail["reason"] == "retry_after"
    until = datetime.fromisoformat(paused[0].detail["until"]).timestamp()
    # Worker a wakes up inside the pause with its grants from before it; more jobs come on both.
    workers.release()
    workers.enqueue("a", [f"a{i}" for i in range(3, 10)])
    workers.enqueue("b", [f"b{i}" for i in range(1, 10)])
    workers.wait_done(20)
    during = [round(t - t_429, 3) for t in provider.times() if t_429 + 0.05 < t < until]
    assert during == [], f"requests inside the pause, seconds after the 429: {during}"
    assert len(provider.times(200)) == 20 and min(t for t in provider.times(200)) >= until
    assert len([e for e in workers.app.store.limiter_event_list() if e.kind == "paused"]) == 1
    first_attempts_only(workers.app)


@pytest.mark.parametrize("workers", [("b", 1)], indirect=True)
def test_a_retry_after_is_stored_from_the_jobs_thread_while_its_loop_is_busy(workers: Workers,
                                                                             provider: Provider) -> None:
    # b0's call is answered 429 only after a while; meanwhile worker b's loop is granted b1 and stalls.
    provider.once_at, provider.once_retry_after, provider.once_delay = 1, 2.0, 0.5
    workers.enqueue("b", ["b0"])
    wait_until(lambda: provider.hits, 10, "b0's call to reach the provider")
    workers.enqueue("b", ["b1"])
    assert workers.held() == 1
    # The 429 reaches b0's thread while its worker's loop is still stalled: the pause is stored anyway.
    paused = wait_until(lambda: [e for e in workers.app.store.limiter_event_list() if e.kind == "paused"], 5,
                        "the pause to be stored while the loop is stalled")
    t_429 = provider.once_sent_at
    assert t_429 is not None and paused[0].at.timestamp() - t_429 < 0.05
    until = datetime.fromisoformat(paused[0].detail["until"]).timestamp()
    workers.release()  # b1 was granted before the pause: it waits for the pause's end
    workers.enqueue("a", ["a0", "a1"])
    workers.wait_done(4)
    assert [h.key for h in provider.hits if h.at < until] == ["b0"]
    first_attempts_only(workers.app)
