"""Several worker processes from one command (``firesafe worker --processes N``).

The supervisor starts N children (each ``python -m firesafe worker ... --processes 1``), forwards
SIGTERM/SIGINT to them, restarts a child that dies unexpectedly (with backoff) and returns once every
child has exited after a signal or, in burst mode, once every child has finished.

Children run in their own process group, so Ctrl-C in a terminal reaches them once, through the
supervisor; they watch their parent and stop gracefully if the supervisor disappears.

A child says when it is *ready*: once its app is imported, its store open and its worker loop
about to claim, it writes a byte to a pipe the supervisor gave it (:func:`ready_notifier`). That
tells the two ways a child dies apart:

- one that dies before it is ready cannot start (the app does not import, the store or the
  configuration is wrong): after ``max_startup_failures`` such exits in a row the supervisor stops
  everything and fails, instead of crash-looping forever;
- one that dies after it is ready died while working, most likely killed by a job (a segfault, an
  ``os._exit``, the OOM killer). Its jobs are rescued as ``lost`` (below: without waiting for their
  leases) and go dead after a few losses (docs/guarantees.md #5), so it is restarted however often
  that happens, with a bounded backoff: giving up would stop every other job too.

A child that exits without a clean stop may leave attempts running in the store, under leases that
nobody renews any more. The supervisor knows that process is gone: once nothing it started is left
running, it ends those leases at once (``on_gone``), so the attempts are rescued as ``lost`` within
seconds instead of when the leases would have run out (30 s by default). "Nothing left" is checked
twice: no live process remains in the child's process group (where the subprocesses its jobs start
run, unless they move to a group of their own), and, where Linux lets the supervisor be a *child
subreaper*, no live process that child left behind has been handed to the supervisor (every orphaned
descendant is, whatever its group or session; the supervisor reaps them; one in a running child's
group is that child's, one in a group of its own could be any child's). While either holds, the
leases run out as before. Each child it starts gets a tag of its own (``WORKER_TAG_ENV``) that
its worker ids carry, so it names exactly that child's workers, never those of a later process
given the same pid.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import queue
import select
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from firesafe.retries.backoff import Backoff
from firesafe.worker.worker import WORKER_TAG_ENV, worker_id_prefix

log = logging.getLogger("firesafe.supervisor")

#: Environment variable telling a child which process supervises it.
SUPERVISOR_PID_ENV = "FIRESAFE_SUPERVISOR_PID"
#: Environment variable naming the file descriptor on which a child says it is ready.
READY_FD_ENV = "FIRESAFE_READY_FD"


def ready_notifier() -> Callable[[], None] | None:
    """In a supervised child: the function that tells the supervisor this process is ready (call
    it once its worker is about to claim; later calls do nothing); None when nothing supervises it.

    Call it early: it takes the descriptor out of the environment, so that no process the jobs start
    inherits it."""
    value = os.environ.pop(READY_FD_ENV, "")
    if not value.isdigit():
        return None
    fd = int(value)
    try:
        os.set_inheritable(fd, False)
    except OSError:  # not open: started by hand with the variable set
        return None
    done: list[bool] = []

    def notify() -> None:
        if done:
            return
        done.append(True)
        with contextlib.suppress(OSError):
            os.write(fd, b"1")
        with contextlib.suppress(OSError):
            os.close(fd)

    return notify


def exit_text(code: int | None) -> str:
    """How a child ended, for the log.

    >>> exit_text(3), exit_text(-9)
    ('code 3', 'signal 9 (SIGKILL)')
    """
    if code is not None and code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


@dataclass
class _Slot:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restart_at: float | None = None
    ready_fd: int = -1  # read end of the pipe on which the running child says it is ready
    ready: bool = False  # the running child (or the one that just exited) said it was ready
    startup_failures: int = 0  # consecutive exits before being ready
    crashes: int = 0  # consecutive exits after being ready, each within stable_after of starting
    restarts: int = 0
    finished: bool = False
    returncode: int | None = None
    tag: str = ""  # the running child's worker tag (WORKER_TAG_ENV)


@dataclass
class _Gone:
    """A child that exited without a clean stop, whose leases are still to end."""

    slot: int
    pid: int
    code: int | None
    prefix: str  # how its worker ids begin
    waiting_noted: bool = False  # logged once that processes it started may still run


class Supervisor:
    """Keeps ``processes`` copies of ``command`` running until told to stop.

    Guarantees: each signal it receives is forwarded exactly once to every live child (the first
    asks for a graceful stop, a second makes them exit at once); no child is restarted after a
    signal; a child that dies after it said it was ready is restarted (after ``restart_backoff``,
    counted from 1 again once a child lived ``stable_after`` seconds) however often it dies; it
    gives up, stopping every child and failing, only after ``max_startup_failures`` children of
    one slot in a row exited before they were ready; it returns only when no child is left running.
    With ``on_gone``, a child that exited other than by a clean stop (any exit but code 0 after a
    signal or, in burst mode, at the end) has ``on_gone(prefix, detail)`` called once nothing it started
    runs any more (see the module's docstring), on a thread of the supervisor's own (a slow store
    does not hold it up): the store ends the leases of the workers whose ids begin with ``prefix``
    (``Store.worker_process_gone``; ``detail``, for the events it records, says which process
    ended and how) and returns how many. ``subreaper=False`` keeps orphaned
    descendants with init (only the process groups are checked then).
    """

    def __init__(self, command: Sequence[str], processes: int, *, burst: bool = False,
                 env: Mapping[str, str] | None = None, restart_backoff: Backoff | None = None,
                 stable_after: float = 5.0, max_startup_failures: int = 5, check_interval: float = 1.0,
                 on_gone: Callable[[str, dict[str, Any]], int] | None = None, subreaper: bool = True) -> None:
        if processes < 1:
            raise ValueError("processes must be >= 1")
        self.command = list(command)
        self.processes = processes
        self.burst = burst
        self.env = dict(os.environ if env is None else env)
        self.restart_backoff = restart_backoff or Backoff(base=0.5, factor=2.0, cap=30.0, jitter="none")
        self.stable_after = stable_after
        self.max_startup_failures = max_startup_failures
        self.check_interval = check_interval
        self.slots = [_Slot(i + 1) for i in range(processes)]
        # Signal handlers only append to a list and write a byte to this pipe: taking a lock in a
        # handler (threading.Event.set) can deadlock against the same lock held by the main thread.
        self._wake_r = self._wake_w = -1
        self._received: list[int] = []  # signals received, not yet forwarded
        self._stopping = False
        self._failed = False
        self.on_gone = on_gone
        self._host = socket.gethostname()
        self._gone: list[_Gone] = []  # exited children whose leases are still to end
        self._to_end: queue.SimpleQueue[_Gone | None] = queue.SimpleQueue()  # for the thread that ends them
        self._ender: threading.Thread | None = None
        self._subreaper = False  # whether orphaned descendants of the children come to this process
        self._want_subreaper = subreaper

    #: How often a child gone whose process group still has members is looked at again (seconds).
    GONE_CHECK = 0.2
    #: How long the supervisor, returning, waits for the leases of children gone to be ended (seconds).
    GONE_WAIT = 10.0

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
        """Wait until a signal, a child's exit, a child's readiness or ``timeout``, whichever comes first."""
        fds = [self._wake_r] + [s.ready_fd for s in self.slots if s.ready_fd >= 0]
        ready, _, _ = select.select(fds, [], [], timeout)
        if self._wake_r in ready:
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
        slot.tag = env[WORKER_TAG_ENV] = uuid.uuid4().hex[:8]
        read_end, write_end = os.pipe()  # neither is inherited by the other children
        try:
            os.set_blocking(read_end, False)
            env[READY_FD_ENV] = str(write_end)
            slot.proc = subprocess.Popen(self.command, env=env, process_group=0, pass_fds=(write_end,))
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the child holds it now: its exit closes the pipe
        slot.ready_fd = read_end
        slot.ready = False
        slot.started = time.monotonic()
        slot.restart_at = None
        slot.returncode = None
        log.info("worker process %d/%d started (pid %d)", slot.index, self.processes, slot.proc.pid,
                 extra={"slot": slot.index, "child_pid": slot.proc.pid})

    def _check_ready(self, slot: _Slot) -> None:
        """Read what the child wrote on its ready pipe, if anything: a byte (ready) or the end (exited)."""
        if slot.ready_fd < 0:
            return
        try:
            data = os.read(slot.ready_fd, 64)
        except BlockingIOError:
            return  # nothing yet
        except OSError:
            data = b""
        self._close_ready_fd(slot)
        if data and slot.proc is not None:
            slot.ready = True
            slot.startup_failures = 0
            log.debug("worker process %d (pid %d) is ready", slot.index, slot.proc.pid,
                      extra={"slot": slot.index, "child_pid": slot.proc.pid})

    @staticmethod
    def _close_ready_fd(slot: _Slot) -> None:
        if slot.ready_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(slot.ready_fd)
            slot.ready_fd = -1

    def _close_ready(self) -> None:
        for slot in self.slots:
            self._close_ready_fd(slot)

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
        self._check_ready(slot)  # a child may say it is ready and die before the loop reads it
        self._close_ready_fd(slot)  # still open elsewhere (a process it started?): it said nothing
        code = slot.proc.returncode
        pid = slot.proc.pid
        uptime = time.monotonic() - slot.started
        slot.proc = None
        slot.returncode = code
        extra = {"slot": slot.index, "child_pid": pid, "returncode": code}
        # Any end but a clean stop may leave attempts under leases nobody renews.
        if self.on_gone is not None and (code != 0 or not (self._stopping or self.burst)):
            self._gone.append(_Gone(slot.index, pid, code, worker_id_prefix(self._host, pid, slot.tag)))
        if self._stopping:
            log.info("worker process %d (pid %d) exited with %s", slot.index, pid, exit_text(code), extra=extra)
            slot.finished = True
            return
        if self.burst and code == 0:
            log.info("worker process %d (pid %d) finished", slot.index, pid, extra=extra)
            slot.finished = True
            return
        if slot.ready:  # it died while working (a job may have killed it): restart it, never give up
            slot.crashes = slot.crashes + 1 if uptime < self.stable_after else 1
            delay = self.restart_backoff.delay(slot.crashes, 1.0)
            log.warning("worker process %d (pid %d) exited unexpectedly with %s; restarting in %.1fs",
                        slot.index, pid, exit_text(code), delay, extra={**extra, "restart_in": delay})
        else:
            slot.startup_failures += 1
            if slot.startup_failures >= self.max_startup_failures:
                log.error("worker process %d (pid %d) exited with %s before it was ready, %d times in a row: "
                          "giving up (a worker that cannot start: check the app import, the store and the "
                          "configuration in the lines above)", slot.index, pid, exit_text(code),
                          slot.startup_failures, extra=extra)
                slot.finished = True
                self._failed = True
                self._begin_stop(signal.SIGTERM, "workers cannot start")
                return
            delay = self.restart_backoff.delay(slot.startup_failures, 1.0)
            log.warning("worker process %d (pid %d) exited with %s before it was ready (%d of %d in a row); "
                        "restarting in %.1fs", slot.index, pid, exit_text(code), slot.startup_failures,
                        self.max_startup_failures, delay, extra={**extra, "restart_in": delay})
        slot.restart_at = time.monotonic() + delay
        slot.restarts += 1

    def _settle_gone(self) -> None:
        """Hand the children gone of which nothing runs any more to the thread that ends their leases
        (and, as a subreaper, reap the orphans that exited, whether or not a child is pending)."""
        running = {s.proc.pid for s in self.slots if s.proc is not None}
        orphans = self._orphans(running)
        if not self._gone:
            return
        # An orphan in a running child's process group is that child's; one in a gone child's group
        # is that one's; one in a group of its own (setsid, setpgid) could be anyone's.
        pending = {g.pid for g in self._gone}
        for gone in list(self._gone):
            held = [pid for pid, group in orphans.items()
                    if group == gone.pid or (group not in running and group not in pending)]
            if not held and not _group_runs(gone.pid):
                self._gone.remove(gone)
                if self._ender is None:
                    self._ender = threading.Thread(target=self._end_leases, name="firesafe-lease-ender", daemon=True)
                    self._ender.start()
                self._to_end.put(gone)
            elif not gone.waiting_noted:
                gone.waiting_noted = True
                log.warning("worker process %d (pid %d) exited but processes it started may still run (%s); its "
                            "leases end once they have exited, or when the leases run out", gone.slot, gone.pid,
                            f"pids {', '.join(map(str, held))}, left to this supervisor" if held
                            else "its process group", extra={"slot": gone.slot, "child_pid": gone.pid})

    def _orphans(self, running: set[int]) -> dict[int, int]:
        """As a subreaper: the live processes the children's descendants left to this one (not the
        ``running`` children themselves), with their process group; reaps those that have exited.
        Empty otherwise. Processes in the supervisor's own group (ones it started itself, not through
        a child) are neither counted nor reaped."""
        if not self._subreaper:
            return {}
        own_group = os.getpgrp()
        alive: dict[int, int] = {}
        for pid in _children():
            if pid in running:
                continue
            state, group = _proc_stat(pid)
            if state is None or group == own_group:
                continue
            if state == "Z":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            else:
                alive[pid] = group
        return alive

    def _end_leases(self) -> None:
        """The thread that ends the leases of children gone, one after the other (one store connection)."""
        assert self.on_gone is not None
        while (gone := self._to_end.get()) is not None:
            extra = {"slot": gone.slot, "child_pid": gone.pid}
            try:
                ended = self.on_gone(gone.prefix, {"process": gone.slot, "pid": gone.pid,
                                                   "exit": exit_text(gone.code)})
            except BaseException as exc:  # the store is down: the leases run out as usual; the thread goes on
                log.warning("could not end the leases of worker process %d (pid %d): %s; its attempts are rescued "
                            "when their leases run out", gone.slot, gone.pid, exc, extra=extra)
                continue
            if ended:
                log.warning("worker process %d (pid %d) exited with %s during %d attempt(s): their leases are "
                            "ended so that they are rescued now", gone.slot, gone.pid, exit_text(gone.code), ended,
                            extra={**extra, "leases_ended": ended})

    def _finish_gone(self) -> None:
        """At the end of :meth:`run`: let the leases being ended be, up to ``GONE_WAIT`` in all."""
        for gone in self._gone:
            log.warning("worker process %d (pid %d) left processes running; its attempts are rescued when their "
                        "leases run out", gone.slot, gone.pid, extra={"slot": gone.slot, "child_pid": gone.pid})
        self._gone.clear()
        if self._ender is not None:
            self._to_end.put(None)
            self._ender.join(self.GONE_WAIT)

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
        if self.on_gone is not None and self._want_subreaper:
            self._subreaper = _set_subreaper(True)
        try:
            for slot in self.slots:
                self._start(slot)
            while True:
                while self._received:
                    signum = self._received.pop(0)
                    self._begin_stop(signum, f"signal {signum}")
                for slot in self.slots:
                    if slot.proc is not None:
                        self._check_ready(slot)
                        if slot.proc.poll() is not None:
                            self._reap(slot)
                self._settle_gone()
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
                if self._gone:  # an empty process group sends no signal: look again soon
                    timeout = min(timeout, self.GONE_CHECK)
                self._sleep(timeout)
        except BaseException:
            self._forward(signal.SIGTERM)  # never leave children behind
            raise
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._close_ready()
            fds, self._wake_r, self._wake_w = (self._wake_r, self._wake_w), -1, -1
            for fd in fds:
                os.close(fd)
            self._finish_gone()
            if self._subreaper:  # orphans left from now on go to init again
                self._subreaper = not _set_subreaper(False)
        clean = not self._failed and all(s.returncode == 0 for s in self.slots)
        log.info("all worker processes exited%s", "" if clean else " (not all cleanly)")
        return 0 if clean else 1


def _set_subreaper(on: bool) -> bool:
    """Linux: have orphaned descendants of this process's children handed to it (instead of to init),
    so that it can tell when nothing a dead child started still runs; ``on=False`` undoes it. True
    if done. Not where the kernel does not list a process's children in /proc (the supervisor finds
    them there)."""
    if not os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children"):
        return False
    try:
        return bool(ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0) == 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _children() -> set[int]:
    """This process's child pids (from every thread's /proc children list)."""
    pids: set[int] = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for task in tasks:
        with contextlib.suppress(OSError, ValueError), open(f"/proc/self/task/{task}/children") as f:
            pids.update(int(p) for p in f.read().split())
    return pids


def _proc_stat(pid: int) -> tuple[str | None, int]:
    """A process's state letter (``Z`` for a zombie) and process group from /proc; (None, 0) if it
    is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()  # the name, in parentheses, may hold anything
        return fields[0], int(fields[2])
    except (OSError, IndexError, ValueError):
        return None, 0


def _group_runs(pgid: int) -> bool:
    """Whether a live process (not a zombie) is in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # a member runs as another user
        return True
    try:
        entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return True  # no /proc: a member, maybe a zombie, is there
    for pid in entries:
        state, group = _proc_stat(pid)
        if group == pgid and state not in ("Z", None):
            return True
    return False
