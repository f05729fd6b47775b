"""``firesafe rerun`` from the shell."""

from __future__ import annotations

import json

from click.testing import CliRunner

from firesafe import App, State
from firesafe.cli.main import cli
from firesafe.deadletters.audit import default_actor


def test_rerun_resume_from_step_and_errors(sqlite_url: str) -> None:
    app = App(sqlite_url)
    ran: list[str] = []

    @app.job(max_attempts=1)
    def flow(ctx) -> None:
        for name in ("a", "b", "c"):
            ctx.step(name, lambda name=name: ran.append(name))

    flow.enqueue(key="f")
    app.work(burst=True)
    runner = CliRunner()
    r = runner.invoke(cli, ["rerun", "f", "--from-step", "b", "--json", "--store", sqlite_url])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == {"key": "f", "state": "queued", "steps_kept": ["a"], "actor": default_actor(),
                                    "reason": None}
    app.work(burst=True)
    assert ran == ["a", "b", "c", "b", "c"] and app.get("f").state == State.SUCCEEDED
    r = runner.invoke(cli, ["rerun", "f", "--store", sqlite_url])
    assert r.exit_code == 0 and "steps kept (restored, not re-run): a, b, c" in r.output
    r = runner.invoke(cli, ["rerun", "f", "--store", sqlite_url])  # queued now: refused
    assert r.exit_code == 1 and "only a dead, cancelled or succeeded job can be rerun" in r.output
    assert "Traceback" not in r.output
    r = runner.invoke(cli, ["rerun", "nope", "--store", sqlite_url])
    assert r.exit_code == 1 and "no job with key 'nope'" in r.output
    app.close()


def test_show_lists_the_steps_each_attempt_ran_or_restored(sqlite_url: str) -> None:
    from firesafe import Backoff, FakeClock

    clock = FakeClock()
    app = App(sqlite_url, clock=clock)

    @app.job(max_attempts=2, backoff=Backoff(base=1.0, jitter="none"))
    def pay(ctx) -> None:
        ctx.step("charge", lambda: "ok")
        if ctx.job.attempt == 1:
            raise TimeoutError("email")
        ctx.step("email", lambda: "sent")

    pay.enqueue(key="p")
    app.work(burst=True)
    clock.advance(5)
    app.work(burst=True)
    r = CliRunner().invoke(cli, ["show", "p", "--store", sqlite_url])
    assert r.exit_code == 0, r.output
    assert "charge ran" in r.output and "charge restored, email ran" in r.output
    app.close()
