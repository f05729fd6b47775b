"""`python -m firesafe worker` as real processes: burst, JSON logs, several processes, signals, bad stores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from firesafe import App
from tests.cli.conftest import AppModule, run_cli, start_cli, wait_for, write_app


def enqueue_adds(appmod: AppModule, n: int) -> list[str]:
    module = appmod.load()
    jobs = module.add.enqueue_many([{"args": [i, i], "key": f"add:{i}"} for i in range(n)])
    module.app.close()
    return [j.key for j in jobs]


def states(url: str) -> dict[str, str]:
    app = App(url, auto_migrate=False)
    try:
        return {j.key: str(j.state) for j in app.jobs_list(limit=10_000)}
    finally:
        app.close()


def test_a_queue_no_declared_job_uses_is_a_warning(appmod: AppModule) -> None:
    proc = run_cli(["worker", appmod.target, "--queues", "default,nosuchq", "--burst"], appmod.dir)
    assert proc.returncode == 0, proc.stderr
    assert f"no job of {appmod.target} is declared on queue(s) nosuchq (declared: " in proc.stderr
    assert "default" not in proc.stderr.split("declared on queue(s)")[1].split("(declared")[0]


def test_burst_worker_runs_everything_and_logs_json_lines(appmod: AppModule) -> None:
    keys = enqueue_adds(appmod, 5)
    module = appmod.load()
    module.charge.enqueue("bad-1", api_key="sk-live-777", key="charge:bad")
    module.app.close()
    proc = run_cli(["worker", appmod.target, "--burst", "--wait-scheduled", "--log-format", "json"], appmod.dir)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stderr.splitlines()]  # every line is one JSON object
    assert all({"timestamp", "level", "logger", "message"} <= set(r) for r in lines)
    attempts = [r for r in lines if "job_key" in r]
    assert sorted(r["job_key"] for r in attempts if r["outcome"] == "succeeded") == sorted(keys)
    assert [r["state"] for r in attempts if r["job_key"] == "charge:bad"] == ["scheduled", "dead"]
    assert all(r["level"] == "INFO" and r["logger"] == "firesafe.worker" and r["duration"] >= 0 for r in attempts)
    assert "sk-live-777" not in proc.stderr
    assert sorted(appmod.effects()) == sorted(keys)
    assert states(appmod.url) == {**dict.fromkeys(keys, "succeeded"), "charge:bad": "dead"}


def test_two_processes_in_burst_do_every_job_exactly_once(appmod: AppModule) -> None:
    keys = enqueue_adds(appmod, 60)
    proc = run_cli(["worker", appmod.target, "--processes", "2", "--concurrency", "2", "--prefetch", "3", "--burst"],
                   appmod.dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("firesafe.supervisor: worker process") >= 4  # 2 started, 2 finished
    lines = [line for line in proc.stderr.splitlines() if "worker " in line and " started: queues=" in line]
    assert len({line.split("[")[1].split("]")[0] for line in lines}) == 2  # two child processes, each its own pid
    assert all("concurrency=2 prefetch=3" in line for line in lines)  # the options reach every child
    effects = appmod.effects()
    assert sorted(effects) == sorted(keys) and len(effects) == len(set(effects)) == 60
    assert set(states(appmod.url).values()) == {"succeeded"}


def test_lanes_reach_every_child_and_each_loop_claims(appmod: AppModule) -> None:
    keys = enqueue_adds(appmod, 60)
    proc = run_cli(["worker", appmod.target, "--processes", "2", "--concurrency", "4", "--lanes", "2", "--burst"],
                   appmod.dir)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if " started: queues=" in line]
    assert len(lines) == 4 and all("concurrency=2" in line for line in lines)  # 2 processes x 2 loops of 2
    assert sum("lane=1/2" in line for line in lines) == sum("lane=2/2" in line for line in lines) == 2
    effects = appmod.effects()
    assert sorted(effects) == sorted(keys) and len(effects) == len(set(effects)) == 60
    bad = run_cli(["worker", appmod.target, "--lanes", "0", "--burst"], appmod.dir)
    assert bad.returncode == 2 and "--lanes" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("grace, outcome, lanes", [("30s", "succeeded", "1"), ("0.2", "interrupted", "1"),
                                                   ("30s", "succeeded", "2")])
def test_sigterm_finishes_or_releases_the_running_job(appmod: AppModule, grace: str, outcome: str,
                                                      lanes: str) -> None:
    module = appmod.load()
    seconds = 0.6 if outcome == "succeeded" else 30.0
    module.slow.enqueue("s1", seconds, key="slow:1")
    module.app.close()
    log = appmod.dir / "worker.log"
    proc = start_cli(["worker", appmod.target, "--grace", grace, "--lanes", lanes], appmod.dir, log)
    try:
        wait_for(lambda: (appmod.dir / "s1.started").exists(), what="the job to start")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    app = App(appmod.url, auto_migrate=False)
    job = app.get("slow:1")
    app.close()
    assert job.state != "running" and job.trace[-1].outcome == outcome
    if outcome == "succeeded":
        assert job.state == "succeeded" and appmod.effects() == ["slow:1"]
    else:
        assert job.state == "scheduled" and job.attempt == 0 and appmod.effects() == []  # given back, no attempt used
    assert "Traceback" not in log.read_text()


def test_sigterm_to_the_supervisor_stops_every_child_cleanly(appmod: AppModule) -> None:
    module = appmod.load()
    module.slow.enqueue("s2", 0.5, key="slow:2")
    module.app.close()
    log = appmod.dir / "supervisor.log"
    proc = start_cli(["worker", appmod.target, "--processes", "2"], appmod.dir, log)
    try:
        wait_for(lambda: (appmod.dir / "s2.started").exists()
                 and log.read_text().count(" started: queues=") == 2, what="both children and the job")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    pids = [int(line.split("(pid ")[1].split(")")[0]) for line in text.splitlines() if "started (pid " in line]
    assert len(pids) == 2 and text.count("exited with code 0") == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert states(appmod.url) == {"slow:2": "succeeded"} and appmod.effects() == ["slow:2"]


def test_supervisor_restarts_a_child_that_died(tmp_path: Path) -> None:
    appmod = write_app(tmp_path, f"sqlite:///{tmp_path}/firesafe.db", lease=1.0)
    module = appmod.load()
    module.crash_once.enqueue(key="crash:1")
    module.app.close()
    proc = run_cli(["worker", appmod.target, "--processes", "2", "--burst", "--wait-scheduled"], appmod.dir)
    assert proc.returncode == 0, proc.stderr
    assert "exited unexpectedly with code 3; restarting in 0.5s" in proc.stderr
    app = App(appmod.url, auto_migrate=False)
    job = app.get("crash:1")
    app.close()
    assert job.state == "succeeded" and [a.outcome for a in job.trace] == ["lost", "succeeded"]
    assert appmod.effects() == ["crash:1"]


POISON_APP = """
import os
from pathlib import Path

