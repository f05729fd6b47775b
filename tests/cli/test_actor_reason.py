"""Every command that changes jobs or settings records who (--actor, else $FIRESAFE_ACTOR, else
user@host) and why (--reason), visible in `show --json`, `limiters events`, `audit` and --json. Both stores."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from firesafe import App
from firesafe.cli.main import cli


def run(*args: str, env: dict[str, str] | None = None) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, env=env)


@pytest.fixture
def dead(store_url: str) -> Iterator[App]:
    app = App(store_url)

    @app.job(max_attempts=1)
    def pay(ctx, n: int) -> None:
        raise RuntimeError("down")

    for i in range(4):
        pay.enqueue(i, key=f"pay:{i}")
    app.work(burst=True)
    pay.enqueue(9, key="pay:waiting", delay=3600)
    yield app
    app.close()


def last_event(url: str, key: str) -> dict:
    shown = json.loads(run("show", key, "--json", "--store", url).stdout)
    return shown["events"][-1]


def test_job_commands_record_the_actor_and_reason_from_flags(dead: App) -> None:
    url = dead.store_url
    replayed = run("dlq", "replay", "pay:0", "--actor", "alice", "--reason", "provider fixed", "--store", url)
    assert replayed.exit_code == 0
    assert run("dlq", "discard", "pay:1", "--actor", "bob", "--reason", "refunded\x1b[31m by hand",
               "--store", url).exit_code == 0
    assert run("cancel", "pay:waiting", "--actor", "carol", "--reason", "customer asked", "--store", url).exit_code == 0
    assert run("rerun", "pay:1", "--actor", "dan", "--reason", "try once more", "--store", url).exit_code == 0
    assert {k: last_event(url, "pay:0")[k] for k in ("kind", "actor")} == {"kind": "replayed", "actor": "alice"}
    assert last_event(url, "pay:0")["detail"]["reason"] == "provider fixed"
    discarded = json.loads(run("show", "pay:1", "--json", "--store", url).stdout)["events"]
    assert [(e["kind"], e["actor"], e["detail"]["reason"]) for e in discarded] == [
        ("discarded", "bob", "refunded\\x1b[31m by hand"), ("rerun", "dan", "try once more")]
    cancelled = last_event(url, "pay:waiting")
    assert (cancelled["kind"], cancelled["actor"], cancelled["detail"]["reason"]) == ("cancelled", "carol",
                                                                                      "customer asked")
    table = run("show", "pay:1", "--store", url).output
    assert "bob" in table and "refunded\\x1b[31m by hand" in table and "\x1b[31m" not in table


def test_the_actor_comes_from_firesafe_actor(dead: App) -> None:
    url = dead.store_url
    env = {"FIRESAFE_ACTOR": "oncall-eve"}
    result = run("dlq", "replay", "pay:2", "pay:3", "--yes", "--reason", "batch", "--json", "--store", url, env=env)
    assert json.loads(result.stdout)["actor"] == "oncall-eve"
    assert last_event(url, "pay:3")["actor"] == "oncall-eve"
    assert json.loads(run("cancel", "pay:waiting", "--json", "--store", url, env=env).stdout)["actor"] == "oncall-eve"
    assert last_event(url, "pay:waiting")["actor"] == "oncall-eve"
    assert run("dlq", "replay", "pay:0", "--actor", "", "--store", url).exit_code == 2  # empty: a usage error


def test_purge_is_recorded_in_the_audit_log(dead: App) -> None:
    url = dead.store_url
    done = run("dlq", "purge", "--older-than", "0s", "--yes", "--reason", "retention", "--json", "--store", url,
               env={"FIRESAFE_ACTOR": "janitor"})
    assert json.loads(done.stdout)["count"] == 4
    entries = json.loads(run("audit", "--json", "--store", url).stdout)
    assert [(e["action"], e["actor"], e["reason"], e["detail"]["deleted"]) for e in entries] == [
        ("dlq_purge", "janitor", "retention", 4)]


def test_limiter_pause_and_resume_record_who_and_why(store_url: str) -> None:
    app = App(store_url)
    app.limiter("psp", rate=5)

    @app.job(limiter="psp")
    def charge(ctx) -> None:
        return None

    charge.enqueue(key="c:1")
    app.work(burst=True)  # the worker records the limiters its app declares
    url = app.store_url
    assert run("limiters", "pause", "psp", "--for", "10m", "--actor", "alice", "--reason", "incident 42",
               "--store", url).exit_code == 0
    assert run("limiters", "resume", "psp", "--reason", "provider back", "--store", url,
               env={"FIRESAFE_ACTOR": "bob"}).exit_code == 0
    found = json.loads(run("limiters", "events", "--limiter", "psp", "--json", "--store", url).stdout)
    assert [(e["kind"], e["actor"], e["detail"].get("reason")) for e in found][-2:] == [
        ("paused", "alice", "incident 42"), ("resumed", "bob", "provider back")]
    app.close()


def test_schedules_pause_resume_and_backfill_record_who_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  store_url: str) -> None:
    source = '''
from firesafe import App
app = App({url!r})

@app.schedule("0 * * * *", name="hourly")
def hourly(ctx, window):
    return None
'''
    name = f"fs_sched_actor_{uuid.uuid4().hex[:8]}"  # a module of its own per store: imports are cached
    (tmp_path / f"{name}.py").write_text(source.format(url=store_url))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    target = f"{name}:app"
    assert run("migrate", "--store", store_url).exit_code == 0
    paused = run("schedules", "pause", target, "hourly", "--actor", "alice", "--reason", "maintenance", "--json")
    assert json.loads(paused.stdout)["actor"] == "alice"
    resumed = run("schedules", "resume", target, "hourly", "--reason", "done", env={"FIRESAFE_ACTOR": "bob"})
    assert resumed.exit_code == 0
    entries = json.loads(run("audit", "--json", "--store", store_url).stdout)
    assert [(e["action"], e["subject"], e["actor"], e["reason"]) for e in entries] == [
        ("schedule_resume", "hourly", "bob", "done"), ("schedule_pause", "hourly", "alice", "maintenance")]
    result = run("backfill", target, "hourly", "--from", "2024-05-01T00:00", "--to", "2024-05-01T03:00", "--yes",
                 "--actor", "carol", "--reason", "replay outage")
    assert result.exit_code == 0, result.output
    app = App(store_url)
    started = [e for e in app.store.schedule_event_list(name="hourly") if e.kind == "backfill_started"]
    assert started and (started[-1].detail["actor"], started[-1].detail["reason"]) == ("carol", "replay outage")
    app.close()


def test_python_apis_take_actor_and_reason(dead: App) -> None:
    dead.dlq.replay(["pay:0"], actor="api", reason="from code")
    dead.cancel("pay:waiting", actor="api", reason="not needed")
    assert [(e.actor, e.detail.get("reason")) for e in dead.get("pay:0").events] == [("api", "from code")]
    assert [(e.actor, e.detail.get("reason")) for e in dead.get("pay:waiting").events] == [("api", "not needed")]
