"""SQLite only: the store file turns read-only, or its disk fills up, under a running worker.

The worker must log a clear StoreError, stay up, back off, and finish everything once the fault is
gone. Permission bits cannot simulate this: a running worker writes through file descriptors it
opened before the chmod (and root ignores them anyway), so the read-only case uses the immutable
attribute (``chattr +i``), which refuses writes through open descriptors too, as a filesystem
remounted read-only after an error does; the disk-full case mounts a small tmpfs. Each test is
skipped, with its reason, where the machine does not allow that.

Two more: a file that refuses writes when the store opens it (SQLite then opens the connection
read-only, for good: the store must reopen it once the file takes writes), and a store file deleted
or replaced under a running worker (it must fail loudly, not go on writing into the unlinked file).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from firesafe import App, StoreError
from firesafe.store import sqlite as sqlite_store
from firesafe.store.base import JobFilter
from tests.disk_faults import chattr, fill, small_tmpfs
from tests.integration.conftest import World, wait_until
from tests.integration.procs import build_app

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


# -- a file that refused writes when it was opened -------------------------------------------------
def test_store_opened_while_read_only_writes_once_the_file_takes_writes_again(immutable_ok: None,
                                                                              tmp_path: Path) -> None:
    path = tmp_path / "firesafe.db"
    app = App(f"sqlite:///{path}")
    app.store.schema_version()
    app.close()  # a migrated store; closing the last connection removes its -wal and -shm
    job = app.job(lambda ctx: None, name="noop")
    # Given a store file that refuses writes when the store first connects to it
    assert chattr("+i", path).returncode == 0
    try:
        # Then a write fails, clearly, and nothing is written
        with pytest.raises(StoreError, match="is read-only") as fault:
            job.enqueue(key="k1")
        assert str(path) in str(fault.value)
        assert app.store.job_count(JobFilter()) == 0
    finally:
        chattr("-i", path)
    # When the file takes writes again, the next write succeeds (on a new connection)
    assert job.enqueue(key="k1").created
    assert app.store.job_count(JobFilter()) == 1
    app.close()


def test_connection_opened_read_only_unnoticed_is_dropped_after_its_first_refused_write(
        immutable_ok: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "firesafe.db"
    app = App(f"sqlite:///{path}")
    app.store.schema_version()
    app.close()
    job = app.job(lambda ctx: None, name="noop")
    # Given a file that starts refusing writes between the store's look at it and SQLite's open (a race,
    # made certain here by hiding the refusal from the store's look)
    monkeypatch.setattr(sqlite_store, "_refusing_writes", lambda path, folder=True: [])
    assert chattr("+i", path).returncode == 0
    try:
        with pytest.raises(StoreError, match="is read-only"):
            job.enqueue(key="k1")
    finally:
        chattr("-i", path)
    # Then the write that SQLite refused dropped that connection: the next one writes
    assert job.enqueue(key="k1").created
    app.close()


def test_worker_started_on_a_read_only_store_resumes_once_it_takes_writes(
        immutable_ok: None, sqlite_url: str, make_world: Callable[[str], World]) -> None:
    world = make_world(sqlite_url)
    db = Path(sqlite_url.removeprefix("sqlite:///"))
    world.app.jobs["effect"].enqueue_many([{"key": k} for k in JOBS])
    world.app.close()  # nothing has the store open now: its -wal and -shm are gone
    # Given a worker that starts while the store file refuses writes
    assert chattr("+i", db).returncode == 0
    try:
        worker = world.procs.worker("worker", "--concurrency", "2")
        wait_until(lambda: worker.stderr().count("store fault") >= 2, 15, "the worker to report the fault twice")
        fault_at = worker.stderr().index("store fault")
        line = next(x for x in worker.stderr().splitlines() if "store fault" in x)
        assert "is read-only" in line and str(db) in line
        assert worker.alive() and world.count(state="succeeded") == 0
    finally:
        chattr("-i", db)
    # When the file takes writes again, the worker's next try writes: it resumes and finishes everything
    wait_until(lambda: world.count(state="succeeded") == len(JOBS), 20, "every job to finish after the fault")
    finish_and_check(world, worker, fault_at)
    print(f"\n[read-only at start] worker logged: {line.split(': ', 1)[1]}")


# -- a store file deleted or replaced under running processes --------------------------------------
def test_store_file_replaced_under_an_open_store_is_a_store_error_not_a_ghost_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "CHECK_EVERY", 0.0)  # check at every call (it is once a second)
    path = tmp_path / "firesafe.db"
    old = App(f"sqlite:///{path}")
    job = old.job(lambda ctx: None, name="noop")
    job.enqueue(key="before")
    # Given the store's files deleted under the open store
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink()
    # Then its writes and reads fail, and nothing creates the file again
    with pytest.raises(StoreError, match=r"was deleted or replaced while open \(no file has that path now\).*restart"):
        job.enqueue(key="lost")
    with pytest.raises(StoreError, match="deleted or replaced"):
        old.store.job_count(JobFilter())
    errors: list[BaseException] = []
    reader = threading.Thread(target=lambda: _catch(errors, old.store.job_count, JobFilter()))  # a new connection
    reader.start()
    reader.join()
    assert len(errors) == 1 and "deleted or replaced" in str(errors[0]), errors
    assert not path.exists()
    # And once a new store exists at the path, they still fail: it is another store
    new = App(f"sqlite:///{path}")
    new.job(lambda ctx: None, name="noop").enqueue(key="new")
    with pytest.raises(StoreError, match="the path names another file now"):
        job.enqueue(key="lost")
    with pytest.raises(StoreError, match="deleted or replaced"):
        old.store.worker_beat("w", "h", 1, ["default"])
    assert [j.key for j in new.store.job_list(JobFilter())] == ["new"]
    new.close()
    old.close()


def _catch(errors: list[BaseException], fn: Callable[..., object], *args: object) -> None:
    try:
        fn(*args)
    except BaseException as exc:
        errors.append(exc)


def test_store_file_deleted_under_a_running_worker_is_a_repeated_fault_never_success(
        sqlite_url: str, make_world: Callable[[str], World]) -> None:
    world = make_world(sqlite_url)
    db = Path(sqlite_url.removeprefix("sqlite:///"))
    # Given a worker draining jobs
    worker = enqueue_and_start(world)
    # When the store's files are deleted under it, and a new store is made at the same path
    world.app.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    fresh = build_app(sqlite_url, world.procs.folder)
    fresh.jobs["effect"].enqueue(key="after")
    # Then the worker reports, again and again, that the file was deleted or replaced, and stays up
    wait_until(lambda: worker.stderr().count("was deleted or replaced") >= 3, 15, "the worker to report it 3 times")
    assert worker.alive()
    log = worker.stderr()
    fault_at = log.index("firesafe.worker: store fault")  # the worker loop's, which records the outcomes
    line = log[fault_at:].splitlines()[0]
    assert str(db) in line and "restart the worker" in line and "retrying in" in line
    # And nothing looks like success after it: no attempt recorded, no "resuming", no job from the new store
    assert "outcome=succeeded" not in log[fault_at:]
    assert "store is reachable again" not in log[fault_at:]
    assert fresh.get("after").state == "queued"
    # A worker started now works on the new store
    worker.kill()
    world.procs.worker("worker2")
    wait_until(lambda: fresh.get("after").state == "succeeded", 15, "a new worker to run the new store's job")
    fresh.close()
    print(f"\n[deleted under a worker] worker logged: {line.removeprefix('firesafe.worker: ')}")