from firesafe import App, Backoff

HERE = Path({here!r})
app = App({url!r}, lease=1.0)
SOON = Backoff(base=0.05, factor=2.0, cap=0.2, jitter="none")


@app.job(backoff=SOON)
def quick(ctx, n: int) -> int:
    with open(HERE / "effects.log", "a") as f:
        f.write(ctx.job.key + "\\n")
    return n


@app.job(backoff=SOON)
def poison(ctx) -> None:
    os._exit(1)  # takes its worker process down, every time
"""


@pytest.mark.slow
def test_jobs_that_kill_their_process_go_dead_and_the_supervisor_keeps_the_others_flowing(tmp_path: Path) -> None:
    # Given 2 jobs that kill the process running them, claimed first, then 20 ordinary ones
    url = f"sqlite:///{tmp_path}/firesafe.db"
    (tmp_path / "poisonapp.py").write_text(POISON_APP.format(here=str(tmp_path), url=url))
    appmod = AppModule(tmp_path, "poisonapp", url)
    module = appmod.load()
    module.poison.enqueue_many([{"key": f"poison:{i}"} for i in range(2)])
    module.quick.enqueue_many([{"args": [i], "key": f"quick:{i}"} for i in range(20)])
    module.app.close()

    # When two supervised processes of one thread each drain them (each restarted child claims the
    # next poison job and dies within a second, as long as some are fresh)
    started = time.monotonic()
    proc = run_cli(["worker", appmod.target, "--processes", "2", "--concurrency", "1", "--burst", "--wait-scheduled"],
                   appmod.dir, timeout=90)
    took = time.monotonic() - started

    # Then the supervisor restarts the dying children instead of giving up, every ordinary job runs
    # once, and every poison job is dead-lettered as worker_lost
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "giving up" not in proc.stderr
    # more than the 5 deaths in a row that used to end it
    assert proc.stderr.count("exited unexpectedly with code 1; restarting in") >= 6
    app = App(url, auto_migrate=False)
    try:
        jobs = {j.key: j for j in app.jobs_list(limit=100)}
        poison = {k: (str(j.state), app.get(k).reason) for k, j in jobs.items() if k.startswith("poison:")}
    finally:
        app.close()
    assert poison == dict.fromkeys((f"poison:{i}" for i in range(2)), ("dead", "worker_lost"))
    quick = [f"quick:{i}" for i in range(20)]
    assert {k: str(jobs[k].state) for k in quick} == dict.fromkeys(quick, "succeeded")
    assert sorted(appmod.effects()) == sorted(quick)  # each ran to its end once
    assert took < 60


def test_the_supervisor_gives_up_on_worker_processes_that_cannot_start(tmp_path: Path) -> None:
    # Given an app that imports in the supervisor but fails to import in its worker processes
    appmod = write_app(tmp_path, f"sqlite:///{tmp_path}/firesafe.db")
    source = tmp_path / f"{appmod.name}.py"
    source.write_text(source.read_text() + "\nif os.environ.get('FIRESAFE_SUPERVISOR_PID'):\n"
                      "    raise RuntimeError('this app cannot start in a worker process')\n")
    proc = run_cli(["worker", appmod.target, "--processes", "2"], appmod.dir, timeout=60)
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert "exited with code 1 before it was ready (1 of 5 in a row); restarting in 0.5s" in proc.stderr
    assert "exited with code 1 before it was ready, 5 times in a row: giving up" in proc.stderr
    assert "this app cannot start in a worker process" in proc.stderr
    assert "exited unexpectedly" not in proc.stderr


def test_a_corrupt_store_gives_a_clear_error_and_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "firesafe.db").write_bytes(b"garbage, not SQLite " * 200)
    appmod = write_app(tmp_path, f"sqlite:///{tmp_path}/firesafe.db")
    for args in (["worker", appmod.target, "--burst"], ["jobs", "--store", appmod.url],
                 ["worker", appmod.target, "--burst", "--processes", "2"]):
        proc = run_cli(args, tmp_path)
        assert proc.returncode == 1, args
        assert "Traceback" not in proc.stderr and "not a usable firesafe SQLite store" in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("error: ")


def test_unknown_store_url_and_unknown_key_from_the_shell(appmod: AppModule) -> None:
    proc = run_cli(["stats", "--store", "mysql://localhost/db"], appmod.dir)
    assert proc.returncode == 1 and proc.stderr.startswith("error: unknown store URL 'mysql://localhost/db'")
    assert run_cli(["migrate", "--store", appmod.url], appmod.dir).returncode == 0
    proc = run_cli(["show", "missing-key"], appmod.dir, FIRESAFE_STORE=appmod.url)
    assert proc.returncode == 1 and proc.stderr == "error: no job with key 'missing-key'\n" and proc.stdout == ""


def test_a_negative_prefetch_is_refused_before_anything_runs(appmod: AppModule) -> None:
    enqueue_adds(appmod, 1)
    proc = run_cli(["worker", appmod.target, "--burst", "--prefetch", "-1"], appmod.dir)
    assert proc.returncode == 2 and "Invalid value for '--prefetch'" in proc.stderr
    assert "Traceback" not in proc.stderr and appmod.effects() == []


def test_bulk_replay_on_a_terminal_asks_first(appmod: AppModule) -> None:
    module = appmod.load()
    module.charge.enqueue_many([{"kwargs": {"order_id": f"bad-{i}", "api_key": "k"}, "key": f"c:{i}"} for i in (1, 2)])
    module.app.work(burst=True, wait_scheduled=True)
    module.app.close()
    for answer, code in (("n", 1), ("y", 0)):
        controller, terminal = os.openpty()
        try:
            os.write(controller, f"{answer}\n".encode())
            proc = subprocess.run([sys.executable, "-m", "firesafe", "dlq", "replay", "--job", "charge", "--store",
                                   appmod.url], stdin=terminal, capture_output=True, text=True, timeout=30,
                                  cwd=appmod.dir, env={**os.environ, "FIRESAFE_ACTOR": "ops-ann"})
        finally:
            os.close(terminal)
            os.close(controller)
        assert proc.returncode == code, proc.stderr
        assert "Replay 2 job(s)? [y/N]" in proc.stderr
        if answer == "n":
            assert "not confirmed; nothing changed" in proc.stderr
            assert set(states(appmod.url).values()) == {"dead"}
    assert proc.stdout.strip() == "replayed 2 job(s) as ops-ann" and set(states(appmod.url).values()) == {"queued"}


def test_children_stop_gracefully_when_the_supervisor_is_killed(appmod: AppModule) -> None:
    log = appmod.dir / "supervisor.log"
    proc = start_cli(["worker", appmod.target, "--processes", "2"], appmod.dir, log)
    try:
        wait_for(lambda: log.read_text().count(" started: queues=") == 2, what="both children")
    finally:
        proc.kill()
        proc.wait()
    wait_for(lambda: log.read_text().count(" stopped: {") == 2, timeout=15, what="both children to stop")
    assert log.read_text().count(f"supervisor (pid {proc.pid}) is gone: stopping this worker") == 2


DIE_ONCE_APP = """
import os
import subprocess
from pathlib import Path

