"""SQLite only: the store file turns read-only, or its disk fills up, under a running worker.

The worker must log a clear StoreError, stay up, back off, and finish everything once the fault is
gone. Permission bits cannot simulate this: a running worker writes through file descriptors it
opened before the chmod (and root ignores them anyway), so the read-only case uses the immutable
attribute (``chattr +i``), which refuses writes through open descriptors too, as a filesystem
remounted read-only after an error does; the disk-full case mounts a small tmpfs. Each test is
skipped, with its reason, where the machine does not allow that.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.disk_faults import chattr, fill, small_tmpfs
from tests.integration.conftest import World, wait_until

JOBS = [f"io:{i}" for i in range(40)]


def enqueue_and_start(world: World) -> object:
    world.app.jobs["effect"].enqueue_many([{"key": k, "kwargs": {"sleep": 0.05, "sleep_runs": 99}} for k in JOBS])
    worker = world.procs.worker("worker", "--concurrency", "2")
    wait_until(lambda: world.count(state="succeeded") >= 8, 30, "the first jobs to finish")
    return worker


def finish_and_check(world: World, worker, fault_seen_at: int) -> None:
    wait_until(lambda: world.count(state="succeeded") == len(JOBS), 60, "every job to finish after the fault")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.stderr()[-3000:]
    assert world.states() == {"succeeded": len(JOBS)}
    assert sorted(world.effects.applied()) == sorted(JOBS)
    log = worker.stderr()
    assert "Traceback" not in log
    assert "store is reachable again; resuming" in log[fault_seen_at:]


@pytest.fixture
def immutable_ok(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    probe.write_text("x")
    try:
        done = chattr("+i", probe)
    except FileNotFoundError:
        pytest.skip("no chattr on this machine: cannot make the store file refuse writes")
    if done.returncode != 0:
        pytest.skip(f"chattr +i not permitted here ({done.stderr.strip()}); chmod cannot stop a running worker")
    chattr("-i", probe)


def test_store_file_turned_read_only_mid_run_is_reported_and_survived(
        immutable_ok: None, sqlite_url: str, make_world: Callable[[str], World]) -> None:
    world = make_world(sqlite_url)
    db = Path(sqlite_url.removeprefix("sqlite:///"))
    files = [db, Path(f"{db}-wal")]
    # Given a worker draining jobs
    worker = enqueue_and_start(world)
    try:
        # When the store's files stop accepting writes
        assert chattr("+i", *files).returncode == 0
        wait_until(lambda: "store fault" in worker.stderr(), 30, "the worker to report the fault")
        fault_at = worker.stderr().index("store fault")
        before = world.count(state="succeeded")
        # Then it reports a clear StoreError naming the file, and stays up while the fault lasts
        line = next(x for x in worker.stderr().splitlines() if "store fault" in x)
        assert str(db) in line and "retrying in" in line
        assert "cannot write to" in line and "read-only" in line
        wait_until(lambda: worker.stderr().count("store fault") >= 3, 30, "the worker to retry")
        assert worker.alive()
        assert world.count(state="succeeded") == before  # nothing recorded while the file refuses writes
    finally:
        chattr("-i", *files)
    # And once the files accept writes again, everything finishes
    finish_and_check(world, worker, fault_at)
    print(f"\n[read-only] worker logged: {line.split(': ', 1)[1]}")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk") as disk:
        yield disk


def test_store_disk_full_mid_run_is_reported_and_survived(
        small_disk: Path, make_world: Callable[[str], World]) -> None:
    world = make_world(f"sqlite:///{small_disk}/firesafe.db")
    # Given a worker draining jobs from a store on a small disk
    worker = enqueue_and_start(world)
    try:
        # When the disk fills up
        filler = fill(small_disk)
        wait_until(lambda: "store fault" in worker.stderr(), 30, "the worker to report the fault")
        fault_at = worker.stderr().index("store fault")
        line = next(x for x in worker.stderr().splitlines() if "store fault" in x)
        # Then it says the disk is full, and stays up while it is
        assert "is full" in line and str(small_disk) in line
        wait_until(lambda: worker.stderr().count("store fault") >= 3, 30, "the worker to retry")
        assert worker.alive()
    finally:
        filler.unlink(missing_ok=True)
    # And once there is room again, everything finishes
    finish_and_check(world, worker, fault_at)
    world.stop_all()  # before the disk is unmounted
    print(f"\n[disk full] worker logged: {line.split(': ', 1)[1]}")
