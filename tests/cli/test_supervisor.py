"""The supervisor on its own, with tiny child programs: restarts, crash loops, forwarded signals."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from firesafe import Backoff
from firesafe.worker.supervisor import SUPERVISOR_PID_ENV, Supervisor
from tests.cli.conftest import wait_for

FAST = Backoff(base=0.01, factor=2.0, cap=0.05, jitter="none")


def child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_child_that_fails_once_is_restarted_then_finishes(tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    program = child(f"import os, sys\nm = {str(marker)!r}\nif os.path.exists(m): sys.exit(0)\n"
                    "open(m, 'w').close(); sys.exit(5)")
    sup = Supervisor(program, 1, burst=True, restart_backoff=FAST)
    assert sup.run() == 0
    assert sup.slots[0].restarts == 1 and sup.slots[0].returncode == 0


def test_a_crash_loop_gives_up_and_fails(tmp_path: Path) -> None:
    sup = Supervisor(child("import sys; sys.exit(4)"), 2, burst=True, restart_backoff=FAST, max_quick_failures=3)
    assert sup.run() == 1
    assert max(s.restarts for s in sup.slots) == 2
    assert all(s.proc is None and s.restart_at is None for s in sup.slots)  # nothing left running or pending


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