from firesafe import App, Backoff

HERE = Path({here!r})
app = App({url!r}, lease=60.0)  # far longer than the test may take: only an ended lease lets it finish


@app.job(backoff=Backoff(base=0.05, factor=2.0, cap=0.2, jitter="none"))
def die_once(ctx, orphan: float = 0.0, own_session: bool = False) -> None:
    marker = HERE / (ctx.job.key + ".died")
    if not marker.exists():
        marker.write_text("")
        if orphan:  # a process of its own, left running (in the worker's process group, or not)
            subprocess.Popen(["sleep", str(orphan)], start_new_session=own_session)
        os._exit(1)  # takes its worker process down, with the attempt under its 60 s lease
    with open(HERE / "effects.log", "a") as f:
        f.write(ctx.job.key + "\\n")
"""


def run_die_once(tmp_path: Path, url: str, orphan: float = 0.0,
                 own_session: bool = False) -> tuple[subprocess.CompletedProcess[str], Any]:
    (tmp_path / "dieapp.py").write_text(DIE_ONCE_APP.format(here=str(tmp_path), url=url))
    appmod = AppModule(tmp_path, "dieapp", url)
    module = appmod.load()
    module.die_once.enqueue(orphan, own_session, key="die:1")
    module.app.close()
    # Without the supervisor ending its lease the job would be rescued after 60 s: past the timeout
    proc = run_cli(["worker", appmod.target, "--processes", "2", "--concurrency", "1", "--burst", "--wait-scheduled"],
                   appmod.dir, timeout=45)
    app = App(url, auto_migrate=False)
    try:
        return proc, app.get("die:1")
    finally:
        app.close()


def test_a_supervised_process_that_dies_has_its_attempts_rescued_before_their_leases_run_out(
        tmp_path: Path, store_url: str) -> None:
    proc, job = run_die_once(tmp_path, store_url)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "exited with code 1 during 1 attempt(s): their leases are ended so that they are rescued now" in proc.stderr
    assert job.state == "succeeded" and [a.outcome for a in job.trace] == ["lost", "succeeded"]
    lost = job.trace[0]
    assert lost.ended_at is not None and (lost.ended_at - lost.started_at).total_seconds() < 30  # lease: 60 s
    assert (tmp_path / "effects.log").read_text() == "die:1\n"
    # and its events say which process ended how (the supervisor's own words)
    [ended] = [e for e in job.events if e.kind == "lease_ended"]
    assert ended.actor == "supervisor" and ended.detail["exit"] == "code 1" and ended.detail["process"] in (1, 2)
    assert lost.worker and lost.worker.split(":")[1] == str(ended.detail["pid"])


@pytest.mark.skipif(sys.platform != "linux", reason="the supervisor finds orphans as a child subreaper (Linux)")
@pytest.mark.parametrize("own_session", [False, True], ids=["in its group", "in a session of its own"])
def test_the_leases_of_a_dead_process_end_only_once_the_processes_it_started_have_exited(
        tmp_path: Path, sqlite_url: str, own_session: bool) -> None:
    # Given a job that starts a 3 s process (in its worker's process group, or in a new session that
    # leaves it), then kills the worker
    proc, job = run_die_once(tmp_path, sqlite_url, orphan=3.0, own_session=own_session)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "exited but processes it started may still run (pids " in proc.stderr  # handed to the supervisor
    assert "their leases are ended so that they are rescued now" in proc.stderr
    # Then its attempt was rescued after the process it left had exited, long before the lease ran out
    assert job.state == "succeeded" and [a.outcome for a in job.trace] == ["lost", "succeeded"]
    lost = job.trace[0]
    assert lost.ended_at is not None and 3 <= (lost.ended_at - lost.started_at).total_seconds() < 30
