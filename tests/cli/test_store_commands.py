"""Commands that need only the store: migrate, show, jobs, stats, cancel; and how they fail."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from firesafe import App, Backoff, __version__
from firesafe.cli._common import latest_version
from firesafe.cli.main import cli

SECRET = "sk-live-4242"


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def reviewed(store_url: str) -> Iterator[App]:
    """A store with a dead job (two failed attempts, a secret argument), a done one and a waiting one."""
    app = App(store_url)

    @app.job(max_attempts=2, backoff=Backoff(base=0.0, cap=0.0, jitter="none"), queue="payments")
    def charge(ctx, order_id: str, api_key: str) -> dict:
        if order_id.startswith("bad"):
            raise RuntimeError(f"card declined api_key={api_key}")
        return {"order": order_id, "token": "t-123"}

    @app.job(queue="mail")
    def notify(ctx, to: str) -> None:
        return None

    charge.enqueue("bad-1", api_key=SECRET, key="charge:bad-1")
    charge.enqueue("ok-1", SECRET, key="charge:ok-1")
    app.work(["payments"], burst=True, wait_scheduled=True)
    notify.enqueue("ann@example.com", key="notify:ann", delay=3600)
    yield app
    app.close()


CORE = ["worker", "enqueue", "migrate", "show", "jobs", "stats", "cancel"]


def core_commands() -> list[list[str]]:
    """The commands of the core issue (other parts register and test their own)."""
    dlq = cli.commands["dlq"]
    assert isinstance(dlq, click.Group)
    return [*([name] for name in CORE), ["dlq"], *(["dlq", name] for name in dlq.commands)]


@pytest.mark.parametrize("command", core_commands(), ids=" ".join)
def test_every_command_explains_itself_with_an_example(command: list[str]) -> None:
    result = run(*command, "--help")
    assert result.exit_code == 0
    assert "Example" in result.output and "firesafe " in result.output


def test_version() -> None:
    result = run("--version")
    assert result.exit_code == 0 and result.output.strip() == f"firesafe {__version__}"


def test_migrate_creates_the_store_then_has_nothing_to_do(sqlite_url: str) -> None:
    latest = latest_version("sqlite")
    first = run("migrate", "--store", sqlite_url)
    assert first.exit_code == 0 and "applied migration(s) 1, " in first.output + ", "
    assert f"schema version {latest}" in first.output
    again = run("migrate", "--store", sqlite_url, "--json")
    assert again.exit_code == 0
    assert json.loads(again.stdout) == {"store": sqlite_url, "applied": [], "previous_version": latest,
                                        "version": latest}


@pytest.mark.postgres
def test_migrate_on_postgresql_names_the_schema_even_when_the_url_leaves_it_out() -> None:
    import uuid

    import psycopg

    from tests.conftest import PG_URL, need_postgres

    need_postgres()
    db = f"fs_test_{uuid.uuid4().hex[:12]}"  # a database of its own: the default schema is shared otherwise
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    try:
        url = PG_URL.rsplit("/", 1)[0] + f"/{db}"
        first = run("migrate", "--store", url)
        assert first.exit_code == 0, first.output
        assert first.output.startswith(f"{url} (schema firesafe): applied migration(s) 1, ")
        again = run("migrate", "--store", url, "--json")
        assert json.loads(again.stdout)["schema"] == "firesafe"
        named = run("migrate", "--store", f"{url}?schema=jobs")
        assert named.output.startswith(f"{url}?schema=jobs: applied migration(s) 1, ")  # named once, in the URL
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def test_migrate_takes_the_store_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIRESAFE_STORE", f"sqlite:///{tmp_path}/env.db")
    assert run("migrate").exit_code == 0
    assert (tmp_path / "env.db").exists()


def test_reading_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    result = run("jobs", "--store", f"sqlite:///{tmp_path}/nope.db")
    assert result.exit_code == 1
    assert f"no store at {tmp_path}/nope.db: the file does not exist" in result.output
    assert "firesafe migrate" in result.output
    assert not (tmp_path / "nope.db").exists()


def test_a_sqlite_file_without_firesafe_tables_says_run_migrate(tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "empty.db").execute("CREATE TABLE other (x)").connection.close()
    result = run("stats", "--store", f"sqlite:///{tmp_path}/empty.db")
    assert result.exit_code == 1
    assert result.output.strip() == f"error: no firesafe store at sqlite:///{tmp_path}/empty.db (run firesafe migrate)"


def test_an_outdated_schema_says_run_migrate(sqlite_url: str, tmp_path: Path) -> None:
    assert run("migrate", "--store", sqlite_url).exit_code == 0
    with sqlite3.connect(tmp_path / "firesafe.db") as conn:
        conn.execute("DELETE FROM firesafe_migrations WHERE version = (SELECT max(version) FROM firesafe_migrations)")
    result = run("jobs", "--store", sqlite_url)
    assert result.exit_code == 1 and "(run firesafe migrate)" in result.output


def test_a_corrupt_database_file_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "bad.db").write_bytes(b"this is not a database, just some bytes " * 100)
    for command in (["jobs"], ["show", "k"], ["dlq", "ls"], ["migrate"]):
        result = run(*command, "--store", f"sqlite:///{tmp_path}/bad.db")
        assert result.exit_code == 1, command
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "corrupt" in lines[0], result.output


def test_an_unknown_store_url_is_a_one_line_error() -> None:
    result = run("jobs", "--store", "redis://127.0.0.1:6379/0")
    assert result.exit_code == 1
    assert result.output.startswith("error: unknown store URL") and len(result.output.strip().splitlines()) == 1


def test_an_unknown_key_is_a_one_line_error(reviewed: App) -> None:
    result = run("show", "nope", "--store", reviewed.store_url)
    assert result.exit_code == 1 and result.output.strip() == "error: no job with key 'nope'"
    result = run("cancel", "", "--store", reviewed.store_url)
    assert result.exit_code == 1 and "must not be empty" in result.output


def test_show_renders_the_timeline_with_secrets_masked(reviewed: App) -> None:
    result = run("show", "charge:bad-1", "--store", reviewed.store_url)
    out = result.output
    assert result.exit_code == 0, out
    assert SECRET not in out and "********" in out
    assert "dead" in out and "exhausted" in out and "2/2" in out
    assert out.count("RuntimeError: card declined api_key=********") >= 3  # last error + both attempts
    assert "Traceback (most recent call last)" in out and "the same traceback as run #1" in out
    assert "failed" in out and "order_id" in out and "bad-1" in out


def test_show_json_is_the_masked_job_with_its_trace(reviewed: App) -> None:
    result = run("show", "charge:bad-1", "--json", "--store", reviewed.store_url)
    assert result.exit_code == 0 and SECRET not in result.output
    data = json.loads(result.stdout)
    assert data["key"] == "charge:bad-1" and data["state"] == "dead" and data["reason"] == "exhausted"
    assert data["arguments"] == {"order_id": "bad-1", "api_key": "********"}
    assert [a["outcome"] for a in data["trace"]] == ["failed", "failed"]
    assert all("RuntimeError" in a["traceback"] for a in data["trace"])
    done = json.loads(run("show", "charge:ok-1", "--json", "--store", reviewed.store_url).stdout)
    assert done["result"] == {"order": "ok-1", "token": "********"} and done["arguments"]["api_key"] == "********"


def test_show_bounds_long_tracebacks_unless_asked(sqlite_url: str) -> None:
    app = App(sqlite_url)

    @app.job(max_attempts=1)
    def deep(ctx, n: int) -> None:
        def down(i: int) -> None:
            if i == 0:
                raise ValueError("bottom")
            down(i - 1)

        down(n)

    deep.enqueue(20, key="deep")
    app.work(burst=True)
    short = run("show", "deep", "--store", sqlite_url).output
    full = run("show", "deep", "--traceback", "--store", sqlite_url).output
    assert "earlier line(s); --traceback shows them" in short and "ValueError: bottom" in short
    assert "earlier line(s)" not in full
    assert "in execute" in full and "in execute" not in short  # the first frame: only the full view has it
    app.close()


def test_jobs_lists_and_filters(reviewed: App) -> None:
    url = reviewed.store_url
    out = run("jobs", "--store", url).output
    assert "charge:bad-1" in out and "charge:ok-1" in out and "notify:ann" in out and "3 of 3 job(s)" in out
    assert SECRET not in out
    dead = json.loads(run("jobs", "--state", "dead", "--json", "--store", url).stdout)
    assert [j["key"] for j in dead] == ["charge:bad-1"]
    assert json.loads(run("jobs", "--job", "notify", "--json", "--store", url).stdout)[0]["state"] == "scheduled"
    assert len(json.loads(run("jobs", "--queue", "payments", "--limit", "1", "--json", "--store", url).stdout)) == 1
    everything = run("jobs", "--json", "--store", url).output
    assert SECRET not in everything and "********" in everything
    assert run("jobs", "--state", "lost", "--store", url).exit_code == 2


def test_stats_counts_by_queue_and_state(reviewed: App) -> None:
    data = json.loads(run("stats", "--json", "--store", reviewed.store_url).stdout)
    assert data["queues"]["payments"]["dead"] == 1 and data["queues"]["payments"]["succeeded"] == 1
    assert data["queues"]["mail"]["scheduled"] == 1 and data["total"] == 3 and data["totals"]["running"] == 0
    table = run("stats", "--store", reviewed.store_url).output
    assert "payments" in table and "mail" in table and "total" in table


def test_cancel_a_waiting_job_then_again(reviewed: App) -> None:
    url = reviewed.store_url
    result = run("cancel", "notify:ann", "--store", url)
    assert result.exit_code == 0 and result.output.strip() == "cancelled notify:ann"
    assert reviewed.get("notify:ann").state == "cancelled"
    again = run("cancel", "notify:ann", "--store", url)
    assert again.exit_code == 0 and "already finished (state cancelled)" in again.output
    dead = run("cancel", "charge:bad-1", "--store", url)
    assert "firesafe dlq discard" in dead.output and reviewed.get("charge:bad-1").state == "dead"


def test_user_text_is_printed_literally_not_as_markup(sqlite_url: str) -> None:
    app = App(sqlite_url)

    @app.job(max_attempts=1)
    def odd(ctx, note: str) -> None:
        raise RuntimeError("[red]not markup[/red] <script>")

    odd.enqueue("[bold]n[/bold]", key="[link=x]k[/link]")
    app.work(burst=True)
    app.close()
    for command in (["show", "[link=x]k[/link]"], ["jobs"], ["dlq", "ls"], ["dlq", "show", "[link=x]k[/link]"]):
        out = run(*command, "--store", sqlite_url).stdout
        assert "[link=x]k[/link]" in out and "[red]not markup[/red] <script>" in out, command
