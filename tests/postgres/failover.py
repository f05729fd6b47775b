"""A private primary and its streaming standby (synchronous replication), made for one test, and
what a failover does to them: the primary killed, the standby promoted.

Both clusters live in a temporary folder, listen on 127.0.0.1 only (free ports) and on a unix socket
in that folder, and never touch the shared server's configuration. The primary waits for the standby
(``synchronous_commit = on``, ``synchronous_standby_names`` naming it), so a commit that returned is on
both. Durability to disk is relaxed (``fsync = off``): the tests kill processes, never the machine,
and the operating system keeps what a killed process wrote. As root, the clusters run as the
``postgres`` user (PostgreSQL refuses root). Every process is stopped by its pid at teardown. Missing
PostgreSQL binaries skip these tests, or fail them when ``FIRESAFE_REQUIRE_POSTGRES=1``.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from tests.conftest import need_postgres

STANDBY_NAME = "firesafe_standby"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bindir() -> str | None:
    """The folder of initdb, pg_ctl and pg_basebackup: ``FIRESAFE_TEST_PG_BIN``, else the newest
    of Debian's /usr/lib/postgresql/*/bin."""
    given = os.environ.get("FIRESAFE_TEST_PG_BIN")
    found = [given] if given else sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                                         key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0)
    for folder in reversed(found):
        if all(os.access(os.path.join(folder, tool), os.X_OK) for tool in ("initdb", "pg_ctl", "pg_basebackup")):
            return folder
    return None


def _user() -> str | None:
    """The user the clusters run as when this process is root (PostgreSQL refuses root); else None."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.fail("running as root, and there is no `postgres` user to run the test clusters as", pytrace=False)
    return "postgres"


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (a postmaster's backends, walsender, ...)."""
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            text = Path(stat).read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(stat.split("/")[2]))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped by its parent) is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class Node:
    """One cluster: its data folder and port, and its postmaster's pid while it runs."""

    name: str
    data: Path
    port: int
    pid: int | None = None
    children: list[int] = field(default_factory=list)

    def connect(self, **kwargs: object) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                               autocommit=True, connect_timeout=3, **kwargs)  # type: ignore[arg-type]

    def scalar(self, query: str) -> object:
        with self.connect() as conn:
            row = conn.execute(query).fetchone()  # type: ignore[arg-type]
        return None if row is None else row[0]


