"""Several worker processes from one command (``firesafe worker --processes N``).

The supervisor starts N children (each ``python -m firesafe worker ... --processes 1``), forwards
SIGTERM/SIGINT to them, restarts a child that dies unexpectedly (with backoff) and returns once every
child has exited after a signal or, in burst mode, once every child has finished.

Children run in their own process group, so Ctrl-C in a terminal reaches them once, through the
supervisor; they watch their parent and stop gracefully if the supervisor disappears. A child that
keeps dying within seconds of starting (a crash loop) makes the supervisor stop everything and fail.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from firesafe.retries.backoff import Backoff

log = logging.getLogger("firesafe.supervisor")

#: Environment variable telling a child which process supervises it.
SUPERVISOR_PID_ENV = "FIRESAFE_SUPERVISOR_PID"


@dataclass
class _Slot:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restart_at: float | None = None
    quick_failures: int = 0  # consecutive exits within min_uptime of starting
    restarts: int = 0
    finished: bool = False
    returncode: int | None = None


class Supervisor:
    """Keeps ``processes`` copies of ``command`` running until told to stop.

    Guarantees: each signal it receives is forwarded exactly once to every live child (the first
    asks for a graceful stop, a second makes them exit at once); no child is restarted after a
    signal; it returns only when no child is left running.
    """

    def __init__(self, command: Sequence[str], processes: int, *, burst: bool = False,
                 env: Mapping[str, str] | None = None, restart_backoff: Backoff | None = None,
                 min_uptime: float = 5.0, max_quick_failures: int = 5, check_interval: float = 1.0) -> None:
        if processes < 1:
            raise ValueError("processes must be >= 1")
        self.command = list(command)
        self.processes = processes
        self.burst = burst
        self.env = dict(os.environ if env is None else env)
        self.restart_backoff = restart_backoff or Backoff(base=0.5, factor=2.0, cap=30.0, jitter="none")
        self.min_uptime = min_uptime
        self.max_quick_failures = max_quick_failures
        self.check_interval = check_interval
        self.slots = [_Slot(i + 1) for i in range(processes)]
        # Signal handlers only append to a list and write a byte to this pipe: taking a lock in a
        # handler (threading.Event.set) can deadlock against the same lock held by the main thread.
        self._wake_r = self._wake_w = -1
        self._received: list[int] = []  # signals received, not yet forwarded
        self._stopping = False
        self._failed = False

    # -- signals ---------------------------------------------------------------------------------
    def _poke(self) -> None:
        if self._wake_w >= 0:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._wake_w, b"\0")

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._received.append(signum)
        self._poke()

    def _on_child(self, signum: int, frame: Any) -> None:
        self._poke()

    def _sleep(self, timeout: float) -> None:
        """Wait until a signal, a child's exit or ``timeout``, whichever comes first."""
        ready, _, _ = select.select([self._wake_r], [], [], timeout)
        if ready:
            with contextlib.suppress(BlockingIOError, OSError):
                while os.read(self._wake_r, 4096):
                    pass

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask every child to stop, as if the supervisor had received ``signum`` (any thread may call it)."""
        self._received.append(signum)
        self._poke()

    # -- children ----------------------------------------------------------------------------------
    def _start(self, slot: _Slot) -> None:
        env = dict(self.env)
        env[SUPERVISOR_PID_ENV] = str(os.getpid())
        env["FIRESAFE_WORKER_SLOT"] = str(slot.index)
        slot.proc = subprocess.Popen(self.command, env=env, process_group=0)
        slot.started = time.monotonic()
        slot.restart_at = None
        slot.returncode = None
        log.info("worker process %d/%d started (pid %d)", slot.index, self.processes, slot.proc.pid,
                 extra={"slot": slot.index, "child_pid": slot.proc.pid})

    def _forward(self, signum: int) -> None:
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is None:
                try:
                    slot.proc.send_signal(signum)
                except ProcessLookupError:
                    pass

    def _begin_stop(self, signum: int, why: str) -> None:
        if not self._stopping:
            log.info("%s: stopping %d worker process(es)", why, sum(s.proc is not None for s in self.slots))
        self._stopping = True
        for slot in self.slots:
            slot.restart_at = None
        self._forward(signum)

    def _reap(self, slot: _Slot) -> None:
        assert slot.proc is not None
        code = slot.proc.returncode
        pid = slot.proc.pid
        uptime = time.monotonic() - slot.started
        slot.proc = None
        slot.returncode = code
        if self._stopping:
            log.info("worker process %d (pid %d) exited with code %s", slot.index, pid, code,
                     extra={"slot": slot.index, "child_pid": pid, "returncode": code})
            slot.finished = True
            return
        if self.burst and code == 0:
            log.info("worker process %d (pid %d) finished", slot.index, pid,
                     extra={"slot": slot.index, "child_pid": pid, "returncode": code})
            slot.finished = True
            return
        slot.quick_failures = slot.quick_failures + 1 if uptime < self.min_uptime else 1
        if slot.quick_failures >= self.max_quick_failures:
            log.error("worker process %d (pid %d) exited with code %s %d times in a row within %.0fs of starting; "
                      "giving up", slot.index, pid, code, slot.quick_failures, self.min_uptime,
                      extra={"slot": slot.index, "child_pid": pid, "returncode": code})
            slot.finished = True
            self._failed = True
            self._begin_stop(signal.SIGTERM, "crash loop")
            return
        delay = self.restart_backoff.delay(slot.quick_failures, 1.0)
        slot.restart_at = time.monotonic() + delay
        slot.restarts += 1
        log.warning("worker process %d (pid %d) exited unexpectedly with code %s; restarting in %.1fs",
                    slot.index, pid, code, delay,
                    extra={"slot": slot.index, "child_pid": pid, "returncode": code, "restart_in": delay})

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> int:
        """Run until every child has exited (call it once, from the main thread); 0 if all ended cleanly, else 1."""
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)}
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGCHLD, self._on_child)
        log.info("supervising %d worker processes%s", self.processes, " (burst)" if self.burst else "")
        try:
            for slot in self.slots:
                self._start(slot)
            while True:
                while self._received:
                    signum = self._received.pop(0)
                    self._begin_stop(signum, f"signal {signum}")
                for slot in self.slots:
                    if slot.proc is not None and slot.proc.poll() is not None:
                        self._reap(slot)
                now = time.monotonic()
                for slot in self.slots:
                    if slot.restart_at is not None and now >= slot.restart_at and not self._stopping:
                        self._start(slot)
                live = [s for s in self.slots if s.proc is not None]
                waiting = [s.restart_at for s in self.slots if s.restart_at is not None]
                if not live and not waiting:
                    break
                timeout = self.check_interval
                if waiting:
                    timeout = max(0.0, min(timeout, min(waiting) - now))
                self._sleep(timeout)
        except BaseException:
            self._forward(signal.SIGTERM)  # never leave children behind
            raise
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            fds, self._wake_r, self._wake_w = (self._wake_r, self._wake_w), -1, -1
            for fd in fds:
                os.close(fd)
        clean = not self._failed and all(s.returncode == 0 for s in self.slots)
        log.info("all worker processes exited%s", "" if clean else " (not all cleanly)")
        return 0 if clean else 1
