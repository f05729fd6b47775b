"""User mistakes on the command line: each is one clear line (exit 2 for usage, else 1), never a
traceback; and the small outputs (--json, durations, wording) that read the same across commands."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from firesafe import App
from firesafe.cli._common import human_duration
from firesafe.cli.main import cli
from firesafe.deadletters.audit import default_actor
from tests.cli.conftest import AppModule


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def one_line(result: click.testing.Result) -> None:
    assert "Traceback" not in result.output and "internal error" not in result.output


@pytest.fixture
def limited(sqlite_url: str) -> Iterator[str]:
    """A store with the limiter `stripe` recorded (as a worker records its app's limiters)."""
    app = App(sqlite_url)
    app.limiter("stripe", rate=100, burst=20)

    @app.job(limiter="stripe")
    def refund(ctx) -> None:
        pass

    app.worker()
    yield sqlite_url
    app.close()


@pytest.fixture
def dead(sqlite_url: str) -> Iterator[App]:
    app = App(sqlite_url)

    @app.job(max_attempts=1)
    def refund(ctx, order_id: str) -> None:
        raise RuntimeError("provider down")

    refund.enqueue("o-1", key="refund:o-1")
    refund.enqueue("o-2", key="refund:o-2", delay=3600)
    app.work(burst=True)
    yield app
    app.close()


# -- durations: capped at 1,000 years, and printed for people ----------------------------------
@pytest.mark.parametrize("args", [
    ("limiters", "pause", "stripe", "--for", "1e308"),
    ("dlq", "purge", "--older-than", "1e308", "--dry-run"),
    ("dlq", "ls", "--since", "1e308"),
    ("dlq", "ls", "--until", "1e308"),
])
def test_a_duration_over_1000_years_is_a_usage_error(limited: str, args: tuple[str, ...]) -> None:
    result = run(*args, "--store", limited)
    assert result.exit_code == 2, result.output
    assert "is too long: a duration is at most 1,000 years" in result.output
    one_line(result)


def test_a_pause_until_too_far_ahead_is_a_usage_error(limited: str) -> None:
    result = run("limiters", "pause", "stripe", "--until", "9999-12-31T23:59:59-05:00", "--store", limited)
    assert result.exit_code == 2 and "too far ahead" in result.output, result.output
    one_line(result)


def test_a_pause_says_how_long_it_lasts_in_days_hours_and_minutes(limited: str) -> None:
    until = datetime.now(UTC) + timedelta(days=30, hours=8, minutes=24, seconds=20)
    result = run("limiters", "pause", "stripe", "--until", until.isoformat(), "--store", limited)
    assert result.exit_code == 0, result.output
    assert "(30d 8h 24m from now)" in result.output


def test_a_shorter_pause_says_the_longer_one_stays(limited: str) -> None:
    first = run("limiters", "pause", "stripe", "--for", "2h", "--store", limited)
    assert first.exit_code == 0 and "already set" not in first.output
    shorter = run("limiters", "pause", "stripe", "--for", "10m", "--store", limited)
    assert shorter.exit_code == 0, shorter.output
    assert "(a longer pause was already set: it stays, a pause only grows)" in shorter.output
    assert "(1h 59m" in shorter.output or "(2h from now)" in shorter.output


def test_human_durations() -> None:
    assert [human_duration(s) for s in (2.5, 45, 90, 5400, 30 * 86400, 2622244.4)] == [
        "2.5s", "45s", "1m 30s", "1h 30m", "30d", "30d 8h 24m"]


@pytest.mark.parametrize("delay", ["-5", "99999999999999999999", "1e308"])
def test_a_bad_delay_is_a_usage_error(inprocess_app: AppModule, delay: str) -> None:
    result = run("enqueue", inprocess_app.target, "add", "--args", "[1, 2]", "--delay", delay)
    assert result.exit_code == 2 and "--delay" in result.output, result.output
    one_line(result)


# -- empty values ---------------------------------------------------------------------------------
def test_an_empty_store_is_an_error_not_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FIRESAFE_STORE", raising=False)
    for command in (("migrate",), ("jobs",), ("limiters",)):
        result = run(*command, "--store", "")
        assert result.exit_code == 2 and "--store is empty" in result.output, (command, result.output)
    assert not (tmp_path / "firesafe.db").exists()


def test_an_empty_queue_is_a_usage_error(inprocess_app: AppModule) -> None:
    result = run("enqueue", inprocess_app.target, "add", "--args", "[1, 2]", "--queue", "")
    assert result.exit_code == 2 and "--queue is empty" in result.output
    assert inprocess_app.load().app.jobs_list() == []


# -- wording ---------------------------------------------------------------------------------------
def test_json_arguments_of_the_wrong_kind_read_well(inprocess_app: AppModule) -> None:
    result = run("enqueue", inprocess_app.target, "add", "--args", '{"a": 1}')
    assert result.exit_code == 2 and "must be a JSON list, like '[\"o-1\", 100]', not an object" in result.output
    result = run("enqueue", inprocess_app.target, "add", "--kwargs", "[1]")
    assert result.exit_code == 2 and "must be a JSON object, like '{\"amount\": 100}', not a list" in result.output


def test_an_attribute_that_is_not_an_app_reads_well(inprocess_app: AppModule) -> None:
    (inprocess_app.dir / "int_app.py").write_text("app = 5\n")
    result = run("enqueue", "int_app:app", "add")
    assert result.exit_code == 1 and "int_app:app is an int, not a firesafe.App" in result.output


# -- usage errors ---------------------------------------------------------------------------------
def test_rerun_from_step_and_from_scratch_together_is_a_usage_error(dead: App) -> None:
    result = run("rerun", "refund:o-1", "--from-step", "two", "--from-scratch", "--store", dead.store_url)
    assert result.exit_code == 2, result.output
    assert "--from-step" in result.output and "--from-scratch" in result.output
    one_line(result)


def test_unknown_limiters_subcommand_is_no_such_command(limited: str) -> None:
    result = run("limiters", "bogus")
    assert result.exit_code == 2 and "No such command 'bogus'" in result.output, result.output
    listed = run("limiters", "--json", "--store", limited)  # options alone still mean `ls`
    assert listed.exit_code == 0 and json.loads(listed.output)[0]["name"] == "stripe"


# -- consume ---------------------------------------------------------------------------------------
def test_consume_from_something_that_is_not_an_amqp_url(inprocess_app: AppModule) -> None:
    result = run("consume", inprocess_app.target, "--from", "notaurl", "--queue", "q")
    assert result.exit_code == 2 and "'notaurl' is not an AMQP URL" in result.output, result.output
    assert "amqp://user:pass@host:port/vhost" in result.output
    one_line(result)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_consume_says_why_the_broker_cannot_be_reached(inprocess_app: AppModule) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{closed_port()}/"
    result = run("consume", inprocess_app.target, "--from", url, "--queue", "q", "--idle-exit", "1")
    assert result.exit_code == 1, result.output
    assert "Connection refused" in result.output and "guest:guest" not in result.output, result.output
    one_line(result)


# -- servers ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["dashboard", "serve"])
def test_a_port_in_use_is_a_one_line_error(inprocess_app: AppModule, command: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(command, inprocess_app.target, "--port", str(port))
    assert result.exit_code == 1, result.output
    assert f"error: port {port} on 127.0.0.1 is already in use" in result.output
    one_line(result)


# -- --json where it was missing -------------------------------------------------------------------
def test_cancel_prints_json(dead: App) -> None:
    result = run("cancel", "refund:o-2", "--json", "--store", dead.store_url)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"key": "refund:o-2", "outcome": "cancelled", "state": "cancelled",
                                         "actor": default_actor(), "reason": None}
    again = json.loads(run("cancel", "refund:o-2", "--json", "--store", dead.store_url).output)
    assert again["outcome"] == "finished"


def test_dlq_purge_prints_json(dead: App) -> None:
    url = dead.store_url
    dry = json.loads(run("dlq", "purge", "--older-than", "0", "--dry-run", "--json", "--store", url).output)
    assert dry == {"dry_run": True, "older_than": 0.0, "count": 1, "actor": default_actor(), "reason": None}
    time.sleep(0.01)
    done = json.loads(run("dlq", "purge", "--older-than", "0", "--yes", "--json", "--store", url).output)
    assert done == {"dry_run": False, "older_than": 0.0, "count": 1, "actor": default_actor(), "reason": None}
    none = json.loads(run("dlq", "purge", "--older-than", "0", "--yes", "--json", "--store", url).output)
    assert none["count"] == 0


@pytest.mark.parametrize("action", ["replay", "discard"])
def test_replay_and_discard_help_say_that_no_key_or_filter_means_every_dead_job(action: str) -> None:
    text = " ".join(run("dlq", action, "--help").output.split())
    assert "with neither" in text and f"{action}s every dead job" in text
