"""``firesafe drill`` counts a step as run when it starts, so a call the process dies in is counted, and
a step that started, was not recorded as done and started again without an idempotency key is
flagged as a possible double effect.

The defect these pin: the worker wrote a step's event only when its function returned, so a call in
flight when its process was SIGKILLed (by a kill fault of another attempt in the same process, or by
the drill's end) left no record: the report under-counted step runs and missed unkeyed double effects.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from firesafe.drill.runner import JobReport, tally_steps
from firesafe.drill.worker import Injector


# -- the count, from an event record --------------------------------------------------------------------
def start(run: int, keyed: bool = False, job: str = "k1", step: str = "send") -> dict[str, Any]:
    return {"e": "step_start", "job": job, "name": "notify", "run": run, "step": step, "keyed": keyed}


def end(run: int, ok: bool = True, keyed: bool = False, job: str = "k1", step: str = "send") -> dict[str, Any]:
    return {"e": "step", "job": job, "name": "notify", "run": run, "step": step, "ok": ok, "keyed": keyed}


def tally(events: list[dict[str, Any]]) -> tuple[JobReport, set[str]]:
    reports = {"notify": JobReport("notify"), "charge": JobReport("charge")}
    stepped = tally_steps(events, {"k1": "notify", "k2": "notify", "c1": "charge"}, reports)
    return reports["notify"], stepped


def test_a_call_cut_short_then_run_again_counts_twice_and_is_flagged_without_a_key() -> None:
    # Given run 1 started `send` and its process died during the call; run 2 ran it to the end
    r, stepped = tally([start(1), start(2), end(2)])
    # Then both calls count, one of them re-run and one cut, and the possible double effect is named
    assert (r.steps_ran, r.steps_rerun, r.steps_cut) == (2, 1, 1)
    assert stepped == {"notify"}
    assert len(r.violations) == 1 and not r.warnings
    assert "k1: step 'send' ran 2 times without an idempotency key" in r.violations[0]
    assert "a call never ended" in r.violations[0] and "ctx.idempotency_key('send')" in r.violations[0]


def test_a_cut_call_is_not_flagged_when_the_step_asks_for_its_key() -> None:
    # Before the call (as an argument of ctx.step), or during it (step_key, written when it asks)
    for events in ([start(1, keyed=True), start(2, keyed=True), end(2, keyed=True)],
                   [start(1), {"e": "step_key", "job": "k1", "run": 1, "step": "send"}, start(2)]):
        r, _ = tally(events)
        assert (r.steps_ran, r.steps_rerun) == (2, 1)
        assert not r.violations and not r.warnings, events


def test_the_count_follows_runs_not_the_order_of_the_record() -> None:
    # A timed-out run 1 ends after run 2 (its late end is logged last); run 3 never ends
    r, _ = tally([start(1), start(2), end(2, ok=False), end(1), start(3)])
    assert (r.steps_ran, r.steps_rerun, r.steps_cut) == (3, 2, 1)
    assert len(r.violations) == 1 and "a call completed and was not recorded" in r.violations[0]
    # Completed and cut calls are both named
    r, _ = tally([start(1), end(1), start(2), start(3), end(3)])
    assert "a call completed" in r.violations[0] and "a call never ended" in r.violations[0]


def test_what_is_not_a_double_effect() -> None:
    # One call, cut short (the job then died): counted, cut, not flagged
    r, _ = tally([start(1)])
    assert (r.steps_ran, r.steps_rerun, r.steps_cut, r.violations) == (1, 0, 1, [])
    # Failed calls, then one that completed: a warning (safe only if a failure leaves no effect)
    r, _ = tally([start(1), end(1, ok=False), start(2), end(2)])
    assert not r.violations and len(r.warnings) == 1 and "after failures" in r.warnings[0]
    # Other steps and other jobs are counted apart; events of keys the drill did not enqueue are ignored
    r, _ = tally([start(1), end(1), start(1, step="mark"), end(1, step="mark"), start(1, job="k2"),
                  start(1, job="stranger"), start(2, job="stranger")])
    assert (r.steps_ran, r.steps_rerun, r.steps_cut, r.violations) == (3, 0, 1, [])


# -- the record, written by the worker's wrapper before the step's function runs ------------------------
class _Job:
    """The parts of a job declaration that :meth:`Injector.wrap` uses."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.timeout = None
        self.is_async = asyncio.iscoroutinefunction(fn)


