"""examples/nightly_sync: the weekend is caught up, the failed window dead-letters, the backfill fixes the week."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from firesafe import App
from tests.examples.runner import run_example

WEEK = [f"2026-11-{d}" for d in range(23, 30)]


def test_the_weekend_is_caught_up_and_the_week_backfilled(tmp_path: Path) -> None:
    data = tmp_path / "nightly-sync"
    out = run_example("nightly_sync", data).stdout
    assert "running the same backfill again changes nothing" in out

    app = App(f"sqlite:///{data}/firesafe.db")
    jobs = {j.key: j for j in app.jobs_list(job="nightly_sync", limit=100)}
    assert sorted(jobs) == [f"nightly_sync@{d}T02:00:00+01:00" for d in WEEK]  # one job per window, no more
    assert all(j.state == "succeeded" for j in jobs.values())
    broken = app.get("nightly_sync@2026-11-28T02:00:00+01:00")
    assert [(a.outcome, a.error_type) for a in broken.trace] == [("failed", "BadExport"), ("succeeded", None)]
    assert [e.kind for e in broken.events] == ["rerun"]
    assert app.dlq.count() == 0  # nothing left in the dead letters
    app.close()

    with sqlite3.connect(data / "warehouse.db") as conn:
        days = dict(conn.execute("SELECT day, count(*) FROM deals GROUP BY day").fetchall())
        loads = [d for (d,) in conn.execute("SELECT day FROM loads")]
    assert days == dict.fromkeys(WEEK, 3)
    assert sorted(loads) == WEEK  # each day loaded exactly once
