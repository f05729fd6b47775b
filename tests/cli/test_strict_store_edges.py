"""Strict store edges: a store that a newer firesafe migrated is refused by every way in (migrate,
workers, enqueues, the dashboard) and left as it was; ``migrate`` does not add firesafe's tables to a
SQLite file holding another application's unless told to.

A newer schema is made by hand, as a newer firesafe would leave it: a row for version 99 in
``firesafe_migrations``. "Left as it was" compares every row of every table of the store before and
after, read without firesafe. On PostgreSQL the URL carries a password, which no message may show.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import click
import httpx
import pytest
from click.testing import CliRunner

from firesafe import App
from firesafe.cli.main import cli
from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer
from firesafe.errors import OtherTables, SchemaTooNew
from firesafe.store.queries import latest_version
from firesafe.stores import open_store
from tests.cli.conftest import AppModule, run_cli, write_app
from tests.conftest import PG_URL

PASSWORD = "hunter2-not-for-print"
NEWER = 99


def refusal(version: int = NEWER) -> str:
    """The message's words after the store's name (the name is the URL, password hidden)."""
    return (f"has schema version {version}, newer than this firesafe supports ({latest_version('sqlite')}): "
            "upgrade firesafe, or use the version that migrated it")


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def with_password(url: str) -> str:
    """A PostgreSQL URL with a password in it (the test server trusts local connections, so it is
    ignored there; it is here to prove that no message prints it)."""
    if not url.startswith("postgres"):
        return url
    parts = urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user.split(':')[0]}:{PASSWORD}@{host}"))


def _sqlite_path(url: str) -> str:
    return url[len("sqlite:///"):]


def _pg_schema(url: str) -> str:
    return parse_qs(urlsplit(url).query)["schema"][0]


def snapshot(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the store, read without firesafe."""
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(_sqlite_path(url))) as conn:
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            return {n: conn.execute(f'SELECT * FROM "{n}" ORDER BY 1').fetchall() for n in names}
    import psycopg

    schema = _pg_schema(url)
    with psycopg.connect(PG_URL) as conn:
        names = [r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                                            "ORDER BY table_name", (schema,))]
        return {n: conn.execute(f'SELECT * FROM "{schema}"."{n}" ORDER BY 1').fetchall() for n in names}


def set_schema_version(url: str, version: int) -> None:
    """What a newer firesafe's migrate leaves: one more row in firesafe_migrations."""
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(_sqlite_path(url))) as conn, conn:
            conn.execute("INSERT INTO firesafe_migrations (version, applied_at) VALUES (?, 0)", (version,))
        return
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{_pg_schema(url)}".firesafe_migrations (version, applied_at) VALUES (%s, 0)',
                     (version,))


@dataclass
class Newer:
    """A store with one queued job, then migrated to schema 99 by 'a newer firesafe'."""

    url: str
    appmod: AppModule
    before: dict[str, list[tuple[Any, ...]]]

    def assert_untouched(self, *outputs: str) -> None:
        assert snapshot(self.url) == self.before
        assert self.appmod.effects() == []
        for text in outputs:
            assert PASSWORD not in text and "Traceback" not in text


@pytest.fixture
def newer(store_url: str, tmp_path: Path) -> Iterator[Newer]:
    url = with_password(store_url)
    appmod = write_app(tmp_path, url)
    module = appmod.load()
    module.add.enqueue(1, 2, key="add:queued")
    module.app.close()
    set_schema_version(url, NEWER)
    yield Newer(url, appmod, snapshot(url))


def one_error_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the store at "), text
    assert lines[0].endswith(refusal()), text
    return lines[0]


# -- a newer schema ------------------------------------------------------------------------------
def test_migrate_refuses_a_newer_schema(newer: Newer) -> None:
    for args in (["migrate", "--store", newer.url], ["migrate", "--store", newer.url, "--json"]):
        result = run(*args)
        assert result.exit_code == 1, result.output
        one_error_line(result.output)
        newer.assert_untouched(result.output)
    proc = run_cli(["migrate", "--store", newer.url], newer.appmod.dir)  # the real command, as users run it
    assert proc.returncode == 1 and proc.stdout == ""
    one_error_line(proc.stderr)
    newer.assert_untouched(proc.stderr)


def test_store_migrate_refuses_a_newer_schema(newer: Newer) -> None:
    store = open_store(newer.url)
    try:
        with pytest.raises(SchemaTooNew, match=re.escape(refusal())) as caught:
            store.migrate()
    finally:
        store.close()
    assert caught.value.version == NEWER and PASSWORD not in str(caught.value)
    newer.assert_untouched()


def test_the_commands_that_read_the_store_refuse_it(newer: Newer) -> None:
    for args in (["jobs"], ["stats"], ["show", "add:queued"], ["dlq", "ls"]):
        result = run(*args, "--store", newer.url)
        assert result.exit_code == 1, (args, result.output)
        one_error_line(result.output)
    newer.assert_untouched()


def test_a_worker_process_refuses_it_and_runs_nothing(newer: Newer) -> None:
    for processes in ("1", "2"):  # 2: the supervisor refuses before it starts any child
        proc = run_cli(["worker", newer.appmod.target, "--burst", "--processes", processes], newer.appmod.dir)
        assert proc.returncode == 1, proc.stderr
        one_error_line(proc.stderr)
        newer.assert_untouched(proc.stderr)


