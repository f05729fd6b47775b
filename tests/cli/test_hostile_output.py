"""The CLI prints hostile data as data: no markup applied, no control sequence sent, no crash.

Given a real SQLite store holding markup, ESC/OSC/CSI sequences, carriage returns, NUL and bidi
overrides in job keys (written by hand), error messages, tracebacks, results, arguments, actors,
event ids, types, bodies and rejects; when `jobs`, `dlq ls`, `show`, `events ls` print them (as
tables and as --json); then every command exits 0, the terminal receives visible escapes in place
of the control characters, markup and emoji codes show as typed, and --json reads back the data.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from firesafe import App
from firesafe.cli.main import cli, main
from tests.cli.conftest import AppModule

#: Markup, an emoji code, OSC (set the title), CSI (clear the screen), CR, NUL and an RLO.
HOSTILE = "[bold]x[/x] :100: \x1b]0;owned\x07\x1b[2J\rover acme\x00corp \u202eevil"
#: A key the API refuses (it is not printable), as someone could write it into the store by hand.
BAD_KEY = "k:100:\x1b[31m\u202e[red]x"
#: How every record of the text log format starts.
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00 [A-Z]+ +\[\d+\] ")
#: What a terminal must never receive from data.
RAW = ("\x1b", "\x07", "\r", "\x00", "\u202e", "\U0001f4af")  # the last one: :100: read as an emoji


def run(*args: str) -> click.testing.Result:
    result = CliRunner(env={"COLUMNS": "2000"}).invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def assert_inert(output: str) -> None:
    """Nothing raw reached the terminal, and what was there shows as escapes and as typed."""
    assert not [c for c in RAW if c in output], ascii(output)
    assert ("\\x1b" in output or "\\u001b" in output) and "\\u202e" in output, ascii(output)  # as text, or JSON


@pytest.fixture
def hostile_store(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path}/firesafe.db"
    app = App(url)

    @app.job(max_attempts=1)
    def boom(ctx, note: str) -> None:
        raise RuntimeError(HOSTILE + "\nINFO forged")

    @app.job()
    def fine(ctx, note: str) -> dict:
        return {"note": HOSTILE}

    boom.enqueue(HOSTILE, key="boom:1")
    boom.enqueue("x", key="boom:2")
    fine.enqueue(HOSTILE, key="fine:1")
    app.work(burst=True)
    app.ingest("orders", event_id="[bold]x[/x]", type="order.paid", data={"note": HOSTILE})
    app.inbox.reject("orders", f"no message id: {HOSTILE}", HOSTILE.encode())
    app.close()
    with sqlite3.connect(tmp_path / "firesafe.db") as db:  # what the API refuses, written by hand
        db.execute("UPDATE firesafe_jobs SET key = ?, reason = ?, queue = ? WHERE key = 'boom:2'",
                   (BAD_KEY, HOSTILE, "q\x1b[2J[b]"))
        db.execute("INSERT INTO firesafe_events (job_id, at, kind, actor, detail) "
                   "SELECT id, 0, 'replayed', ?, '{}' FROM firesafe_jobs WHERE key = 'boom:1'", (HOSTILE,))
        db.execute("INSERT INTO firesafe_inbox_events (source, event_id, type, data, fingerprint, received_at) "
                   "VALUES ('orders', ?, ?, '{}', 'f', 0)", ("\x1b]0;t\x07:100:", "type\u202e[/]"))
        db.execute("INSERT INTO firesafe_limiters (name, rate, burst, cooldown, tokens, tokens_at, line_at, "
                   "paused_until, pause_reason, created_at, updated_at) VALUES (?, 1, 1, 1, 1, 0, 0, 4e9, ?, 0, 0)",
                   ("lim\x1b[2J", HOSTILE))
        db.execute("INSERT INTO firesafe_limiter_events (limiter, at, kind, actor, detail) VALUES (?, 0, ?, ?, ?)",
                   ("lim\x1b[2J", "paused\u202e", HOSTILE, json.dumps({"reason": HOSTILE})))
    yield url


def test_listings_print_hostile_keys_errors_and_reasons_as_escapes(hostile_store: str) -> None:
    for command in (["jobs"], ["jobs", "--state", "dead"], ["dlq", "ls"]):
        out = run(*command, "--store", hostile_store).output
        assert_inert(out)
        assert "k:100:\\x1b[31m\\u202e[red]x" in out and "q\\x1b[2J[b]" in out, command  # written by hand
        assert "RuntimeError: [bold]x[/x] :100: \\x1b]0;owned\\x07\\x1b[2J\\rover acme\\x00corp" in out, command


def test_stats_and_limiters_print_names_reasons_and_actors_as_data(hostile_store: str) -> None:
    stats = run("stats", "--store", hostile_store).output
    assert "q\\x1b[2J[b]" in stats and "\x1b" not in stats
    for command in (["limiters"], ["limiters", "events"]):
        out = run(*command, "--store", hostile_store).output
        assert_inert(out)
        assert "lim\\x1b[2J" in out and "[bold]x[/x] :100:" in out, command


def test_show_prints_every_part_of_a_job_as_data(hostile_store: str) -> None:
    out = run("show", "boom:1", "--traceback", "--store", hostile_store).output
    assert_inert(out)
    assert out.count("[bold]x[/x] :100:") >= 4  # arguments, last error, attempt, traceback, actor
    assert "RuntimeError: [bold]x[/x] :100: \\x1b]0;owned\\x07\\x1b[2J\\rover acme\\x00corp \\u202eevil" in out
    done = run("show", "fine:1", "--store", hostile_store).output
    assert_inert(done)
    assert '"note": "[bold]x[/x] :100: \\u001b]0;owned\\u0007' in done  # the result, as JSON
    dead = run("dlq", "show", "boom:1", "--store", hostile_store).output
    assert_inert(dead)


def test_events_and_rejects_are_printed_as_data(hostile_store: str) -> None:
    out = run("events", "ls", "--store", hostile_store).output  # a MarkupError before
    assert_inert(out)
    assert "[bold]x[/x]" in out and "\\x1b]0;t\\x07:100:" in out and "type\\u202e[/]" in out
    rejects = run("events", "ls", "--rejected", "--store", hostile_store).output
    assert_inert(rejects)
    assert "no message id: [bold]x[/x] :100:" in rejects


def test_json_output_reads_back_what_the_store_holds(hostile_store: str) -> None:
    jobs = json.loads(run("jobs", "--json", "--store", hostile_store).stdout)
    assert BAD_KEY in [j["key"] for j in jobs]
    shown = json.loads(run("show", "fine:1", "--json", "--store", hostile_store).stdout)
    assert shown["result"] == {"note": HOSTILE} and shown["arguments"] == {"note": HOSTILE}
    events = json.loads(run("events", "ls", "--json", "--store", hostile_store).stdout)
    assert sorted(e["event_id"] for e in events) == sorted(["[bold]x[/x]", "\x1b]0;t\x07:100:"])
    for command in (["jobs"], ["show", "fine:1"], ["events", "ls"], ["events", "ls", "--rejected"]):
        out = run(*command, "--json", "--store", hostile_store).stdout
        assert not [c for c in RAW if c in out], (command, ascii(out))


def test_lone_surrogates_and_nul_from_the_store_are_printed_as_escapes(
        hostile_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store may hand back text no UTF-8 stream can take (a lone surrogate, as os.listdir gives
    for a non-UTF-8 file name): the table and the JSON both print it escaped, and exit 0."""
    get = App.get

    def surrogates(self: App, key: str) -> object:
        job = get(self, key)
        trace = [dataclasses.replace(a, message="caf\udce9 acme\x00corp", traceback="Traceback\ncaf\udce9")
                 for a in job.trace]
        return dataclasses.replace(job, error_message="caf\udce9 acme\x00corp", result={"name": "caf\udce9"},
                                   trace=trace)

    monkeypatch.setattr(App, "get", surrogates)
    out = run("show", "boom:1", "--traceback", "--store", hostile_store).output  # a strict UTF-8 stream
    assert "RuntimeError: caf\\udce9 acme\\x00corp" in out and "\udce9" not in out
    data = json.loads(run("show", "fine:1", "--json", "--store", hostile_store).stdout)
    assert data["result"] == {"name": "caf\udce9"}  # written \udce9: JSON reads the same text back


