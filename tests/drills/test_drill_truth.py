"""``firesafe drill`` tells the truth: the jobs' code runs for real, so it says so before it starts,
asks (or takes --yes), reports how often each job's code ran, and a step declared safe to repeat is
not counted as a broken promise."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from firesafe.cli.main import cli

APP = '''
import time
from pathlib import Path

from firesafe import App, Backoff
from firesafe.steps import repeatable

HERE = Path(__file__).parent
app = App("sqlite:///" + str(HERE / "real-store.db"))  # the user's store: a drill must never open it
FAST = Backoff(base=0.05, cap=0.2)


def provider(what):
    with open(HERE / "provider.log", "a") as f:
        f.write(what + "\\n")
    return what


@app.job(max_attempts=3, backoff=FAST)
def charge(ctx, order):
    return ctx.step("charge", provider, "charge " + order)


def slow_read():
    """Its first call completes after the attempt timed out, so it is not recorded: it runs again."""
    provider("read")
    if not (HERE / "read-once").exists():
        (HERE / "read-once").write_text("x")
        time.sleep(0.8)
    return "rates"


@app.job(max_attempts=4, timeout=0.3, backoff=FAST)
def rates(ctx):
    return ctx.step("read", repeatable(slow_read))


@app.job(max_attempts=4, timeout=0.3, backoff=FAST)
def rates_unmarked(ctx):
    return ctx.step("read", slow_read)
'''


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "truthapp.py").write_text(APP)
    (tmp_path / "samples.json").write_text(json.dumps({"charge": [["o-1"]]}))
    return tmp_path


def drill(user_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(user_dir)}
    env.pop("FIRESAFE_STORE", None)
    return subprocess.run([sys.executable, "-m", "firesafe", "drill", "truthapp:app", *args], cwd=user_dir, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_without_a_terminal_the_drill_refuses_without_yes_after_saying_what_runs_for_real(
        user_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(user_dir)
    monkeypatch.syspath_prepend(str(user_dir))
    monkeypatch.delenv("FIRESAFE_STORE", raising=False)
    try:
        result = CliRunner().invoke(cli, ["drill", "truthapp:app", "--jobs", "charge", "--args", "samples.json",
                                          "--seconds", "1"])
    finally:
        sys.modules.pop("truthapp", None)
    assert result.exit_code == 1, result.output
    err = result.stderr
    warned = err.index("the code of job(s) charge runs for real")
    refused = err.index("refusing to run the drill without confirmation: stdin is not a terminal. Pass --yes")
    assert warned < refused  # the warning comes first
    assert "charges, e-mails, HTTP calls" in err and "new job keys" in err
    assert "Traceback" not in err
    assert not (user_dir / "provider.log").exists()  # no job code ran
    assert not (user_dir / "real-store.db").exists()


def test_at_a_terminal_the_drill_asks_and_a_no_runs_nothing(user_dir: Path) -> None:
    # A real terminal: stdin is a pty, and the user answers "n"
    env = {**os.environ, "PYTHONPATH": str(user_dir)}
    env.pop("FIRESAFE_STORE", None)
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "firesafe", "drill", "truthapp:app", "--jobs", "charge", "--args",
                             "samples.json", "--seconds", "1"], cwd=user_dir, env=env, stdin=terminal,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(terminal)
    try:
        os.write(controller, b"n\n")
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(controller)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out + err
    assert err.index("runs for real") < err.index("Run these jobs for real now?") < err.index("not confirmed")
    assert not (user_dir / "provider.log").exists()


def test_the_report_says_the_store_was_untouched_but_the_jobs_code_ran_for_real(user_dir: Path) -> None:
    started = time.monotonic()
    done = drill(user_dir, "--jobs", "charge", "--args", "samples.json", "--seconds", "1", "--settle", "30",
                 "--faults", "exception", "--rate", "0", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.index("runs for real") < done.stderr.index("drill: faults for")  # warned before it started
    calls = (user_dir / "provider.log").read_text().splitlines()
    assert calls and set(calls) == {"charge o-1"}  # the job's effect, at the real provider
    report = done.stdout
    assert "Your store was not touched" not in report
    assert "Your store was not opened (the jobs ran on a scratch store) and no alert was sent" in report
    n = "once" if len(calls) == 1 else f"{len(calls)} times"
    ran = f"Your jobs' code ran for real: charge's code ran {n} (its steps' functions {n})"
    assert ran in " ".join(report.split()), report
    assert time.monotonic() - started < 110
    as_json = drill(user_dir, "--jobs", "charge", "--args", "samples.json", "--seconds", "1", "--settle", "30",
                    "--faults", "exception", "--rate", "0", "--yes", "--json")
    assert as_json.returncode == 0, as_json.stderr
    body = json.loads(as_json.stdout)
    assert body["store_touched"] is False and body["job_code_ran"]["charge"] == body["jobs"][0]["attempts"] >= 1


def test_a_step_declared_repeatable_is_not_counted_as_broken(user_dir: Path) -> None:
    # Given the same step twice: declared repeatable in `rates`, not in `rates_unmarked`; in each,
    # the first call completes after its attempt timed out, so the step runs again
    done = drill(user_dir, "--jobs", "rates", "--seconds", "1", "--settle", "30", "--faults", "exception",
                 "--rate", "0", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    [job] = json.loads(done.stdout)["jobs"]
    assert (user_dir / "provider.log").read_text().splitlines().count("read") >= 2  # it did run twice
    assert job["steps_rerun"] >= 1 and job["steps_repeatable"] == job["steps_rerun"]
    assert job["violations"] == [] and not [w for w in job["warnings"] if "'read'" in w]
    # The same repetition without the mark is a broken promise
    (user_dir / "read-once").unlink()
    unmarked = drill(user_dir, "--jobs", "rates_unmarked", "--seconds", "1", "--settle", "30", "--faults",
                     "exception", "--rate", "0", "--yes", "--json")
    assert unmarked.returncode == 1, unmarked.stdout + unmarked.stderr
    [job] = json.loads(unmarked.stdout)["jobs"]
    assert job["steps_repeatable"] == 0
    assert any("step 'read' ran 2 times without an idempotency key" in v for v in job["violations"])