@pytest.mark.parametrize("how", ["url", "url, auto_migrate=False", "a Store"])
def test_the_worker_class_and_enqueues_from_python_refuse_it(newer: Newer, how: str) -> None:
    app = App(open_store(newer.url)) if how == "a Store" else App(newer.url, auto_migrate=how == "url")

    @app.job()
    def add(ctx: Any, a: int, b: int) -> int:
        return a + b

    try:
        with pytest.raises(SchemaTooNew, match=re.escape(refusal())):
            add.enqueue(3, 4, key="add:new")
        with pytest.raises(SchemaTooNew, match=re.escape(refusal())):
            add.enqueue_many([{"args": [5, 6], "key": "add:many"}])
        with pytest.raises(SchemaTooNew, match=re.escape(refusal())):
            app.enqueue("add", 7, 8)
        with pytest.raises(SchemaTooNew, match=re.escape(refusal())):
            app.worker(burst=True)
        with pytest.raises(SchemaTooNew, match=re.escape(refusal())):
            app.work(burst=True)
    finally:
        app.close()
    newer.assert_untouched()


def test_the_enqueue_command_refuses_it(newer: Newer) -> None:
    proc = run_cli(["enqueue", newer.appmod.target, "add", "--args", "[1, 2]", "--key", "add:cli"], newer.appmod.dir)
    assert proc.returncode == 1 and proc.stdout == ""
    one_error_line(proc.stderr)
    newer.assert_untouched(proc.stderr)


def test_the_dashboard_refuses_to_start_on_it(newer: Newer) -> None:
    proc = run_cli(["dashboard", newer.appmod.target, "--port", "0"], newer.appmod.dir)
    assert proc.returncode == 1
    one_error_line(proc.stderr)
    assert "Uvicorn running" not in proc.stdout + proc.stderr
    newer.assert_untouched(proc.stderr)


def test_an_embedded_dashboard_answers_every_request_with_the_refusal(newer: Newer) -> None:
    app = App(newer.url)
    try:
        with BackgroundServer(create_app(app)) as server, httpx.Client(base_url=server.url, timeout=10) as http:
            for path in ("/", "/jobs", "/dead", "/job?key=add:queued", "/schedules", "/alerts"):
                r = http.get(path)
                assert r.status_code == 503 and refusal() in r.text, (path, r.status_code)
                newer.assert_untouched(r.text)
            health = http.get("/healthz")
            assert health.status_code == 503 and refusal() in health.json()["error"]
            metrics = http.get("/metrics")
            assert metrics.status_code == 200 and "firesafe_store_up 0.0" in metrics.text
    finally:
        app.close()
    newer.assert_untouched()


def test_healthz_says_when_a_newer_firesafe_migrated_the_store_under_a_running_dashboard(
        store_url: str) -> None:
    app = App(with_password(store_url))
    try:
        with BackgroundServer(create_app(app)) as server, httpx.Client(base_url=server.url, timeout=10) as http:
            assert http.get("/healthz").json()["status"] == "ok"  # the store opened and checked
            set_schema_version(app.store_url, NEWER)
            r = http.get("/healthz")
            assert r.status_code == 503 and refusal() in r.json()["error"] and PASSWORD not in r.text
    finally:
        app.close()


# -- another application's SQLite file ------------------------------------------------------------
def shop(tmp_path: Path) -> tuple[Path, str]:
    """Another application's SQLite file: its own tables and rows."""
    path = tmp_path / "shop.db"
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, total INTEGER NOT NULL)")
        conn.execute("CREATE VIEW big_orders AS SELECT * FROM orders WHERE total > 100")
        conn.execute("INSERT INTO orders (total) VALUES (250)")
    return path, f"sqlite:///{path}"


def names(path: Path) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master ORDER BY name")]


def test_migrate_refuses_another_applications_file_unless_told(tmp_path: Path) -> None:
    path, url = shop(tmp_path)
    before = names(path)
    refused = run("migrate", "--store", url)
    assert refused.exit_code == 1
    assert refused.output.strip() == (
        f"error: {path} holds tables that are not firesafe's (big_orders, orders); firesafe adds its tables to "
        "another application's file only when told to: give firesafe a file of its own, or run "
        "`firesafe migrate --allow-other-tables` once to share this one")
    assert names(path) == before  # not even firesafe_migrations

    shared = run("migrate", "--store", url, "--allow-other-tables")
    assert shared.exit_code == 0 and "applied migration(s) 1, " in shared.output, shared.output
    assert "firesafe_jobs" in names(path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT id, total FROM orders").fetchall() == [(1, 250)]
    again = run("migrate", "--store", url)  # a firesafe store now: no flag needed
    assert again.exit_code == 0 and "already up to date" in again.output


def test_an_app_does_not_migrate_another_applications_file_by_itself(tmp_path: Path) -> None:
    path, url = shop(tmp_path)
    before = names(path)
    app = App(url)

    @app.job()
    def add(ctx: Any, a: int, b: int) -> int:
        return a + b

    try:
        with pytest.raises(OtherTables, match=r"holds tables that are not firesafe's \(big_orders, orders\)"):
            add.enqueue(1, 2)
        with pytest.raises(OtherTables):
            app.worker(burst=True)
    finally:
        app.close()
    assert names(path) == before
    open_store(url).migrate(allow_other_tables=True)  # what the flag does, from Python
    assert "firesafe_jobs" in names(path)


def test_an_empty_file_and_a_firesafe_store_need_no_flag(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    assert run("migrate", "--store", f"sqlite:///{empty}").exit_code == 0
    assert run("migrate", "--store", f"sqlite:///{empty}").exit_code == 0


def test_the_flag_is_explained_in_help() -> None:
    result = run("migrate", "--help")
    assert result.exit_code == 0
    assert "--allow-other-tables" in result.output and "another" in result.output
