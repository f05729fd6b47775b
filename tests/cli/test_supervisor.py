"""The supervisor on its own, with tiny child programs: restarts, crash loops, forwarded signals.

A child program says it is ready the way ``firesafe worker`` does once its loop starts (``READY``);
one that never does is a child that cannot start."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from firesafe import Backoff
from firesafe.worker.supervisor import SUPERVISOR_PID_ENV, Supervisor
from tests.cli.conftest import wait_for

FAST = Backoff(base=0.01, factor=2.0, cap=0.05, jitter="none")
#: What a child program runs to say it is ready.
READY = "from firesafe.worker.supervisor import ready_notifier\nready_notifier()()\n"


def child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def runs(tmp_path: Path, script: str) -> list[str]:
    """A child program that counts its runs in a file and then runs ``script`` with ``run`` (1, 2, ...) set."""
    counter = tmp_path / "runs"
    return child(f"import os, signal, sys\nc = {str(counter)!r}\n"
                 "run = (len(open(c).read()) if os.path.exists(c) else 0) + 1\n"
                 "open(c, 'a').write('x')\n" + script)


def restart_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "firesafe.supervisor" and "restarting in" in r.message]


def test_a_child_that_fails_once_is_restarted_then_finishes(tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    program = child(f"import os, sys\nm = {str(marker)!r}\nif os.path.exists(m): sys.exit(0)\n"
                    "open(m, 'w').close(); sys.exit(5)")
    sup = Supervisor(program, 1, burst=True, restart_backoff=FAST)
    assert sup.run() == 0
    assert sup.slots[0].restarts == 1 and sup.slots[0].returncode == 0


def test_a_child_that_never_gets_ready_gives_up_and_fails(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "firesafe.supervisor")
    sup = Supervisor(child("import sys; sys.exit(4)"), 2, burst=True, restart_backoff=FAST, max_startup_failures=3)
    assert sup.run() == 1
    assert max(s.restarts for s in sup.slots) == 2
    assert all(s.proc is None and s.restart_at is None for s in sup.slots)  # nothing left running or pending
    assert "exited with code 4 before it was ready (1 of 3 in a row); restarting in 0.0s" in caplog.text
    assert "exited with code 4 before it was ready, 3 times in a row: giving up (a worker that cannot start" \
        in caplog.text


def test_a_child_that_dies_while_working_is_restarted_however_often_with_a_bounded_backoff(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given a child that says it is ready, then dies (as a job that kills its process makes it do),
    # 6 times in a row within a second of starting, far more than the startup failures allowed
    caplog.set_level(logging.INFO, "firesafe.supervisor")
    program = runs(tmp_path, READY + "if run <= 6: os._exit(1)\nsys.exit(0)\n")
    backoff = Backoff(base=0.1, factor=2.0, cap=0.4, jitter="none")
    sup = Supervisor(program, 1, burst=True, restart_backoff=backoff, max_startup_failures=2)

    # When it runs; Then it restarts it every time, waiting longer each time up to the cap, and the 7th run finishes
    assert sup.run() == 0
    assert sup.slots[0].restarts == 6 and sup.slots[0].returncode == 0 and sup.slots[0].crashes == 6
    assert [line.split("exited unexpectedly with ")[1] for line in restart_lines(caplog)] == [
        "code 1; restarting in 0.1s", "code 1; restarting in 0.2s", "code 1; restarting in 0.4s",
        "code 1; restarting in 0.4s", "code 1; restarting in 0.4s", "code 1; restarting in 0.4s"]
    assert "giving up" not in caplog.text


def test_a_child_killed_by_a_signal_while_working_is_restarted_and_a_long_life_resets_the_backoff(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "firesafe.supervisor")
    program = runs(tmp_path, READY + "if run <= 3: os.kill(os.getpid(), signal.SIGKILL)\nsys.exit(0)\n")
    backoff = Backoff(base=0.1, factor=2.0, cap=0.4, jitter="none")
    sup = Supervisor(program, 1, burst=True, restart_backoff=backoff, stable_after=0.0)  # every life counts as long
    assert sup.run() == 0
    assert [line.split("exited unexpectedly with ")[1] for line in restart_lines(caplog)] == [
        "signal 9 (SIGKILL); restarting in 0.1s"] * 3
    assert sup.slots[0].crashes == 1


def test_being_ready_clears_the_startup_failures(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given a child that alternately fails before it is ready and dies after it is ready, 2 startup
    # failures being the limit
    caplog.set_level(logging.INFO, "firesafe.supervisor")
    program = runs(tmp_path, "if run % 2: sys.exit(4)\n" + READY + "if run < 6: sys.exit(1)\nsys.exit(0)\n")
    sup = Supervisor(program, 1, burst=True, restart_backoff=FAST, max_startup_failures=2)

    # Then a failure to start never follows another: it never gives up, and the 6th run finishes
    assert sup.run() == 0
    assert sup.slots[0].restarts == 5
    assert [line.split("exited ")[1].split(";")[0] for line in restart_lines(caplog)] == [
        "with code 4 before it was ready (1 of 2 in a row)", "unexpectedly with code 1"] * 2 + [
        "with code 4 before it was ready (1 of 2 in a row)"]


def test_a_signal_during_a_restart_backoff_stops_without_restarting(tmp_path: Path) -> None:
    sup = Supervisor(child(READY + "import os; os._exit(1)"), 1,
                     restart_backoff=Backoff(base=60.0, factor=2.0, cap=60.0, jitter="none"))

    def stop_while_waiting() -> None:
        wait_for(lambda: sup.slots[0].restart_at is not None, what="the restart to be scheduled")
        sup.stop()

    stopper = threading.Thread(target=stop_while_waiting)
    stopper.start()
    started = time.monotonic()
    assert sup.run() == 1  # the child did not end cleanly
    stopper.join()
    assert time.monotonic() - started < 15
    assert sup.slots[0].restarts == 1 and sup.slots[0].proc is None and sup.slots[0].restart_at is None


def test_a_signal_is_forwarded_once_to_every_child_and_nothing_restarts(tmp_path: Path) -> None:
    program = child(
        "import os, signal, sys, time\n"
        f"d = {str(tmp_path)!r}\n"
        "slot = os.environ['FIRESAFE_WORKER_SLOT']\n"
        "got = []\n"
        "signal.signal(signal.SIGTERM, lambda *a: got.append(a[0]))\n"
        f"assert os.environ[{SUPERVISOR_PID_ENV!r}] == str(os.getppid())\n"
        "open(os.path.join(d, 'ready-' + slot), 'w').close()\n"
        "deadline = time.monotonic() + 20\n"
        "while not got and time.monotonic() < deadline: time.sleep(0.01)\n"
        "time.sleep(0.2)  # a second forwarded signal would arrive now\n"
        "open(os.path.join(d, 'signals-' + slot), 'w').write(str(len(got)))\n"
        "sys.exit(0 if got else 9)\n"
    )
    sup = Supervisor(program, 3, restart_backoff=FAST)

    def send_when_ready() -> None:
        wait_for(lambda: len(list(tmp_path.glob("ready-*"))) == 3, what="three children")
        os.kill(os.getpid(), signal.SIGTERM)  # to the supervisor, through its real handler

    sender = threading.Thread(target=send_when_ready)
    sender.start()
    assert sup.run() == 0
    sender.join()
    assert [(tmp_path / f"signals-{i}").read_text() for i in (1, 2, 3)] == ["1", "1", "1"]
    assert all(s.restarts == 0 for s in sup.slots)
    assert signal.getsignal(signal.SIGTERM) is not sup._on_signal  # handlers restored


def test_a_process_group_runs_while_a_live_member_is_in_it_and_not_once_only_zombies_are_left() -> None:
    import subprocess

    from firesafe.worker.supervisor import _group_runs, _proc_stat

    member = subprocess.Popen(["sleep", "30"], process_group=0)  # a group of its own, led by it
    try:
        assert _group_runs(member.pid)
        member.kill()
        wait_for(lambda: _proc_stat(member.pid)[0] == "Z", 5, "the member to be a zombie")
        assert not _group_runs(member.pid)  # a zombie, not yet reaped: nothing of the group runs
    finally:
        member.kill()
        member.wait()
    assert not _group_runs(member.pid)  # reaped: the group is gone


def test_children_gone_have_their_leases_ended_one_after_the_other_on_one_thread(tmp_path: Path) -> None:
    # Given a child that says it is ready, then dies 3 times (a clean end the 4th time), and an
    # on_gone that records where and for whom it is called
    seen = tmp_path / "seen"
    note = f"tag = os.environ['FIRESAFE_WORKER_TAG']\nopen({str(seen)!r}, 'a').write(f'{{os.getpid()}}:{{tag}}.\\n')\n"
    program = runs(tmp_path, READY + note + "if run <= 3: os._exit(1)\nsys.exit(0)\n")
    calls: list[tuple[int, str]] = []
    details: list[dict[str, Any]] = []

    def on_gone(prefix: str, detail: dict[str, Any]) -> int:
        calls.append((threading.get_ident(), prefix))
        details.append(detail)
        return 1

    sup = Supervisor(program, 1, burst=True, restart_backoff=FAST, on_gone=on_gone, subreaper=False)
    assert sup.run() == 0

    # Then on_gone ran once per death (not for the clean end), all on one thread that has ended,
    # each time for the prefix of that child's worker ids (its own tag: no two alike)
    assert len(calls) == 3 and len({t for t, _ in calls}) == 1 and threading.get_ident() not in {t for t, _ in calls}
    children = seen.read_text().split()  # "<pid>:<tag>." of each run
    assert len(children) == 4 and len(set(children)) == 4
    assert [p.split(":", 1)[1] for _, p in calls] == children[:3]
    assert details == [{"process": 1, "pid": int(c.split(":")[0]), "exit": "code 1"} for c in children[:3]]
    assert sup._ender is not None and not sup._ender.is_alive()


def test_an_unexpected_clean_exit_while_working_has_its_leases_ended_too(tmp_path: Path) -> None:
    # Given a child that says it is ready and then exits 0 while nothing asked it to stop (a job's
    # os._exit(0)), then, restarted, works until it is stopped
    working = tmp_path / "working"
    program = runs(tmp_path, READY + "if run == 1: os._exit(0)\n"
                   "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
                   f"open({str(working)!r}, 'w').close()\nimport time\ntime.sleep(30)\n")
    calls: list[str] = []
    sup = Supervisor(program, 1, restart_backoff=FAST, on_gone=lambda prefix, detail: calls.append(prefix) or 0,
                     subreaper=False)

    def stop_after_the_call() -> None:
        deadline = time.monotonic() + 15
        while not (calls and working.exists()) and time.monotonic() < deadline:
            time.sleep(0.02)
        sup.stop()

    stopper = threading.Thread(target=stop_after_the_call)
    stopper.start()
    sup.run()
    stopper.join()
    # Then on_gone ran for it, and not for the restarted child, which a signal stopped
    assert len(calls) == 1


ORPHANS = """
import os, subprocess, sys, time
from firesafe.worker.supervisor import ready_notifier
ready_notifier()()
d = {d!r}
if os.environ["FIRESAFE_WORKER_SLOT"] == "1":  # lives on, leaving a process to its supervisor in its own group
    subprocess.run(["sh", "-c", "sleep 30 & echo $! > " + os.path.join(d, "live-orphan")], check=True)
    time.sleep(6)
    sys.exit(0)
