"""The worker log is for people: limiter bookkeeping at DEBUG with an INFO summary per limiter, and
one line per record whatever a message, a key or an argument holds.

Given jobs held back by a paused limiter and a job whose error quotes an argument with newlines;
when a real `python -m firesafe worker` runs them at the default log level (text and JSON); then
its stderr has one summary line for the limiter and no line per wait, and every line is a record.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from firesafe import App
from firesafe.limits.waitlog import WaitLog
from tests.cli.conftest import run_cli

APP = '''
from firesafe import App

app = App({url!r})
app.limiter("psp", rate=50, burst=5)


@app.job(limiter="psp", max_attempts=1)
def pay(ctx, order_id: str) -> str:
    if order_id.startswith("bad"):
        raise RuntimeError(f"card declined for {{order_id}}\\nsecond line of the error")
    return "paid " + order_id
'''
FORGED = "bad\n2030-01-01T00:00:00.000+00:00 INFO    [1] firesafe.worker: forged record\r\x1b[2Kgone"
RECORD = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00 (DEBUG|INFO|WARNING|ERROR) ")


def held_back(directory: Path, url: str, n: int = 12) -> str:
    """An app module with ``n`` jobs and a bad one, its limiter paused for 3 seconds; its target."""
    name = f"fslog_{uuid.uuid4().hex[:8]}"
    (directory / f"{name}.py").write_text(APP.format(url=url))
    app = App(url)
    try:
        app.limiter("psp", rate=50, burst=5)

        @app.job(limiter="psp", max_attempts=1, name="pay")
        def pay(ctx, order_id: str) -> str:
            raise AssertionError("not run here")

        pay.enqueue_many([{"args": [f"o-{i}"], "key": f"pay:o-{i}"} for i in range(n)])
        pay.enqueue(FORGED, key="pay:bad-1")
        app.limiters["psp"].pause(3.0, reason="provider asked")  # longer than the worker takes to start
    finally:
        app.close()
    return f"{name}:app"


def finished(url: str) -> dict[str, int]:
    app = App(url, auto_migrate=False)
    try:
        states: dict[str, int] = {}
        for j in app.jobs_list(limit=1000):
            states[str(j.state)] = states.get(str(j.state), 0) + 1
        return states
    finally:
        app.close()


def test_at_the_default_level_waits_are_summed_up_not_listed(tmp_path: Path, store_url: str) -> None:
    target = held_back(tmp_path, store_url)
    proc = run_cli(["worker", target, "--burst", "--wait-scheduled"], tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert finished(store_url) == {"succeeded": 12, "dead": 1}
    lines = proc.stderr.splitlines()
    assert all(RECORD.match(line) for line in lines), proc.stderr  # no message split a line
    assert "forged record" not in "\n".join(line for line in lines if not line.count("card declined"))
    [bad] = [line for line in lines if "card declined" in line]
    assert "\\nsecond line of the error" in bad and "\\n2030-01-01T00:00:00" in bad and "\\x1b[2K" in bad
    # Bookkeeping is DEBUG: no line per wait, nor per claimed batch; one summary of the limiter.
    assert "outcome=deferred" not in proc.stderr and "wait for limiters" not in proc.stderr
    assert " DEBUG " not in proc.stderr
    summaries = [line for line in lines if "limiter 'psp'" in line]
    assert len(summaries) == 1 and "holds jobs back (paused" in summaries[0], summaries


def test_debug_lists_each_wait_and_json_records_keep_keys_and_messages_whole(tmp_path: Path, store_url: str) -> None:
    target = held_back(tmp_path, store_url, n=3)
    proc = run_cli(["worker", target, "--burst", "--wait-scheduled", "--log-level", "DEBUG", "--log-format", "json"],
                   tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stderr.splitlines()]  # one object per line
    waits = [r for r in records if r["level"] == "DEBUG" and "waits" in r["message"] and "for limiter psp" in
             r["message"]]
    paused = {r["message"].split(" ")[0] for r in waits if r["message"].endswith("(paused)")}
    assert paused == {"pay:o-0", "pay:o-1", "pay:o-2", "pay:bad-1"}  # each job, held back by the pause
    [bad] = [r for r in records if r.get("job_key") == "pay:bad-1"]
    assert bad["level"] == "INFO" and bad["outcome"] == "failed"
    # The whole message in one record: its newlines kept as data (JSON escapes them), ESC escaped.
    assert "card declined for bad\n2030-01-01T00:00:00.000+00:00 INFO" in bad["message"]
    assert "forged record\r\\x1b[2Kgone\nsecond line of the error" in bad["message"]


def test_the_summary_of_a_limiter_comes_at_most_once_a_period() -> None:
    now = [0.0]
    log = WaitLog(every=60.0, clock=lambda: now[0])
    lines: list[str] = []
    import logging

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Keep(level=logging.INFO)
    logger = logging.getLogger("firesafe.limits")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    try:
        log.note("psp", "paused", 2.0)  # the first wait says the limiter holds jobs back
        for _ in range(119):
            now[0] += 0.25
            log.note("psp", "paused" if now[0] < 20 else "rate", 1.5)
        log.note("other", "rate", 0.5)
        now[0] = 60.0
        log.note("psp", "rate", 0.5)  # a period after the first: the summary of the waits since
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    assert lines[0].startswith("limiter 'psp' holds jobs back (paused 1)")
    assert lines[1].startswith("limiter 'other' holds jobs back (rate 1)")
    assert lines[2] == "limiter 'psp': 120 wait(s) in the last 60s (paused 79, rate 41), 179.0s of waiting in all"
    assert len(lines) == 3