def _ctx(run: int) -> Any:
    def real_step(name: str, fn: Any, *args: Any) -> Any:
        return fn(*args)

    return SimpleNamespace(job=SimpleNamespace(key="k1", name="notify", run=run), step=real_step,
                           idempotency_key=lambda name: f"k1/{name}")


def _events(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]


def test_the_start_of_a_step_is_on_record_before_its_function_runs(tmp_path: Path) -> None:
    seen: list[list[dict[str, Any]]] = []

    def send() -> str:  # what a SIGKILL here would leave behind: the record as it is now
        seen.append(_events(tmp_path))
        return "sent"

    def notify(ctx: Any) -> Any:
        return ctx.step("send", send)

    jobdef = _Job(notify)
    Injector(set(), 0.0, 0, tmp_path).wrap(jobdef)
    assert jobdef.fn(_ctx(1)) == "sent"
    assert [(e["e"], e["step"], e["run"], e["keyed"]) for e in seen[0]] == [("step_start", "send", 1, False)]
    assert [e["e"] for e in _events(tmp_path)] == ["step_start", "step"]


def test_an_async_step_and_a_key_asked_during_the_call_are_on_record(tmp_path: Path) -> None:
    async def notify(ctx: Any) -> Any:
        async def send() -> str:
            assert [e["e"] for e in _events(tmp_path)] == ["step_start"]
            return ctx.idempotency_key("send")

        return await ctx.step("send", send)

    jobdef = _Job(notify)
    Injector(set(), 0.0, 0, tmp_path).wrap(jobdef)
    assert asyncio.run(jobdef.fn(_ctx(2))) == "k1/send"
    assert [(e["e"], e["run"]) for e in _events(tmp_path)] == [("step_start", 2), ("step_key", 2), ("step", 2)]
    assert _events(tmp_path)[-1]["keyed"] is True


# -- the command, end to end ----------------------------------------------------------------------------
APP = '''
import os
import signal
import time
from pathlib import Path

from firesafe import App, Backoff

HERE = Path(__file__).parent
app = App("sqlite:///" + str(HERE / "real-store.db"))  # a drill must never open it
FAST = Backoff(base=0.05, cap=0.2)


def effect(ctx, step, key=None):
    """The user's own log of effects: one line per call, written first thing."""
    with open(HERE / "effects.log", "a") as f:
        f.write(f"{ctx.job.key} {step} {key or '-'}\\n")


@app.job(max_attempts=10, backoff=FAST)
def notify(ctx, user):
    """Two steps, no idempotency key; the first waits for its provider after its effect (a kill of
    its process meanwhile, by a fault in another attempt, cuts the call short after its effect)."""
    def send():
        effect(ctx, "send")
        if os.environ.get("DRILL_SELF_KILL") and ctx.job.run == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # the process dies during the call, its effect done
        time.sleep(0.3)
        return "sent"
    ctx.step("send", send)
    ctx.step("mark", effect, ctx, "mark")


@app.job(max_attempts=10, backoff=FAST)
def charge(ctx, order):
    """A charge keyed by its step's idempotency key."""
    ctx.step("charge", effect, ctx, "charge", ctx.idempotency_key("charge"))


@app.job(max_attempts=3, backoff=FAST)
def ping(ctx):
    """No steps at all."""
    return "pong"
'''


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "drillapp.py").write_text(APP)
    # Sixteen notify jobs a round keep both workers' slots busy, so a kill finds sends in flight
    (tmp_path / "samples.json").write_text(json.dumps({"notify": [[f"u-{n}"] for n in range(16)],
                                                       "charge": [[f"o-{n}"] for n in range(4)]}))
    (tmp_path / "notify.json").write_text(json.dumps({"notify": [["u-1"]]}))
    return tmp_path


