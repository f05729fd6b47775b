"""The deploy drill (issue 31): a run killed at step 3 under version 1 completes correctly under
version 2, with real worker processes (``firesafe worker``) on a real store.

The job module is a file in the drill's folder. Version 1 has five steps, each an effect applied by
a provider outside the store (a log file: a ``call`` line per call, an ``apply`` line the first time
an idempotency key is seen, as a payment API does). Its first run stops after step 3 is recorded and
the worker is SIGKILLed there. The module is then rewritten to version 2 and a new worker resumes:

- ``patched``: the change of step 2 and the change after step 3 are guarded by ``ctx.patched``. The
  recorded run keeps the old step 2 (it had gone past it) and takes the new step 4 (it had not got
  there); a run started under version 2 takes both new paths.
- ``rerun``: a step is put before step 3 with no marker, and the job is declared
  ``on_divergence="rerun"``: step 3 is forgotten and runs again (called twice, applied once: its
  idempotency key), the divergence is in the job's trace.
- ``dead``: the same change with the default policy: dead with NonDeterminism, as before issue 31.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from textwrap import dedent

import pytest

from firesafe import App, State
from firesafe.steps.steps import step_key
from tests.processes import wait_until

MODULE = "deploy_jobs"

VERSION_1 = """
    STEPS = ("s1", "s2", "s3", "s4", "s5")


    @app.job(name="order", max_attempts=3, backoff=FAST)
    def order(ctx, order_id: str) -> list:
        done = []
        for name in STEPS:
            done.append(ctx.step(name, apply, ctx.idempotency_key(name), name))
            if name == "s3" and ctx.job.run == 1:
                note({"e": "recorded", "step": "s3"})  # ctx.step returned: step 3's record is committed
                threading.Event().wait(600)  # the deploy: this worker is killed here
        return done
