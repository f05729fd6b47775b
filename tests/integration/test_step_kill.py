"""A 5-step job whose worker is SIGKILLed at every step boundary in turn (issue: durable steps).

Boundaries: before a step, after the step's effect but before its record, after its record. Completed
steps never run again; the final result equals an uninterrupted run's; with the provider
deduplicating by ``ctx.idempotency_key`` every effect is applied exactly once.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from firesafe import App, State
from tests.integration.step_worker import STEPS, build

ROOT = Path(__file__).resolve().parents[2]
PHASES = ("before", "effect", "after")


def test_sigkill_at_every_step_boundary(store_url: str, tmp_path: Path) -> None:
    provider = tmp_path / "provider.db"
    with sqlite3.connect(provider) as conn:
        conn.execute("CREATE TABLE calls (idem_key TEXT NOT NULL)")
        conn.execute("CREATE TABLE effects (idem_key TEXT PRIMARY KEY, job TEXT, step INTEGER)")
    app: App = build(store_url, str(provider))
    job = app.jobs["five_steps"]
    scenarios = [(i, phase) for i in range(1, STEPS + 1) for phase in PHASES]
    for i, phase in scenarios:
        job.enqueue(i, phase, key=f"crash-{i}-{phase}")
    job.enqueue(0, "none", key="control")

    crashes = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        proc = subprocess.run([sys.executable, "-m", "tests.integration.step_worker", store_url, str(provider)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        if proc.returncode == 0:
            break
        assert proc.returncode == -9, proc.stderr[-2000:]  # killed by its own SIGKILL, nothing else
        crashes += 1
    assert crashes == len(scenarios)

    control = app.get("control")
    assert control.state == State.SUCCEEDED
    with sqlite3.connect(provider) as conn:
        calls = dict(conn.execute("SELECT idem_key, count(*) FROM calls GROUP BY idem_key").fetchall())
        effects = conn.execute("SELECT count(*), count(DISTINCT idem_key) FROM effects").fetchone()
    assert effects == ((len(scenarios) + 1) * STEPS,) * 2  # every effect exactly once

    for i, phase in scenarios:
        key = f"crash-{i}-{phase}"
        done = app.get(key)
        assert done.state == State.SUCCEEDED, (key, done.state, done.last_error)
        # the same result as the uninterrupted run, except that receipts name their own job
        assert [r["step"] for r in done.result] == [r["step"] for r in control.result]
        assert [r["receipt"] for r in done.result] == [f"{key}/step-{n}" for n in range(1, STEPS + 1)]
        assert done.trace[0].outcome == "lost" and done.trace[-1].outcome == "succeeded"
        for n in range(1, STEPS + 1):
            expected = 2 if (phase == "effect" and n == i) else 1  # the one window a recorder cannot close
            assert calls[f"{key}/step-{n}"] == expected, (key, n, calls[f"{key}/step-{n}"])
        restored = [s["name"] for s in done.trace[-1].detail["steps"] if s["status"] == "restored"]
        recorded_before_crash = i if phase == "after" else i - 1
        assert restored == [f"step-{n}" for n in range(1, recorded_before_crash + 1)]
    app.close()