def drill(user_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(user_dir), **env}
    environ.pop("FIRESAFE_STORE", None)
    return subprocess.run([sys.executable, "-m", "firesafe", "drill", "drillapp:app", "--json", "--yes", *args],
                          cwd=user_dir,
                          env=environ, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def effects(user_dir: Path) -> Counter[tuple[str, str, str]]:
    path = user_dir / "effects.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(tuple(line.split()) for line in lines)  # type: ignore[misc]


def test_drill_counts_a_step_its_process_died_in_and_flags_it_ran_twice(user_dir: Path) -> None:
    # Given: no injected faults; the step `send` of notify's first run kills its own process after
    # its effect (as a kill fault of another attempt in the same process would)
    done = drill(user_dir, "--jobs", "notify,ping", "--args", "notify.json", "--seconds", "1", "--settle", "30",
                 "--faults", "exception", "--rate", "0", DRILL_SELF_KILL="1")
    # Then the report counts what the user's own log shows: `send` ran twice, unkeyed, and is flagged
    assert done.returncode == 1, done.stdout + done.stderr
    jobs = {j["name"]: j for j in json.loads(done.stdout)["jobs"]}
    logged = effects(user_dir)
    notify = jobs["notify"]
    assert logged[("drill:notify:1:0", "send", "-")] == 2, logged
    assert notify["succeeded"] == notify["runs"] == 1 and notify["attempts"] == 2
    assert (notify["steps_ran"], notify["steps_rerun"], notify["steps_cut"]) == (3, 1, 1)  # send x2, mark x1
    assert notify["steps_ran"] == sum(n for (key, _, _), n in logged.items() if key.startswith("drill:notify"))
    assert len(notify["violations"]) == 1, notify["violations"]
    assert "step 'send' ran 2 times without an idempotency key: a call never ended" in notify["violations"][0]
    # And a job with no steps says its effects were not checked
    assert jobs["ping"]["succeeded"] == 1 and not jobs["ping"]["violations"]
    assert any("ran no steps: effects outside ctx.step are not checked" in w for w in jobs["ping"]["warnings"])
    assert not any("ran no steps" in w for w in notify["warnings"])
    assert not (user_dir / "real-store.db").exists()


def test_drill_flags_every_unkeyed_double_effect_the_users_own_log_shows(user_dir: Path) -> None:
    # The reviewer's check, under every fault: count the effects in the user's own log, compare
    done = drill(user_dir, "--jobs", "charge,notify", "--args", "samples.json", "--faults",
                 "exception,timeout,kill,store", "--seconds", "3", "--settle", "30", "--rate", "0.6", "--seed", "11")
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    jobs = {j["name"]: j for j in report["jobs"]}
    logged = effects(user_dir)
    for name, j in jobs.items():
        # Every call the user logged was counted (a start may be written just before a kill, so >=)
        calls = sum(n for (key, _, _), n in logged.items() if key.startswith(f"drill:{name}:"))
        assert j["steps_ran"] >= calls, (name, j["steps_ran"], calls)
    twice = sorted({(key, step) for (key, step, idem), n in logged.items() if n > 1 and idem == "-"})
    # Whether an unkeyed effect ran twice in this run depends on timing (it did in 12 of 12 runs with
    # seed 11); the self-kill test above makes one happen every time. Every one that did is flagged:
    violations = [v for j in jobs.values() for v in j["violations"]]
    for key, step in twice:
        assert any(v.startswith(f"{key}: step {step!r} ran") for v in violations), (key, step, violations)
    assert not [v for v in violations if "'charge'" in v], violations  # a keyed step is never flagged
    print(f"\n[drill step counts] unkeyed double effects={len(twice)} "
          f"{ {n: (j['steps_ran'], j['steps_rerun'], j['steps_cut']) for n, j in jobs.items()} }")
