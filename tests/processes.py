"""Support shared by the tests that run real subprocesses (tests/integration, tests/drills): waiting
for a condition, one started process, and pausing a process while it holds no store lock."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from firesafe import Job
from firesafe.store.base import JobFilter

ROOT = Path(__file__).resolve().parents[1]
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
    """One ``python -m <module> ...`` subprocess; its output goes to files the test reads."""

    def __init__(self, module: str, name: str, args: list[str], folder: Path, stdin: bool = False) -> None:
        self.name = name
        self.out_path = folder / f"{name}.out"
        self.err_path = folder / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, stdout=out, stderr=err,
                                          stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
        self.pid = self.popen.pid

    def send(self, line: str) -> None:
        """Write ``line`` to the process's stdin (started with ``stdin=True``)."""
        assert self.popen.stdin is not None
        self.popen.stdin.write(line.encode())
        self.popen.stdin.flush()

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

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


def logs(procs: Sequence[Proc], tail: int = 3000) -> str:
    """The end of each process's stderr, for a failing test's message."""
    return "\n".join(f"----- {p.name} (pid {p.pid}, rc {p.popen.poll()}) -----\n{p.stderr()[-tail:]}"
                     for p in procs)


def running_on(store: Any, pid: int) -> list[Job]:
    """Jobs running under a worker of process ``pid``."""
    return [j for j in store.job_list(JobFilter(state="running", limit=100_000))
            if j.worker and f":{pid}:" in j.worker]


def sqlite_unlocked(path: str | Path) -> bool:
    """Whether nobody holds the write lock of the SQLite file ``path``."""
    conn = sqlite3.connect(path, timeout=0.2, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def lock_free(store: Any, job_ids: Sequence[int]) -> bool:
    """Whether nobody holds the SQLite write lock (or, on PostgreSQL, the rows of ``job_ids``)."""
    if store.dialect == "sqlite":
        return sqlite_unlocked(store.path)
    import psycopg
    from psycopg import sql

    with psycopg.connect(store.conninfo) as conn:
        try:
            conn.execute(sql.SQL("SELECT 1 FROM {}.firesafe_jobs WHERE id = ANY(%s) FOR UPDATE NOWAIT")
                         .format(sql.Identifier(store.schema)), [list(job_ids)])
            return True
        except psycopg.errors.LockNotAvailable:
            return False


def pause(proc: Proc, free: Callable[[], bool], tries: int = 200) -> None:
    """SIGSTOP ``proc`` at a moment ``free()`` says it holds no store lock that matters.

    A process stopped inside a write transaction stalls every writer of a SQLite file (and the rows
    it locked on PostgreSQL) until it resumes: real, but not what a zombie test is about.
    """
    for _ in range(tries):
        proc.signal(signal.SIGSTOP)
        if free():
            return
        proc.signal(signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError(f"{proc.name} always held a store lock when paused")
