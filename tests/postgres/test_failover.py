"""Through a primary failover, losing nothing: workers and enqueuers on a multi-host URL
(``target_session_attrs=read-write``) keep going while the primary is killed under load and its
synchronous standby promoted. Every enqueue that returned is done exactly once, no effect runs
twice (the external effect log), the workers reconnect by themselves, and a client meanwhile sees
one clear StoreError per failed try, never a crash.

The private primary and standby: tests/postgres/failover.py.
"""

from __future__ import annotations

import collections
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from firesafe import App
from firesafe.errors import StoreError
from tests.postgres.conftest import wait_until
from tests.postgres.failover import Pair, running_pair
from tests.postgres.procs import read_effects
from tests.processes import Proc, logs

pytestmark = pytest.mark.postgres

SOAK = os.environ.get("FIRESAFE_SOAK") == "1"
#: The longest a worker or an enqueuer may take to work again once the standby takes writes.
RECONNECT_BOUND = 15.0


def acked(path: Path) -> dict[str, float]:
    """Keys whose enqueue returned, and when (the first time)."""
    out: dict[str, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, at = line.split()
            out.setdefault(key, float(at))
    return out


@pytest.fixture
def pair() -> Iterator[Pair]:
    """A fresh primary and synchronous standby for each test: a failover leaves them spent."""
    with running_pair() as p:
        yield p


def all_alive(procs: list[Proc]) -> bool:
    """True while every process runs; fails the test with their logs once one has ended."""
    assert all(p.alive() for p in procs), logs(procs)
    return True


def states(pair: Pair, schema: str) -> dict[str, int]:
    with pair.standby.connect() as conn:
        return dict(conn.execute(  # type: ignore[arg-type]
            f'SELECT state, count(*) FROM "{schema}".firesafe_jobs GROUP BY state').fetchall())


def failover_under_load(pair: Pair, tmp_path: Path, *, workers: int, feeders: int, strikes_after: int,
                        outage: float, lease: float = 10.0) -> None:
    schema = "fs_failover"
    url = pair.url(f"schema={schema}")
    effects = str(tmp_path / "effects.log")
    stop = tmp_path / "stop"
    app = App(url)
    app.store.migrate()
    app.close()
    started: list[Proc] = []
    try:
        for i in range(workers):
            started.append(Proc("tests.postgres.procs", f"w{i}", [
                "worker", url, "--effects", effects, "--concurrency", "4", "--poll", "0.2",
                "--lease", str(lease), "--sleep", "0.002"], tmp_path))
        feeds = [tmp_path / f"acked{i}" for i in range(feeders)]
        for i in range(feeders):
            started.append(Proc("tests.postgres.failover", f"f{i}", [
                "feed", url, f"f{i}-", str(feeds[i]), str(stop)], tmp_path))
        ws, fs = started[:workers], started[workers:]

        # Given jobs flowing in and running,
        wait_until(lambda: all_alive(started) and len(read_effects(effects)) >= strikes_after, 60,
                   f"{strikes_after} jobs to run")
        # when the primary dies without a word and, a moment later, its standby is promoted,
        pair.kill_primary()
        killed = time.time()
        time.sleep(outage)
        pair.promote()
        promoted = time.time()
        # then every worker and every enqueuer works again, by itself, within the bound:
        for w in ws:
            wait_until(lambda w=w: any(s > promoted for _, pid, s in read_effects(effects) if pid == w.pid),
                       RECONNECT_BOUND + 10, f"{w.name} to run a job after the failover\n{logs(started)}")
        for f, path in zip(fs, feeds, strict=True):
            wait_until(lambda path=path: any(at > promoted for at in acked(path).values()),
                       RECONNECT_BOUND + 10, f"{f.name} to enqueue after the failover\n{logs(started)}")
        runs = read_effects(effects)
        back = {w.name: min(s for _, pid, s in runs if pid == w.pid and s > promoted) - promoted for w in ws}
        back |= {f.name: min(at for at in acked(p).values() if at > promoted) - promoted
                 for f, p in zip(fs, feeds, strict=True)}
        print(f"\nfailover: killed -> promoted {promoted - killed:.2f}s; back after promotion: "
              + ", ".join(f"{name} {s:.2f}s" for name, s in sorted(back.items())))
        assert max(back.values()) <= RECONNECT_BOUND, back

        stop.touch()
        for f in fs:
            assert f.wait(60) == 0, logs(started)
        done = set().union(*(acked(p) for p in feeds))
        # Every job in the store (those acknowledged, and any whose enqueue committed unseen) ends
        # succeeded: a claim whose answer was lost is rescued once its lease ends.
        wait_until(lambda: set(states(pair, schema)) == {"succeeded"}, 60,
                   f"every job to succeed: {states(pair, schema)}\n{logs(started)}")
        for w in ws:
            w.signal(signal.SIGTERM)
        for w in ws:
            assert w.wait(60) == 0, logs(started)
    finally:
        stop.touch()
        for p in started:
            if p.alive():
                p.kill()

    ran = collections.Counter(key for key, _, _ in read_effects(effects))
    with pair.standby.connect() as conn:
        stored = {k for (k,) in conn.execute(f'SELECT key FROM "{schema}".firesafe_jobs')}  # type: ignore[arg-type]
    assert done - stored == set(), "an enqueue that returned was lost"
    assert done - set(ran) == set(), "an acknowledged job never ran"
    assert [k for k, c in ran.items() if c > 1] == [], "an effect ran twice"
    assert set(ran) == stored  # and nothing ran that the store does not hold
    # What the clients saw meanwhile: one clear line per failed try, never a traceback.
    for f in fs:
        lines = f.stderr().splitlines()
        assert lines, f"{f.name} should have met the failover"
        assert all(line.startswith("retrying ") and ": StoreError: PostgreSQL store " in line for line in lines), \
            lines[:20]
    for w in ws:
        assert "Traceback" not in w.stderr(), w.stderr()[-3000:]
        assert "store fault" in w.stderr(), "the worker should have noticed the failover"
    # The workers' own accounts agree: each job counted once, by the worker that ran it, and no
    # outcome dropped (one whose save committed unseen is found saved when it is tried again).
    counted = [dict(pair.split("=") for pair in w.stdout().splitlines()[-1].split()) for w in ws]  # after "ready"
    assert sum(int(c["succeeded"]) for c in counted) == len(stored), counted
    assert all(c["fenced"] == "0" for c in counted), counted


def test_a_primary_failover_under_load_loses_nothing_and_runs_nothing_twice(pair: Pair, tmp_path: Path) -> None:
    failover_under_load(pair, tmp_path, workers=2, feeders=2, strikes_after=200, outage=0.5)


@pytest.mark.slow
@pytest.mark.skipif(not SOAK, reason="a longer drill, for `make soak` (FIRESAFE_SOAK=1)")
def test_a_longer_failover_drill(pair: Pair, tmp_path: Path) -> None:
    failover_under_load(pair, tmp_path, workers=4, feeders=4, strikes_after=5000 if SOAK else 1000,
                        outage=5.0, lease=20.0)


def test_a_store_that_reaches_a_standby_says_it_is_read_only_and_works_once_it_is_promoted(pair: Pair) -> None:
    schema = "fs_read_only"
    primary = App(pair.url(f"schema={schema}"))
    primary.store.migrate()
    primary.close()
    # Given a URL that names only the standby (no target_session_attrs to steer clear of it),
    app = App(f"postgresql://postgres@127.0.0.1:{pair.standby.port}/postgres?schema={schema}")
    try:
        noop = app.job(name="noop")(lambda ctx: None)
        # when a client enqueues, it gets one clear StoreError that says why and that a retry works,
        with pytest.raises(StoreError, match=r"is read-only .*a retry reaches the primary") as err:
            noop.enqueue(key="k1")
        assert "cannot execute" in str(err.value) and "in a read-only transaction" in str(err.value), err.value
        # and once the standby is promoted, the same enqueue (the same key) goes through.
        pair.promote()
        assert noop.enqueue(key="k1").created
    finally:
        app.close()
