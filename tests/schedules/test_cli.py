"""`firesafe schedules` and `firesafe backfill`, driven like a user would (the app as MODULE:APP)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from firesafe.cli.main import cli
from firesafe.deadletters.audit import default_actor

APP = '''
from datetime import timedelta

from firesafe import App, Permanent

app = App({url!r})


@app.schedule("0 2 * * *", tz="Europe/Berlin", catchup="all", catchup_window=timedelta(days=7))
def nightly_sync(ctx, window):
    if window.start.day == 3:
        raise Permanent("no data for the 3rd")
    return window.start.isoformat()


@app.schedule("*/5 * * * *", catchup="latest")
def five(ctx, window):
    return None
'''


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"fs_sched_cli_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP.format(url=f"sqlite:///{tmp_path}/cli.db"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield f"{name}:app"
    module = sys.modules.pop(name, None)
    if module is not None:
        module.app.close()


def test_schedules_lists_each_schedule(target: str) -> None:
    out = run("schedules", target)
    assert out.exit_code == 0, out.output
    assert "nightly_sync" in out.output and "Europe/Berlin" in out.output and "*/5 * * * *" in out.output
    rows = json.loads(run("schedules", "ls", target, "--json").output)
    assert [r["name"] for r in rows] == ["five", "nightly_sync"]
    assert rows[1]["next_window"]["key"].startswith("nightly_sync@")
    assert {k: rows[1][k] for k in ("succeeded", "failed", "missed")} == {"succeeded": 0, "failed": 0, "missed": 0}


def test_pause_resume_and_unknown_names(target: str) -> None:
    assert "paused five" in run("schedules", "pause", target, "five").output
    assert json.loads(run("schedules", target, "--json").output)[0]["paused"] is True
    assert "(paused)" in run("schedules", target).output
    assert "resumed five" in run("schedules", "resume", target, "five").output
    out = run("schedules", "pause", target, "nope")
    assert out.exit_code == 1 and "no schedule named 'nope'" in out.output
    assert "no missed windows of five" in run("schedules", "missed", target, "five").output


def test_backfill_dry_run_confirm_rerun_and_repeat(target: str) -> None:
    out = run("backfill", target, "nightly_sync", "--from", "2026-11-01", "--to", "2026-11-05", "--dry-run")
    assert out.exit_code == 0, out.output
    assert "5 window(s) would be enqueued" in out.output and "nightly_sync@2026-11-01T02:00:00+01:00" in out.output
    assert json.loads(run("schedules", target, "--json").output)[1]["active"] == 0  # nothing enqueued
    refused = run("backfill", target, "nightly_sync", "--from", "2026-11-01", "--to", "2026-11-05")
    assert refused.exit_code == 1 and "Pass --yes" in refused.output
    done = json.loads(run("backfill", target, "nightly_sync", "--from", "2026-11-01", "--to", "2026-11-05",
                          "--yes", "--json").output)
    assert done["enqueued"] == 5 and done["rerun_count"] == 0
    again = run("backfill", target, "nightly_sync", "--from", "2026-11-01", "--to", "2026-11-05", "--yes")
    assert "nothing to backfill" in again.output and "5 waiting or running" in again.output
    sys.modules[target.split(":")[0]].app.work(burst=True)  # a worker runs the windows
    [_, nightly] = json.loads(run("schedules", target, "--json").output)
    assert (nightly["succeeded"], nightly["failed"]) == (4, 1)
    rerun = json.loads(run("backfill", target, "nightly_sync", "--from", "2026-11-01", "--to", "2026-11-05",
                           "--rerun", "failed", "--yes", "--json").output)
    assert rerun["rerun_count"] == 1 and rerun["keys"] == ["nightly_sync@2026-11-03T02:00:00+01:00"]
    assert rerun["skipped_succeeded"] == 4


def test_backfill_bad_input(target: str) -> None:
    out = run("backfill", target, "nightly_sync", "--from", "2026-11-30", "--to", "2026-11-01")
    assert out.exit_code == 1 and "the range is empty: from 2026-11-30 is not before to 2026-11-01" in out.output
    out = run("backfill", target, "nightly_sync", "--from", "yesterday", "--to", "2026-11-01")
    assert out.exit_code == 1 and "is not a date" in out.output
    out = run("backfill", target, "nightly_sync", "--from", "2026-11-01", "--to", "2026-11-02", "--rerun", "some")
    assert out.exit_code == 2
    out = run("backfill", target, "nope", "--from", "2026-11-01", "--to", "2026-11-02")
    assert out.exit_code == 1 and "no schedule named 'nope'" in out.output


@pytest.mark.parametrize(("start", "end"), [("9000-01-01", "9999-12-31"), ("0001-01-01", "0001-01-03")])
def test_backfill_of_a_range_that_cannot_be_scheduled_is_a_one_line_error(target: str, start: str, end: str) -> None:
    out = run("backfill", target, "nightly_sync", "--from", start, "--to", end, "--dry-run")
    assert out.exit_code == 1
    assert "is outside what can be scheduled" in out.output and "Traceback" not in out.output
    assert len(out.output.strip().splitlines()) == 1


def test_an_invalid_schedule_is_a_clear_error_when_the_app_loads(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"fs_sched_bad_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        f"from firesafe import App\napp = App({f'sqlite:///{tmp_path}/x.db'!r})\n"
        "@app.schedule('0 2 * * *', tz='Europe/Berln')\ndef nightly(ctx, window):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = run("schedules", f"{name}:app")
    assert out.exit_code == 1
    assert "unknown time zone 'Europe/Berln'" in out.output and "Traceback" not in out.output
    sys.modules.pop(name, None)


def test_backfill_errors_name_the_bounds_as_given(target: str) -> None:
    # the CLI hands the bounds to app.backfill as typed, so its errors quote them as typed
    out = run("backfill", target, "five", "--from", "0001-01-01", "--to", "0001-01-02", "--dry-run")
    assert out.exit_code == 1 and "the range from 0001-01-01 to 0001-01-02 is outside" in out.output, out.output
    out = run("backfill", target, "five", "--from", "2026-11-02T00:00", "--to", "2026-11-02T00:00", "--dry-run")
    assert out.exit_code == 1 and "from 2026-11-02T00:00 is not before to 2026-11-02T00:00" in out.output
    assert "after" not in out.output and "Traceback" not in out.output


OTHER_EXPRESSION = '''
from firesafe import App

app = App({url!r})


@app.schedule("*/10 * * * *", catchup="latest")
def five(ctx, window):
    return None
'''


def test_backfill_reports_windows_stored_with_other_bounds(target: str, tmp_path: Path) -> None:
    # Given windows of `five` enqueued every 5 minutes
    done = json.loads(run("backfill", target, "five", "--from", "2026-11-01T00:00", "--to", "2026-11-01T00:30",
                          "--yes", "--json").output)
    assert done["enqueued"] == 6
    # When the expression changes to every 10 minutes and the hour is backfilled again
    name = f"fs_sched_changed_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(OTHER_EXPRESSION.format(url=f"sqlite:///{tmp_path}/cli.db"))
    try:
        out = run("backfill", f"{name}:app", "five", "--from", "2026-11-01T00:00", "--to", "2026-11-01T01:00", "--yes")
    finally:
        module = sys.modules.pop(name, None)
        if module is not None:
            module.app.close()
    # Then the three windows stored with other bounds are named in the summary, the rest enqueued
    assert out.exit_code == 0, out.output
    assert "enqueued 3 window(s)" in out.output
    assert "3 stored with other bounds (the expression changed; kept as stored)" in out.output
    assert "five@2026-11-01T00:00:00+00:00, five@2026-11-01T00:10:00+00:00" in out.output


def test_backfill_with_max_active_says_why_it_waits(target: str, tmp_path: Path) -> None:
    # Given three windows waiting and no worker
    assert run("backfill", target, "five", "--from", "2026-11-01T00:00", "--to", "2026-11-01T00:15",
               "--yes").exit_code == 0
    # When more are backfilled with --max-active 2 (without a terminal)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    log = tmp_path / "backfill.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "firesafe", "backfill", target, "five", "--from",
                                 "2026-11-01T00:00", "--to", "2026-11-01T01:00", "--yes", "--max-active", "2"],
                                cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        # Then it keeps waiting, and says why on stderr
        deadline = time.monotonic() + 20
        while "waiting:" not in log.read_text() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, log.read_text()
        text = log.read_text()
        assert "waiting: 3 window(s) of five waiting or running >= --max-active 2 (is a worker running?)" in text
    finally:
        proc.kill()
        proc.wait()


def test_unknown_schedules_subcommand_is_no_such_command(target: str) -> None:
    out = run("schedules", "bogus")
    assert out.exit_code == 2 and "No such command 'bogus'" in out.output
    assert run("schedules", target).exit_code == 0  # MODULE:APP still lists
    assert run("schedules", "--json", target).exit_code == 0


def test_pause_and_resume_say_when_nothing_changed(target: str) -> None:
    first = json.loads(run("schedules", "pause", target, "five", "--json").output)
    assert first == {"schedule": "five", "paused": True, "changed": True, "next_due": None,
                     "actor": default_actor(), "reason": None}
    again = run("schedules", "pause", target, "five")
    assert again.exit_code == 0 and "five was already paused" in again.output
    assert json.loads(run("schedules", "pause", target, "five", "--json").output)["changed"] is False
    resumed = json.loads(run("schedules", "resume", target, "five", "--json").output)
    assert resumed["paused"] is False and resumed["changed"] is True
    assert datetime.fromisoformat(resumed["next_due"]).tzinfo is not None
    out = run("schedules", "resume", target, "five")
    assert out.exit_code == 0 and "five was not paused" in out.output and "resumed" not in out.output