@dataclass
class Pair:
    """A primary and its synchronous standby, and the moves of a failover."""

    folder: Path
    bindir: str
    user: str | None
    primary: Node
    standby: Node
    log: Path

    def url(self, query: str = "") -> str:
        """The store URL naming both servers, the primary first, and only ever a read-write one."""
        sep = "&" if query else ""
        return (f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}/postgres"
                f"?target_session_attrs=read-write{sep}{query}")

    def run(self, *command: str, timeout: float = 60) -> str:
        """Run a PostgreSQL tool (as the clusters' user); its output, or the test fails with it."""
        argv = [os.path.join(self.bindir, command[0]), *command[1:]]
        if self.user is not None:
            argv = ["runuser", "-u", self.user, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              cwd=self.folder)
        if done.returncode != 0:
            pytest.fail(f"{' '.join(command[:2])} failed ({done.returncode}): {done.stdout[-1500:]}"
                        f"{done.stderr[-1500:]}\n{self._logs()}", pytrace=False)
        return done.stdout

    def start(self, node: Node) -> None:
        self.run("pg_ctl", "start", "-w", "-t", "30", "-D", str(node.data), "-l", str(self.log))
        node.pid = int((node.data / "postmaster.pid").read_text().split()[0])

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster, as a crashed machine would stop it: no shutdown, no
        goodbye to its clients or its standby. Its backends notice and exit on their own."""
        node = self.primary
        assert node.pid is not None
        node.children = _children(node.pid)
        os.kill(node.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in [node.pid, *node.children]) and time.monotonic() < deadline:
            time.sleep(0.02)

    def promote(self) -> float:
        """Promote the standby and wait until it takes writes; the seconds that took."""
        started = time.monotonic()
        self.run("pg_ctl", "promote", "-w", "-t", "30", "-D", str(self.standby.data))
        while self.standby.scalar("SELECT pg_is_in_recovery()"):
            time.sleep(0.02)
        return time.monotonic() - started

    def stop(self) -> None:
        """Every process of both clusters, by pid: the postmasters (immediate shutdown) and, after a
        kill, the primary's backends if any outlived it."""
        for node in (self.standby, self.primary):
            pids = [p for p in [node.pid, *node.children] if p is not None]
            if node.pid is not None and _alive(node.pid):
                pids += _children(node.pid)
                os.kill(node.pid, signal.SIGQUIT)  # PostgreSQL's immediate shutdown
                deadline = time.monotonic() + 10
                while _alive(node.pid) and time.monotonic() < deadline:
                    time.sleep(0.02)
            for pid in pids:
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)

    def _logs(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


def _config(node: Node, folder: Path, extra: str = "") -> None:
    with open(node.data / "postgresql.conf", "a") as conf:
        conf.write(f"""
# firesafe's failover test ({node.name})
listen_addresses = '127.0.0.1'
port = {node.port}
unix_socket_directories = '{folder}'
max_connections = 100
shared_buffers = 32MB
fsync = off
full_page_writes = off
synchronous_commit = on
wal_level = replica
max_wal_senders = 4
wal_sender_timeout = 5s
wal_receiver_status_interval = 1s
wal_retrieve_retry_interval = 200ms
{extra}""")


def make_pair() -> Pair:
    """initdb a primary, clone it with pg_basebackup into a standby, start both, and turn on
    synchronous replication once the standby streams."""
    need_postgres()
    bindir = _bindir()
    if bindir is None:
        why = "PostgreSQL's server binaries (initdb, pg_ctl, pg_basebackup) were not found under /usr/lib/postgresql"
        if os.environ.get("FIRESAFE_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required here: {why}", pytrace=False)
        pytest.skip(why)
    user = _user()
    folder = Path(tempfile.mkdtemp(prefix="firesafe-failover-"))
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    os.chmod(folder, 0o755)
    primary = Node("primary", folder / "primary", _free_port())
    standby = Node("standby", folder / "standby", _free_port())
    pair = Pair(folder, bindir, user, primary, standby, folder / "postgres.log")
    try:
        pair.run("initdb", "-D", str(primary.data), "-U", "postgres", "-A", "trust", "--no-sync",
                 "-E", "UTF8", "--locale=C")
        _config(primary, folder)
        with open(primary.data / "pg_hba.conf", "a") as hba:
            hba.write("host replication postgres 127.0.0.1/32 trust\n")
        pair.start(primary)
        pair.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                 "-D", str(standby.data), "-R", "-X", "stream", "-c", "fast", "--no-sync")
        # The standby's own settings last (they win): its port, its name as the primary sees it, and
        # no synchronous standby of its own once promoted (nothing would ever acknowledge its commits).
        _config(standby, folder, f"cluster_name = '{STANDBY_NAME}'\nsynchronous_standby_names = ''\n")
        pair.start(standby)
        with primary.connect() as conn:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 30
        while primary.scalar(f"SELECT sync_state FROM pg_stat_replication "
                             f"WHERE application_name = '{STANDBY_NAME}' AND state = 'streaming'") != "sync":
            if time.monotonic() > deadline:
                pytest.fail(f"the standby did not become synchronous:\n{pair._logs()}", pytrace=False)
            time.sleep(0.05)
    except BaseException:
        pair.stop()
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return pair


@contextmanager
def running_pair() -> Iterator[Pair]:
    """A fresh primary and synchronous standby, stopped and removed afterwards."""
    p = make_pair()
    try:
        yield p
    finally:
        p.stop()
        shutil.rmtree(p.folder, ignore_errors=True)


def feed(url: str, prefix: str, acked: str, stop: str, pause: float, give_up: float) -> int:
    """Enqueue ``effect`` jobs under keys ``<prefix>0, <prefix>1, ...`` until the file ``stop`` exists,
    as a careful client would through a failover: an enqueue that raised :class:`StoreError` is tried
    again under the same key (which makes the retry safe: a first try that did commit returns the
    stored job). Each key whose enqueue returned is appended to ``acked`` as ``KEY TIME``; each
    error to stderr as one ``retrying KEY: ...`` line. Gives up (exit 1) if one key fails for
    ``give_up`` seconds."""
    from firesafe.errors import StoreError
    from tests.postgres.procs import build_app

    app = build_app(url)
    effect = app.jobs["effect"]
    n = 0
    with open(acked, "a") as out:
        while not os.path.exists(stop):
            key, first = f"{prefix}{n}", time.monotonic()
            while True:
                try:
                    effect.enqueue(n, key=key)
                    break
                except StoreError as exc:
                    print(f"retrying {key}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                    if time.monotonic() - first > give_up:
                        return 1
                    time.sleep(0.05)
            out.write(f"{key} {time.time():.6f}\n")
            out.flush()
            n += 1
            time.sleep(pause)
    app.close()
    return 0


if __name__ == "__main__":
    # python -m tests.postgres.failover feed URL PREFIX ACKED STOP [PAUSE] [GIVE_UP]
    _, command, *rest = sys.argv
    assert command == "feed", sys.argv
    sys.exit(feed(rest[0], rest[1], rest[2], rest[3], float(rest[4]) if len(rest) > 4 else 0.002,
                  float(rest[5]) if len(rest) > 5 else 60.0))
