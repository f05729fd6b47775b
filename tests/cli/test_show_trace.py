"""`firesafe show` reads true: waits apart from attempts, the header agrees with the rows, and the
last error is the last failed attempt's (type and message together), on SQLite and PostgreSQL.

Given a job that failed twice, was held back three times by a paused limiter and then succeeded
(tests/trace_story.py); when a user runs `firesafe show` (text and --json) and `firesafe jobs`;
then the attempts are the three real ones, the waits are counted and timed apart, and the job
says it recovered instead of showing an error in red.
"""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner
from rich.console import Console

from firesafe import FakeClock
from firesafe.cli._render import render_job
from firesafe.cli.main import cli
from tests.trace_story import ERROR, KEY, WAITED, held_back_app


def run(*args: str) -> click.testing.Result:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_show_lists_attempts_and_waits_apart_and_the_header_agrees(store_url: str, clock: FakeClock) -> None:
    app = held_back_app(store_url, clock)
    try:
        out = run("show", KEY, "--store", store_url).output
    finally:
        app.close()
    before_waits, waits_part = out.split("waits: 3, ")
    assert "runs 6, waits 3, lost 0" in before_waits  # 6 claims: 3 attempts and 3 waits
    assert f"3, {WAITED:.2f}s in all" in before_waits
    assert "deferrals" not in out and "deferred" not in out  # one word for a wait, everywhere
    assert "waiting for limiter" not in before_waits  # no wait among the attempts, nor as an error
    assert before_waits.count("│ failed ") == 2 and before_waits.count("│ succeeded ") == 1
    assert waits_part.startswith(f"{WAITED:.2f}s in all")
    assert waits_part.count("│ limiter 'psp' (paused) │") == 3


def test_show_json_holds_attempts_only_and_waits_with_count_and_seconds(store_url: str, clock: FakeClock) -> None:
    app = held_back_app(store_url, clock)
    try:
        d = json.loads(run("show", KEY, "--json", "--store", store_url).stdout)
    finally:
        app.close()
    assert [a["outcome"] for a in d["attempts"]] == ["failed", "failed", "succeeded"]
    assert [a["attempt"] for a in d["attempts"]] == [1, 2, 3]
    waits = d["waits"]
    assert waits["count"] == 3 == len(waits["items"])
    assert waits["seconds"] == pytest.approx(WAITED)
    assert sum(w["seconds"] for w in waits["items"]) == pytest.approx(WAITED)
    assert {(w["limiter"], w["why"], w["outcome"]) for w in waits["items"]} == {("psp", "paused", "deferred")}
    assert d["runs"] == len(d["attempts"]) + waits["count"] == len(d["trace"])
    assert d["last_error"] == {"error_type": "HTTPStatusError", "message": ERROR}
    assert d["recovered_after"] == 2 and d["state"] == "succeeded"


def test_a_job_that_failed_twice_then_succeeded_says_so_not_in_red(store_url: str, clock: FakeClock) -> None:
    app = held_back_app(store_url, clock)
    try:
        out = run("show", KEY, "--store", store_url).output
        listed = run("jobs", "--store", store_url).output
        console = Console(record=True, force_terminal=True, color_system="standard", width=200)
        render_job(console, app.get(KEY))
    finally:
        app.close()
    assert "succeeded after 2 failed attempts" in out and "last error" not in out
    assert "succeeded after 2 failed attempts" in listed and "HTTPStatusError" not in listed
    [line] = [t for t in console.export_text(styles=True).splitlines() if "succeeded after" in t]
    assert "\x1b[31m" not in line and "\x1b[1;31m" not in line and "\x1b[32m" in line  # green, not red


def test_a_waiting_job_shows_its_last_failure_not_the_wait(store_url: str, clock: FakeClock) -> None:
    app = held_back_app(store_url, clock, finish=False)  # held back a third time, still waiting
    try:
        out = run("show", KEY, "--store", store_url).output
        listed = run("jobs", "--store", store_url).output
        row = app.jobs_list()[0]
    finally:
        app.close()
    # The job's row keeps its last failed attempt's error: a wait's message is not glued to it.
    assert (row.error_type, row.error_message) == ("HTTPStatusError", ERROR)
    assert "last error" in out and "HTTPStatusError: 500 Internal Server Error" in out
    header = out.split("╰")[0]  # the panel above the tables
    assert "waiting for limiter" not in header and "runs 5, waits 3, lost 0" in header
    assert "HTTPStatusError: 500 Internal Server Error" in listed and "waiting for limiter" not in listed