"""

VERSION_2 = {
    "patched": """
        @app.job(name="order", max_attempts=3, backoff=FAST)
        def order(ctx, order_id: str) -> list:
            def step(name):
                return ctx.step(name, apply, ctx.idempotency_key(name), name)

            done = [step("s1")]
            done.append(step("s2-new") if ctx.patched("v2-s2") else step("s2"))
            done.append(step("s3"))
            done.append(step("s4-new") if ctx.patched("v2-s4") else step("s4"))
            done.append(step("s5"))
            return done
    """,
    "rerun": """
        @app.job(name="order", max_attempts=3, backoff=FAST, on_divergence="rerun")
        def order(ctx, order_id: str) -> list:
            return [ctx.step(n, apply, ctx.idempotency_key(n), n) for n in ("s1", "s2", "audit", "s3", "s4", "s5")]
    """,
    "dead": """
        @app.job(name="order", max_attempts=3, backoff=FAST)
        def order(ctx, order_id: str) -> list:
            return [ctx.step(n, apply, ctx.idempotency_key(n), n) for n in ("s1", "s2", "audit", "s3", "s4", "s5")]
    """,
}


def module_source(store_url: str, log: Path, body: str) -> str:
    head = f"""
        import json
        import os
        import threading

        from firesafe import App, Backoff

        app = App({store_url!r}, lease=2.0)
        FAST = Backoff(base=0.05, cap=0.2, jitter="none")
        LOG = {str(log)!r}


        def note(entry):
            # One O_APPEND write per line: a line is whole or absent when the process is killed.
            fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, (json.dumps(entry) + "\\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)


        def apply(key, name):
            # The provider: every call is logged; the effect is applied once per idempotency key.
            with open(LOG, "a+") as f:
                f.seek(0)
                seen = any(json.loads(line).get("key") == key and json.loads(line)["e"] == "apply" for line in f)
            note({{"e": "call", "step": name, "key": key}})
            if not seen:
                note({{"e": "apply", "step": name, "key": key}})
            return name
    """
    return dedent(head) + dedent(body)


class Deploy:
    """The drill's folder, its job module, the provider's log, and the worker processes."""

    def __init__(self, store_url: str, folder: Path) -> None:
        self.store_url = store_url
        self.folder = folder
        self.log = folder / "effects.log"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.app = App(store_url)

        @self.app.job(name="order")
        def order(ctx, order_id: str) -> None: ...  # enqueues only: the workers run the module's code

        self.order = order
        self.app.store.migrate()  # before any worker, so they all find the schema in place

    def write_module(self, body: str) -> None:
        (self.folder / f"{MODULE}.py").write_text(module_source(self.store_url, self.log, body))

    def worker(self, name: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # the rewritten module is read afresh
        with open(self.folder / f"{name}.err", "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "firesafe", "worker", f"{MODULE}:app", "--concurrency",
                                     "2", "--no-scheduler", "--grace", "5s"], cwd=self.folder, env=env,
                                    stdout=subprocess.DEVNULL, stderr=err)
        self.procs.append(proc)
        return proc

    def entries(self) -> list[dict[str, str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def counts(self, kind: str, job_key: str) -> Counter[str]:
        """How many ``call`` or ``apply`` lines each step of job ``job_key`` has."""
        return Counter(e["step"] for e in self.entries() if e["e"] == kind and e["key"].startswith(job_key + "/"))

    def finished(self, key: str) -> bool:
        return self.app.get(key).state in (State.SUCCEEDED, State.DEAD)

    def errors(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.folder.glob("*.err")))

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(30)
        self.app.close()


@pytest.fixture
def deploy(store_url: str, tmp_path: Path) -> Iterator[Deploy]:
    d = Deploy(store_url, tmp_path)
    try:
        yield d
    finally:
        d.close()


def run_killed_under_version_1(d: Deploy) -> None:
    """Version 1's worker runs job ``o-1`` and is SIGKILLed once step 3 is recorded."""
    d.write_module(VERSION_1)
    d.order.enqueue("o-1", key="o-1")
    v1 = d.worker("v1")
    wait_until(lambda: any(e["e"] == "recorded" for e in d.entries()) or v1.poll() is not None, 60,
               "step 3 recorded under version 1")
    assert v1.poll() is None, d.errors()
    v1.send_signal(signal.SIGKILL)
    assert v1.wait(30) == -signal.SIGKILL
    assert d.counts("apply", "o-1") == {"s1": 1, "s2": 1, "s3": 1}
    assert [s["name"] for s in d.app.steps("o-1")] == ["s1", "s2", "s3"]


def resume_under_version_2(d: Deploy, variant: str, keys: tuple[str, ...]) -> None:
    """Rewrite the module to version 2 and run a new worker until the jobs ``keys`` end."""
    d.write_module(VERSION_2[variant])
    v2 = d.worker("v2")
    wait_until(lambda: all(d.finished(k) for k in keys) or v2.poll() is not None, 90, "the jobs to end")
    assert v2.poll() is None, d.errors()
    v2.send_signal(signal.SIGTERM)
    assert v2.wait(30) == 0, d.errors()


def test_with_markers_the_recorded_run_keeps_its_old_steps_and_new_runs_take_the_new(deploy: Deploy) -> None:
    run_killed_under_version_1(deploy)
    deploy.order.enqueue("o-2", key="o-2")  # a run that starts under version 2
    resume_under_version_2(deploy, "patched", ("o-1", "o-2"))

    killed, fresh = deploy.app.get("o-1"), deploy.app.get("o-2")
    assert killed.state == State.SUCCEEDED, deploy.errors()
    # The recorded run: the old step 2 (it had gone past the marker), the new step 4 (it had not)
    assert killed.result == ["s1", "s2", "s3", "s4-new", "s5"]
    assert deploy.counts("call", "o-1") == {"s1": 1, "s2": 1, "s3": 1, "s4-new": 1, "s5": 1}
    assert deploy.counts("apply", "o-1") == deploy.counts("call", "o-1")
    assert [s["name"] for s in deploy.app.steps("o-1")] == ["s1", "s2", "s3", "patch:v2-s4", "s4-new", "s5"]
    assert killed.trace[0].outcome == "lost" and killed.trace[-1].outcome == "succeeded"
    assert [s["status"] for s in killed.trace[-1].detail["steps"]][:4] == ["restored", "old-path", "restored",
                                                                          "restored"]
    # A new run: every new path
    assert fresh.state == State.SUCCEEDED and fresh.result == ["s1", "s2-new", "s3", "s4-new", "s5"]
    assert deploy.counts("apply", "o-2") == {"s1": 1, "s2-new": 1, "s3": 1, "s4-new": 1, "s5": 1}


def test_rerun_policy_runs_the_new_code_from_the_first_difference(deploy: Deploy) -> None:
    run_killed_under_version_1(deploy)
    resume_under_version_2(deploy, "rerun", ("o-1",))

    job = deploy.app.get("o-1")
    assert job.state == State.SUCCEEDED, deploy.errors()
    assert job.result == ["s1", "s2", "audit", "s3", "s4", "s5"]
    # Steps 1 and 2 restored, never called again; step 3, forgotten, called again and applied once
    assert deploy.counts("call", "o-1") == {"s1": 1, "s2": 1, "audit": 1, "s3": 2, "s4": 1, "s5": 1}
    assert deploy.counts("apply", "o-1") == {"s1": 1, "s2": 1, "audit": 1, "s3": 1, "s4": 1, "s5": 1}
    [event] = [e for e in job.events if e.kind == "divergence"]
    assert event.detail["message"] == "step 3 is 'audit' in this run but 's3' in the recorded run"
    assert event.detail["forgotten"] == ["s3"] and event.actor == "worker"
    assert [s["name"] for s in deploy.app.steps("o-1")] == ["s1", "s2", "audit", "s3", "s4", "s5"]
    assert job.trace[-1].detail["steps"][:2] == [{"name": "s1", "status": "restored"},
                                                 {"name": "s2", "status": "restored"}]
    assert step_key("o-1", "s3") in {e["key"] for e in deploy.entries() if e["e"] == "apply"}


def test_default_policy_a_change_without_a_marker_is_a_dead_letter(deploy: Deploy) -> None:
    run_killed_under_version_1(deploy)
    resume_under_version_2(deploy, "dead", ("o-1",))

    job = deploy.app.get("o-1")
    assert job.state == State.DEAD and job.reason == "permanent" and job.error_type == "NonDeterminism"
    assert "step 3 is 'audit' in this run but 's3' in the recorded run" in job.error_message
    assert deploy.counts("call", "o-1") == {"s1": 1, "s2": 1, "s3": 1}  # nothing ran again
    assert [s["name"] for s in deploy.app.steps("o-1")] == ["s1", "s2", "s3"]  # nothing forgotten
    assert not [e for e in job.events if e.kind == "divergence"]
    pending = deploy.app.store.alert_pending(1000)  # type: ignore[attr-defined]
    assert [e.kind for e in pending if e.job_id == job.id] == ["dead_letter"]  # it pages, as before
