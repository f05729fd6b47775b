"""`firesafe schedules` and `firesafe backfill`, driven like a user would (the app as MODULE:APP)."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from firesafe.cli.main import cli

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
    assert out.exit_code == 1 and "--from 2026-11-30 is after --to 2026-11-01" in out.output
    out = run("backfill", target, "nightly_sync", "--from", "yesterday", "--to", "2026-11-01")
    assert out.exit_code == 1 and "is not a date" in out.output
    out = run("backfill", target, "nightly_sync", "--from", "2026-11-01", "--to", "2026-11-02", "--rerun", "some")
    assert out.exit_code == 2
    out = run("backfill", target, "nope", "--from", "2026-11-01", "--to", "2026-11-02")
    assert out.exit_code == 1 and "no schedule named 'nope'" in out.output


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
