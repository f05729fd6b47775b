"""`firesafe schedules` says where each schedule's windows go (its queue), which window ran last,
also when a backfill enqueued it, and in which time zone its times read. Both stores."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from firesafe import App, FakeClock
from firesafe.cli.main import cli
from firesafe.schedules.scheduler import Scheduler

APP = '''
from firesafe import App

app = App({url!r})


@app.schedule("0 2 * * *", tz="Europe/Berlin", queue="payments")
def nightly_sync(ctx, window):
    return window.start.isoformat()


@app.schedule("*/5 * * * *", catchup="latest")
def five(ctx, window):
    return None
'''


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def target(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.delenv("FIRESAFE_STORE", raising=False)
    name = f"fs_sched_status_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP.format(url=store_url))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield f"{name}:app"
    module = sys.modules.pop(name, None)
    if module is not None:
        module.app.close()


def test_schedules_shows_the_queue_and_the_last_window_after_a_backfill(target: str) -> None:
    # Given no scheduler ever ran, only a backfill of five nights
    done = run("backfill", target, "nightly_sync", "--from", "2026-11-01", "--to", "2026-11-05", "--yes", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["enqueued"] == 5
    # When the schedules are listed
    rows = {r["name"]: r for r in json.loads(run("schedules", target, "--json").output)}
    # Then each names its queue, and the last window is the backfill's latest, with its job's state
    assert rows["nightly_sync"]["queue"] == "payments" and rows["five"]["queue"] == "default"
    assert rows["nightly_sync"]["last_window"]["key"] == "nightly_sync@2026-11-05T02:00:00+01:00"
    assert rows["nightly_sync"]["last_state"] == "queued"
    assert rows["five"]["last_window"] is None
    out = run("schedules", target)
    assert out.exit_code == 0, out.output
    line = next(ln for ln in out.output.splitlines() if "nightly_sync" in ln)
    assert "payments" in line and "2026-11-05 02:00+01:00 → 2026-11-06 02:00+01:00" in line
    assert "queued" in out.output  # the last window's state (the cell may wrap)
    # and the table says in which zone its times read
    assert "times in each schedule's own time zone, with its UTC offset" in out.output
    assert "Europe/Berlin (nightly_sync)" in out.output and "UTC (five)" in out.output


def test_a_backfill_of_an_older_range_keeps_the_schedulers_later_window(app: App, clock: FakeClock) -> None:
    @app.schedule("0 * * * *")
    def hourly(ctx: object, window: object) -> None:
        return None

    clock.set(datetime(2026, 11, 10, 12, 30, tzinfo=UTC).timestamp())
    scheduler = Scheduler(app, "w1")
    scheduler.run()  # first sight
    clock.advance(3600)
    assert scheduler.run()["hourly"].enqueued == 1  # 12:00 -> 13:00
    app.backfill("hourly", "2026-11-01T00:00+00:00", "2026-11-01T03:00+00:00")
    [status] = app.schedules_status()
    assert status.last_window is not None and status.last_window.key == "hourly@2026-11-10T12:00:00+00:00"
    # a backfill of a later range than the scheduler's last window is the last window then
    app.backfill("hourly", "2026-11-10T13:00+00:00", "2026-11-10T14:00+00:00")  # not ended: nothing enqueued
    clock.advance(3600)
    app.backfill("hourly", "2026-11-10T13:00+00:00", "2026-11-10T14:00+00:00")
    [status] = app.schedules_status()
    assert status.last_window is not None and status.last_window.key == "hourly@2026-11-10T13:00:00+00:00"
    assert status.queue == "default" and status.as_dict()["queue"] == "default"


def test_all_utc_schedules_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"fs_sched_utc_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        f"from firesafe import App\napp = App({f'sqlite:///{tmp_path}/x.db'!r})\n"
        "@app.schedule('0 2 * * *')\ndef nightly(ctx, window):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        out = run("schedules", f"{name}:app")
        assert out.exit_code == 0, out.output
        assert "times in UTC" in out.output
    finally:
        module = sys.modules.pop(name, None)
        if module is not None:
            module.app.close()
