"""``firesafe drill`` end to end: a small app module of the user's, run as a real command.

The app's own store must never be opened; the report must say, per job, what happened, and name the
promise the code breaks (a step without an idempotency key that ran again after completing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

APP = '''
import time
from pathlib import Path

from firesafe import App, Backoff

HERE = Path(__file__).parent
app = App("sqlite:///" + str(HERE / "real-store.db"))  # the user's store: a drill must never open it
FAST = Backoff(base=0.05, cap=0.2)


def provider(what, key=None):
    with open(HERE / "provider.log", "a") as f:
        f.write(f"{what} {key}\\n")
    return {"done": what, "key": key}


@app.job(max_attempts=10, backoff=FAST)
def refund(ctx, order, amount):
    """A charge keyed by its step's idempotency key, then an e-mail without one."""
    charge = ctx.step("charge", provider, "charge", ctx.idempotency_key("charge"))
    ctx.step("email", provider, "email")
    return charge


@app.job(max_attempts=10, timeout=0.5, backoff=FAST)
def sync(ctx, source):
    return ctx.step("pull", provider, "pull", ctx.idempotency_key("pull"))


@app.job(max_attempts=2, backoff=FAST)
def doomed(ctx):
    raise RuntimeError("the downstream is gone")


@app.job(max_attempts=4, timeout=0.3, backoff=FAST)
def wobbly(ctx):
    """Its step completes after the attempt timed out (first run), so it is not recorded: it runs again."""
    def send():
        provider("send")
        if ctx.job.run == 1:
            time.sleep(0.8)
        return "sent"
    return ctx.step("send", send)
'''


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "shopapp.py").write_text(APP)
    (tmp_path / "samples.json").write_text(json.dumps(
        {"refund": [["o-1", 100], {"kwargs": {"order": "o-2", "amount": 5}}], "sync": [["crm"]]}))
    return tmp_path


def drill(user_dir: Path, *args: str, timeout: float = 120, yes: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(user_dir)}
    env.pop("FIRESAFE_STORE", None)
    confirm = ["--yes"] if yes else []  # no terminal here: the drill runs the jobs' code only with --yes
    return subprocess.run([sys.executable, "-m", "firesafe", "drill", "shopapp:app", *confirm, *args], cwd=user_dir,
                          env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_drill_reports_each_job_under_every_fault_and_never_opens_the_users_store(user_dir: Path) -> None:
    done = drill(user_dir, "--jobs", "refund,sync,doomed", "--args", "samples.json", "--seconds", "4",
                 "--settle", "40", "--rate", "0.3", "--seed", "7", "--json")
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    jobs = {j["name"]: j for j in report["jobs"]}
    assert set(jobs) == {"refund", "sync", "doomed"}
    assert report["seed"] == 7 and report["faults"] == ["exception", "timeout", "kill", "store"]
    assert report["worker_starts"] >= 2
    for j in jobs.values():  # every job ended: none lost, none still waiting
        assert j["runs"] >= 1 and j["succeeded"] + j["dead"] == j["runs"] and j["unfinished"] == 0, j
        assert j["attempts"] >= j["runs"]
        # (A job that never ended, or went dead without its trace or alert; "a call never ended" is a
        # step's call cut short by a kill, which the 'email' step's check below allows.)
        assert not [v for v in j["violations"] if "never ended within" in v or "without its" in v], j["violations"]
    assert jobs["refund"]["succeeded"] == jobs["refund"]["runs"]  # ten attempts outlast the faults
    assert jobs["doomed"]["dead"] == jobs["doomed"]["runs"] == jobs["doomed"]["alerts"]
    assert jobs["doomed"]["dead_reasons"] == {"exhausted": jobs["doomed"]["runs"]}
    faults = {k for j in jobs.values() for k in j["faults"]}
    assert {"exception", "kill"} <= faults, faults
    assert report["store_faults"] > 0
    assert "timeout" not in jobs["refund"]["faults"] and "timeout" not in jobs["doomed"]["faults"]  # no timeout
    assert any("no timeout" in w for w in jobs["refund"]["warnings"])
    # A step re-run is only ever flagged when it had no key: the charge and the pull never are
    for j in jobs.values():
        for v in j["violations"]:
            assert "'email'" in v and "idempotency key" in v, v
    assert report["ok"] == (done.returncode == 0)
    # The user's store was never created, let alone written; the scratch folder is gone
    assert not (user_dir / "real-store.db").exists()
    assert not Path(report["scratch_store"].removeprefix("sqlite:///")).exists()
    shown = ("runs", "attempts", "resumes", "steps_restored", "steps_rerun", "dead", "alerts", "faults")
    print(f"\n[drill command] store_faults={report['store_faults']} "
          f"{json.dumps({n: {k: j[k] for k in shown} for n, j in jobs.items()})}")


def test_drill_names_a_step_that_ran_twice_without_an_idempotency_key(user_dir: Path) -> None:
    # No injected faults at all: the job's own timeout makes its completed step run again
    done = drill(user_dir, "--jobs", "wobbly", "--seconds", "1", "--settle", "30", "--faults", "exception",
                 "--rate", "0")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "wobbly" in done.stdout and "1 broken" in done.stdout
    assert "step 'send' ran 2 times without an idempotency key" in done.stdout
    assert "ctx.idempotency_key('send')" in done.stdout
    assert "broken invariant(s)" in done.stderr
    assert "Your store was not opened" in done.stdout and "Your jobs' code ran for real" in done.stdout
    assert not (user_dir / "real-store.db").exists()


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--jobs", "nope"], 1, "no job named 'nope'"),
    (["--jobs", "refund"], 1, "no sample arguments for job 'refund'"),
    (["--jobs", "refund", "--args", "missing.json"], 1, "cannot read missing.json"),
    (["--jobs", "refund", "--args", "bad.json"], 1, "bad.json is not valid JSON"),
    (["--jobs", "refund", "--args", "wrong.json"], 1, "sample 0 of job 'refund'"),
    (["--jobs", "refund", "--args", "samples.json", "--faults", "fire"], 2, "unknown fault(s) fire"),
    (["--jobs", "", "--args", "samples.json"], 2, "name at least one job"),
    (["--jobs", "sync", "--args", "samples.json", "--seconds", "soon"], 2, "is not a duration"),
])
def test_drill_mistakes_get_one_clear_line(user_dir: Path, args: list[str], code: int, message: str) -> None:
    (user_dir / "bad.json").write_text("{not json")
    (user_dir / "wrong.json").write_text(json.dumps({"refund": [["o-1"]]}))  # one argument short
    done = drill(user_dir, *args, timeout=60)
    assert done.returncode == code, done.stdout + done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert not (user_dir / "real-store.db").exists()
