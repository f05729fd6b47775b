"""A real PgBouncer in transaction mode in front of the test server, one per test session (per
pytest-xdist worker), and the ``pgb`` fixture: a test's own schema reached through it.

Its pool is small (``default_pool_size = 4``) and hands its server connections out in turn
(``server_round_robin``), so clients really do share them and one client's transactions run on
several: a statement prepared in one transaction is missing from the next one's server connection,
or already there for another client. It runs as the current
user (as ``postgres`` or ``nobody`` when that is root, which PgBouncer refuses to be), from a config
written in a temporary folder, and is stopped by its pid. Missing PgBouncer skips these tests, or
fails them when ``FIRESAFE_REQUIRE_POSTGRES=1`` (``make pgbouncer`` installs it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import psycopg
import pytest

from tests.conftest import PG_URL, drop_schema, need_postgres
from tests.postgres.conftest import Pg

PGBOUNCER = os.environ.get("FIRESAFE_TEST_PGBOUNCER", "/usr/sbin/pgbouncer")
POOL_SIZE = 4


@dataclass
class Bouncer:
    """A running PgBouncer: where it listens, and the base URL of the test database through it."""

    port: int
    pid: int
    log: Path

    def url(self, query: str) -> str:
        """The store URL of the test database through the pooler, with ``query`` (no leading '?')."""
        server = urlsplit(PG_URL)
        user = f"{server.username}@" if server.username else ""
        return f"postgresql://{user}127.0.0.1:{self.port}{server.path}?{query}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> str | None:
    """The user PgBouncer switches to (``-u``) when this process is root; None otherwise."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    return None


def _config(folder: Path, port: int) -> Path:
    server = urlsplit(PG_URL)
    user = server.username or "postgres"
    (folder / "userlist.txt").write_text(f'"{user}" ""\n')
    ini = folder / "pgbouncer.ini"
    ini.write_text(f"""[databases]
* = host={server.hostname or '127.0.0.1'} port={server.port or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / 'userlist.txt'}
pool_mode = transaction
max_client_conn = 500
default_pool_size = {POOL_SIZE}
reserve_pool_size = 0
server_round_robin = 1
server_reset_query =
ignore_startup_parameters = extra_float_digits
""")
    return ini


def _accepts(port: int) -> str | None:
    """None once a query runs through the pooler, else why not."""
    server = urlsplit(PG_URL)
    try:
        with psycopg.connect(host="127.0.0.1", port=port, dbname=server.path.lstrip("/") or "postgres",
                             user=server.username or "postgres", connect_timeout=2, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


@pytest.fixture(scope="session")
def bouncer() -> Iterator[Bouncer]:
    need_postgres()
    if not os.access(PGBOUNCER, os.X_OK):
        why = f"PgBouncer not found at {PGBOUNCER} (run `make pgbouncer`)"
        if os.environ.get("FIRESAFE_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PgBouncer is required here: {why}", pytrace=False)
        pytest.skip(why)
    folder = Path(tempfile.mkdtemp(prefix="firesafe-pgbouncer-"))
    user = _run_as()
    if user is not None:  # root: PgBouncer drops to this user, who must read the config
        os.chmod(folder, 0o755)
    port = _free_port()
    ini = _config(folder, port)
    log = folder / "pgbouncer.log"
    command = [PGBOUNCER, *(["-u", user] if user else []), str(ini)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while (why := _accepts(port)) is not None:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"PgBouncer did not start ({why}): {log.read_text(errors='replace')[-2000:]}",
                            pytrace=False)
            time.sleep(0.05)
        yield Bouncer(port, proc.pid, log)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)  # PgBouncer's "shut down now"
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def direct_param() -> str:
    """``direct=`` naming the test server itself, %-escaped."""
    return "direct=" + quote(PG_URL, safe="")


@pytest.fixture
def pgb(bouncer: Bouncer) -> Iterator[Pg]:
    """A test's own schema and application_name, its ``url`` through the pooler with ``direct=``."""
    tag = uuid.uuid4().hex[:12]
    schema, app_name = f"fs_test_{tag}", f"fs_test_{tag}"
    try:
        yield Pg(schema, app_name, bouncer.url(
            f"schema={schema}&application_name={app_name}&pooler=transaction&{direct_param()}"))
    finally:
        drop_schema(schema)