if not os.path.exists(os.path.join(d, "died")):  # dies once, leaving a 1 s process in a session of its own
    open(os.path.join(d, "died"), "w").close()
    orphan = subprocess.Popen(["sleep", "1"], start_new_session=True)
    open(os.path.join(d, "dead-orphan"), "w").write(str(orphan.pid))
    os._exit(1)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="child subreapers are a Linux feature")
def test_as_a_subreaper_it_waits_for_what_a_dead_child_left_reaps_it_and_ignores_a_live_childs(
        tmp_path: Path) -> None:
    from firesafe.worker.supervisor import _proc_stat

    # Given two children: one that lives 6 s and leaves a 30 s process behind in its own group, one
    # that dies at once and leaves a 1 s process behind in a session of its own
    seen: list[tuple[str | None, str | None]] = []

    def on_gone(prefix: str, detail: dict[str, Any]) -> int:  # where the two processes left behind are then
        seen.append(tuple(_proc_stat(int((tmp_path / f).read_text()))[0] for f in ("dead-orphan", "live-orphan")))
        return 0

    sup = Supervisor(child(ORPHANS.format(d=str(tmp_path))), 2, burst=True, restart_backoff=FAST, on_gone=on_gone)
    try:
        assert sup.run() == 0
    finally:
        live = int((tmp_path / "live-orphan").read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(live, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(live, 0)  # handed to this process while it was the subreaper
    # Then on_gone ran once the dead child's process had ended and been reaped (not a zombie), while
    # the live child's, which it ignored, still ran; and the subreaper is this process no more
    assert len(seen) == 1 and seen[0][0] is None and seen[0][1] not in (None, "Z"), seen
    assert not sup._subreaper
