"""Drill: the store fails under running workers, then comes back. The workers report the fault clearly,
stay up, back off, and finish everything afterwards.

- SQLite: the store's files are made read-only (``chattr +i`` on ext4, which refuses writes through
  descriptors already open, as a filesystem remounted read-only does; permission bits would not stop
  a running worker, nor root), then restored; and a store on a small tmpfs has its disk filled, then
  freed (tmpfs does not enforce ``+i`` on open files, hence two stores).
- PostgreSQL: the server goes away for this test's workers alone: every backend of the test's own role
  is terminated and the role may not log in for a few seconds (what a restart looks like from the
  workers' side, without touching anyone else's connections). The real server restart is in
  test_zz_postgres_restart.py, which runs last.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import PG_URL, drop_schema, need_postgres
from tests.disk_faults import chattr, fill, small_tmpfs
from tests.drills.conftest import Drill, Proc, wait_until

JOBS = [f"io:{i}" for i in range(200)]
#: Seconds each job works: the faults strike while jobs are still in flight and waiting.
WORK = 0.1
WORKER = ("--concurrency", "2", "--max-lost", "10", "--poll", "0.05")


def start(drill: Drill) -> list[Proc]:
    drill.app.jobs["pay"].enqueue_many([{"key": k, "args": [i, WORK]} for i, k in enumerate(JOBS)])
    workers = [drill.worker(f"w{i}", *WORKER) for i in range(2)]
    wait_until(lambda: drill.count(state="succeeded") >= 15, 60, "the first jobs to finish")
    return workers


def faults(p: Proc) -> list[str]:
    return [line for line in p.stderr().splitlines() if "store fault" in line]


def weather(drill: Drill, workers: list[Proc], name: str, strike: Callable[[], None], heal: Callable[[], None],
            words: tuple[str, ...]) -> str:
    """Strike, check that every worker reports it clearly and backs off while it lasts, then heal."""
    seen = [len(faults(w)) for w in workers]
    try:
        strike()
        for w, n in zip(workers, seen, strict=True):
            wait_until(lambda w=w, n=n: len(faults(w)) >= n + 2, 30, f"{w.name} to report the {name} and retry")
        assert all(w.alive() for w in workers)
    finally:
        heal()
    line = faults(workers[0])[seen[0]]
    assert any(word in line for word in words), line
    assert "retrying in" in line
    return line.split("store fault", 1)[1]


def finish(drill: Drill, workers: list[Proc], name: str, lines: list[str]) -> None:
    wait_until(lambda: drill.finished() == len(JOBS), 90, "every job to finish after the faults")
    drill.stop(workers)
    for w in workers:
        log = w.stderr()
        assert "Traceback" not in log
        assert "store is reachable again; resuming" in log
    report = drill.verify(JOBS, allow_dead=False)
    print(f"\n{report.line(name)}\n" + "\n".join(f"  logged: store fault{line}" for line in lines))


# -- SQLite: read-only, then a full disk ------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk") as disk:
        yield disk


@pytest.fixture
def immutable_dir(tmp_path: Path) -> Path:
    """A folder on a filesystem that enforces ``chattr +i`` on files already open (ext4, xfs)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    probe = folder / "probe"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # opened before the flag, as the store's files
    try:
        try:
            done = chattr("+i", probe)
        except FileNotFoundError:
            pytest.skip("no chattr here: cannot make the store file refuse writes")
        try:
            os.write(fd, b"y")
            enforced = False
        except OSError:
            enforced = True
    finally:
        os.close(fd)
    chattr("-i", probe)
    if done.returncode != 0 or not enforced:
        pytest.skip(f"this filesystem does not refuse writes to open immutable files ({done.stderr.strip()})")
    return folder


def sqlite_outage(make_drill: Callable[..., Drill], folder: Path, disk: Path) -> None:
    # Read-only: the store's files refuse writes, then accept them again
    drill = make_drill(f"sqlite:///{folder}/firesafe.db")
    files = [folder / "firesafe.db", folder / "firesafe.db-wal"]
    workers = start(drill)
    lines = [weather(drill, workers, "read-only store", lambda: _ok(chattr("+i", *files)),
                     lambda: _ok(chattr("-i", *files)), ("read-only",))]
    finish(drill, workers, "sqlite read-only", lines)

    # A full disk: the store's disk fills up, then has room again
    drill = make_drill(f"sqlite:///{disk}/firesafe.db")
    workers = start(drill)
    filler: list[Path] = []
    lines = [weather(drill, workers, "full disk", lambda: filler.append(fill(disk)),
                     lambda: [f.unlink() for f in filler], ("is full",))]
    try:
        finish(drill, workers, "sqlite disk full", lines)
    finally:
        drill.stop_all()  # before the disk is unmounted


def _ok(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr


# -- PostgreSQL: the server goes away for this test's role -------------------------------------------
def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(PG_URL, autocommit=True, application_name="firesafe-drill-admin")


@pytest.fixture
def pg_role() -> Iterator[tuple[str, str]]:
    """A login role of the test's own, and a store URL that connects as it: (role, url)."""
    need_postgres()
    tag = uuid.uuid4().hex[:10]
    role, schema = f"fs_drill_{tag}", f"fs_drill_{tag}"
    with admin() as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT CREATE ON DATABASE "{conn.info.dbname}" TO "{role}"')
    host = PG_URL.split("@", 1)[1].split("?", 1)[0]
    try:
        yield role, f"postgresql://{role}@{host}?schema={schema}&application_name={role}"
    finally:
        drop_schema(schema)
        with admin() as conn:
            conn.execute(f'ALTER ROLE "{role}" LOGIN')
            conn.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")
            conn.execute(f'REVOKE CREATE ON DATABASE "{conn.info.dbname}" FROM "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def postgres_outage(make_drill: Callable[..., Drill], role: str, url: str) -> None:
    drill = make_drill(url)
    workers = start(drill)

    def down() -> None:
        with admin() as conn:
            conn.execute(f'ALTER ROLE "{role}" NOLOGIN')
            n = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = %s",
                             (role,)).fetchone()
        assert n is not None and n[0] >= 2  # at least one connection of each worker went down
        drill.app.close()  # the test's own pool too: it reconnects after the outage

    def up() -> None:
        with admin() as conn:
            conn.execute(f'ALTER ROLE "{role}" LOGIN')

    started = time.monotonic()
    line = weather(drill, workers, "outage", down, up, ("unreachable", "failed", "refused", "not permitted"))
    print(f"\n[postgres outage] lasted {time.monotonic() - started:.1f}s")
    finish(drill, workers, "postgres outage", [line])


def test_store_outage_is_reported_survived_and_everything_finishes(
        store_url: str, make_drill: Callable[..., Drill], request: pytest.FixtureRequest) -> None:
    if store_url.startswith("sqlite"):
        sqlite_outage(make_drill, request.getfixturevalue("immutable_dir"), request.getfixturevalue("small_disk"))
    else:
        role, url = request.getfixturevalue("pg_role")
        postgres_outage(make_drill, role, url)