def test_an_error_whose_text_cannot_be_printed_is_still_one_line(
        hostile_store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    def broken(self: App, key: str) -> object:
        raise Unprintable("\x1b[2J")

    monkeypatch.setattr(App, "get", broken)
    with pytest.raises(SystemExit) as exited:
        main(["show", "boom:1", "--store", hostile_store])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("internal error: Unprintable: Unprintable('\\x1b[2J')") and err.count("\n") == 1
    assert "\x1b[2J" not in err


def test_the_command_line_entry_point_prints_hostile_events(hostile_store: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "firesafe", "events", "ls", "--store", hostile_store],
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode("utf-8")  # strict
    assert_inert(out)
    assert "[bold]x[/x]" in out


WORKER_APP = '''
from firesafe import App

app = App({url!r})


@app.job(max_attempts=1)
def forge(ctx) -> None:
    raise RuntimeError({message!r})
'''
FORGED = "2026-01-01T00:00:00.000+00:00 INFO    [1] firesafe.worker: refund r-1 outcome=succeeded"


def test_an_error_message_cannot_forge_a_worker_log_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/firesafe.db"
    (tmp_path / "forgeapp.py").write_text(WORKER_APP.format(url=url, message=f"x\n{FORGED}\x1b[2K\r"))
    app = App(url)

    @app.job(max_attempts=1)
    def forge(ctx) -> None:  # the same job, to enqueue it here
        return None

    forge.enqueue(key="forge:1")
    app.close()
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-m", "firesafe", "worker", "forgeapp:app", "--burst"], cwd=tmp_path,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": path})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.decode("utf-8").splitlines()
    assert lines and all(STAMP.match(line) for line in lines), lines
    [outcome] = [line for line in lines if "forge:1 attempt=1" in line]
    assert outcome.endswith(f"error=RuntimeError: x\\n{FORGED}\\x1b[2K\\r")
    assert not [line for line in lines if line.startswith(FORGED[:30])]  # no line of its own


def test_enqueue_refuses_an_integer_too_long_to_read_in_one_line(inprocess_app: AppModule) -> None:
    for option, value in (("--args", f"[{'9' * 5000}]"), ("--kwargs", f'{{"a": {"9" * 5000}}}'),
                          ("--args", "[" * 100_000 + "]" * 100_000)):
        result = CliRunner().invoke(cli, ["enqueue", inprocess_app.target, "add", option, value])
        assert result.exit_code == 2, (option, result.output[-300:], result.exception)
        error = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert len(error) == 1 and option in error[0] and len(error[0]) < 200, result.output[-300:]
        assert "4300 digits" in error[0] or "nests too deeply" in error[0]
    app = App(inprocess_app.url)
    assert app.jobs_list() == []  # nothing enqueued
    app.close()
