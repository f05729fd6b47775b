"""The worker: claim in batches, run attempts on a thread pool, commit outcomes in batches.

A :class:`Worker` is made of parts:

- **the loop** (:meth:`Worker.turn`): one pass decides what the store is asked: heartbeats,
  rescues and pruning when due, outcomes to save, timeouts, the next claim. :meth:`Worker.run`
  calls it until the worker stops, waiting for a wake-up between turns that claimed nothing; the
  deterministic simulation (tests/simulation/sim.py) calls the same method, one turn at a time;
- **the pool** (firesafe/worker/pool.py): the threads attempts run on; each hands its outcome back
  through a queue, and the executor (firesafe/worker/executor.py) decides what the outcome is;
- **the completer** (firesafe/worker/completer.py): the only path by which outcomes reach the
  store: a batch's outcomes and the next claim in one transaction, run by the loop itself or,
  with a pipeline (firesafe/worker/pipeline.py, the default on PostgreSQL), by committer threads
  while the loop goes on;
- **the prefetch** (firesafe/worker/prefetch.py): how many jobs to claim beyond the threads, by the
  attempts' measured pace, and how many a claim asks for;
- **the quarantine** (firesafe/worker/quarantine.py): a job that lost its worker before runs alone;
- **the limiters' gate** (firesafe/limits/gate.py, only for an app that declares limiters) and
  **lanes** (firesafe/worker/lanes.py: several loops sharing one process).
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import random
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from firesafe.context import Attempt, Context, JobInfo
from firesafe.errors import Cancelled, ConfigError, StoreError
from firesafe.hooks import AttemptEnded, AttemptStarted, JobDead
from firesafe.retries.backoff import Backoff
from firesafe.retries.decide import DEFAULT_MAX_LOST, Budget, decide_lost
from firesafe.states import State
from firesafe.store.base import Claimed, ClaimParams, FinishParams, RescueParams, released
from firesafe.store.contract import ListenStore
from firesafe.worker import collector, executor
from firesafe.worker.completer import Completer, Meta
from firesafe.worker.pipeline import DEFAULT_DEPTH
from firesafe.worker.pool import Pool, Threads
from firesafe.worker.prefetch import Prefetch, Waiting, claim_size
from firesafe.worker.pruner import PrunerDuty
from firesafe.worker.quarantine import Quarantine

if TYPE_CHECKING:
    from firesafe.app import App
    from firesafe.limits.gate import Gate
    from firesafe.worker.lanes import LaneGroup

log = logging.getLogger("firesafe.worker")

#: Set by a supervisor in each worker process it starts, a tag of its own per process started: the
#: process's worker ids then begin with ``worker_id_prefix(host, pid, tag)``, so that once the process
#: is gone the supervisor can name exactly its workers (a later process given the same pid has
#: another tag), then the lane and random characters (two workers of one process, even of one lane,
#: never share an id). Without it an id is ``"<host>:<pid>:"`` and random characters.
WORKER_TAG_ENV = "FIRESAFE_WORKER_TAG"


def worker_id_prefix(host: str, pid: int, tag: str) -> str:
    """How the ids of the workers of one supervised process begin: ``"<host>:<pid>:<tag>."``."""
    return f"{host}:{pid}:{tag}."


@dataclass
class Running:
    """An attempt this worker holds: claimed, perhaps waiting for a thread, running, or concluded
    while its thread has not returned."""

    claimed: Claimed
    ctx: Context
    attempt: Attempt  # the worker's side of ctx: cancel requests, the steps recorded
    claimed_at: float  # Worker.monotonic() of the claim
    lease_until: float  # a job still waiting for a thread starts only before this (see Worker._start)
    started: float | None = None  # when a pool thread began it (None while it waits, prefetched)
    deadline: float | None = None
    done: bool = False  # concluded by the loop (timeout, release, lease lost): a late result is dropped
    saving: bool = False  # its outcome came back and is being saved (in the outbox, in flight, or unsaved)


@dataclass(frozen=True, slots=True)
class Unrun:
    """A claimed job that could not run here (its name is not declared, its arguments cannot be
    read): its outcome is booked like an attempt's (counted, logged, the hooks told), with no slot."""

    claimed: Claimed
    started: float | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """What one turn of a worker's loop did (:meth:`Worker.turn`), and what the loop does next."""

    claimed: Sequence[Claimed] = ()  # the jobs this turn claimed (with a pipeline, a later turn's reply brings them)
    stopping: bool = False  # the worker is stopping: it claims nothing more
    done: bool = False  # the loop ends here
    wait: float | None = None  # wait this long for a wake-up before the next turn (None: go on at once)


@dataclass
class WorkerStats:
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    deferred: int = 0
    fenced: int = 0  # late writes that changed nothing
    rescued: int = 0
    claimed: int = 0
    by_outcome: dict[str, int] = field(default_factory=dict)


class Worker:
    """Runs the jobs of one app from some queues.

    Guarantees: every attempt it starts is either recorded (outcome saved under its lease token) or,
    if the process dies, rescued as ``lost`` by any worker once the lease expires.
    """

    def __init__(self, app: App, queues: Sequence[str] | None = None, *, concurrency: int = 8,
                 burst: bool = False, wait_scheduled: bool = False, lease: float | None = None,
                 poll_interval: float = 0.5, grace: float = 30.0, batch: int | None = None,
                 max_lost: int = DEFAULT_MAX_LOST, rescue_interval: float | None = None,
                 seed: int | None = None, prefetch: int | None = None, group: LaneGroup | None = None,
                 lane: int = 0, pipeline: int | None = None, scheduler: bool = True) -> None:
        self.app = app
        self.store = app.store
        self.queues = tuple(queues) if queues else app.queues()
        # Whether it runs the scheduler of the schedules on its queues (firesafe/schedules/scheduler.py).
        self.scheduler = scheduler
        self.concurrency = max(1, concurrency)
        self.burst = burst
        self.wait_scheduled = wait_scheduled
        self.lease = lease or app.lease
        self.poll_interval = poll_interval
        self.grace = grace
        self._starting = threading.Lock()  # a pool thread starting a waiting job vs the loop withdrawing it
        self.max_lost = max_lost
        self.rescue_interval = rescue_interval or min(5.0, self.lease / 3)
        self.heartbeat_interval = self.lease / 3
        # A job that waited for a thread starts only while its lease surely holds: this long after
        # the claim or the last heartbeat, a heartbeat's margin before the lease would run out.
        self._startable_for = self.lease - self.heartbeat_interval
        self.random = random.Random(seed)
        host, pid, tag = socket.gethostname(), os.getpid(), os.environ.get(WORKER_TAG_ENV, "")
        start = worker_id_prefix(host, pid, tag) + f"{lane}." if tag.isalnum() else f"{host}:{pid}:"
        self.id = start + uuid.uuid4().hex[:6]
        # One of several claim loops of a process (firesafe/worker/lanes.py): the first leads (duties,
        # pruning, rescues, quarantine); all of them keep a suspect alone in the process.
        self._group = group
        self.lane = lane
        self._leads = lane == 0
        self.stats = WorkerStats()
        self._done: queue.SimpleQueue[tuple[Running, executor.AttemptResult]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        # The attempts this worker holds, by (job id, run): a timed-out or lost attempt keeps its slot
        # until its thread returns, while the same job may already run again here.
        self.running: dict[tuple[int, int], Running] = {}
        # When a job waiting for a thread may next have to be given back (see _withdraw), monotonic.
        self._withdraw_due = 0.0
        self._pool: Threads | None = None
        self._waiting = Waiting()  # claimed jobs not yet on a thread: the pool runs the first-ranked next
        # The clock of every duration, deadline and timer of this worker (the simulation's is fake).
        self.monotonic: Callable[[], float] = time.monotonic
        # Quarantine: one worker per queue set (a leader lease) runs suspects, alone.
        self.quarantine = Quarantine(self.store, self.queues, self.id, max(self.lease, 3 * self.rescue_interval),
                                     poll_interval, lambda: self.monotonic())
        # When the loop's turns last heartbeat and rescued, and when a stopping loop gives up.
        self._last_beat = self._last_rescue = -math.inf
        self._stop_at: float | None = None
        # The only path of outcomes to the store: the outcomes _flush collects wait in its outbox for
        # the next claim, saved in the same transaction (one commit a batch, not two), or on their own
        # (_save_outbox) when the loop claims nothing.
        self.completer = Completer(self.store, self._book)
        self._linger_until: float | None = None  # outcomes wait until then for the rest of their batch
        # Limiters (firesafe/limits): None unless the app declares some; checks their config now.
        self._limits: Gate | None = None
        if app.limiters or any(j.limiters for j in app.jobs.values()):
            from firesafe.limits.gate import Gate

            self._limits = Gate(self)
        # Jobs claimed beyond the threads, to start as soon as a thread is free (firesafe/worker/prefetch.py):
        # ``prefetch`` is the most; None sizes it by the attempts' pace. Off with limiters (a waiting
        # job would hold its tokens) and when the app has a job of a single attempt (a prefetched job
        # lost with its worker uses an attempt: such a job would go dead without having run; any
        # queue, since enqueue may override a job's queue).
        self.prefetch = Prefetch(self.concurrency, prefetch, lanes=group.size if group is not None else 1,
                                 off=self._limits is not None or any(j.max_attempts == 1 for j in app.jobs.values()))
        self.batch = batch or self.concurrency + self.prefetch.most
        # Store transactions in flight (firesafe/worker/pipeline.py): by default two where the store
        # has concurrent writers and the loop prefetches (so that a batch runs while the next one's
        # transaction does) and is its process's only one; otherwise one, the loop waiting for each.
        # A suspect is always claimed with nothing in flight, and limiters keep the loop to one.
        if pipeline is None:
            pipeline = DEFAULT_DEPTH if self.store.concurrent_writers and self.prefetch.most else 1
        elif isinstance(pipeline, bool) or not isinstance(pipeline, int) or pipeline < 1:
            raise ConfigError(f"pipeline must be a whole number >= 1, not {pipeline!r}")
        # Lanes (firesafe/worker/lanes.py) do the same job another way, so a lane's loop keeps one.
        self.pipeline = 1 if group is not None or self._limits is not None else pipeline

    # -- control -----------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop claiming; running attempts get the grace period, then are released."""
        self._stopping.set()
        self._wake.set()

    def wake(self) -> None:
        """End the loop's wait now (a job was enqueued in this process)."""
        self._wake.set()

    def install_signal_handlers(self) -> None:
        install_signal_handlers(self.stop, self.grace)

    def wait_stopped(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for :meth:`stop`; True once it was called."""
        return self._stopping.wait(timeout)

    # -- what the parts may ask (the limiters' gate, lanes) ------------------------------------------
    def leases(self) -> set[tuple[int, str]]:
        """The attempts this worker holds, by ``(job id, lease token)`` (ended ones whose threads have
        not returned included)."""
        return {(r.claimed.job.id, r.claimed.token) for r in self.running.values()}

    def holds_slots(self) -> bool:
        """Whether an attempt holds one of its threads, even one concluded as timed out."""
        return bool(self.running)

    def busy(self) -> bool:
        """Whether anything is left to do here: an attempt to conclude, or outcomes and claims still to
        be saved or answered (in the outbox, or in the pipeline)."""
        return self._live() or self.completer.busy

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> WorkerStats:
        with collector.tuned():  # see firesafe/worker/collector.py
            return self._run()

    def _run(self) -> WorkerStats:
        self._pool = Pool(self.concurrency)
        if self.pipeline > 1:
            self.completer.open_pipeline(self.pipeline, self._wake.set)
        # A store that can push wake-ups (PostgreSQL LISTEN/NOTIFY) ends the idle wait as soon as a job
        # arrives; polling every poll_interval stays the fallback.
        # With several claim loops the leader's listener wakes them all (one LISTEN connection).
        wake = self._wake.set if self._group is None else self._group.wake_all
        listener = cast(ListenStore, self.store).listen(self.queues, wake) if (
            not self.burst and self._leads and self.store.supports_listen) else None
        hooks = self.app.hooks  # firesafe/hooks.py: each call logs and swallows a hook's exception
        hooks.call(hooks.worker_started, self)
        # Background duties (alert dispatch, pruning, ...) run in threads of their own: a slow one
        # never slows this loop. Pruning is paced, one process of the fleet at a time.
        duties: list[Callable[[], None]] = []
        if self._leads:
            duties = self.app.start_duties(self)
            pruner = PrunerDuty(self.app, self.id)
            pruner.start()
            duties.append(pruner.stop)
        store_backoff = Backoff(base=0.5, factor=2.0, cap=15.0, jitter="equal")
        faults = 0
        log.info("worker %s started: queues=%s concurrency=%d prefetch=%s pipeline=%d%s", self.id,
                 ",".join(self.queues), self.concurrency, f"paced(max={self.prefetch.most})"
                 if self.prefetch.sized and self.prefetch.most else self.prefetch.most, self.pipeline,
                 f" lane={self.lane + 1}/{self._group.size}" if self._group else "")
        try:
            while True:
                try:
                    turn = self.turn()
                except StoreError as exc:
                    faults += 1
                    pause = store_backoff.delay(faults, self.random.random())
                    if self._stopping.is_set():  # a fault while stopping: wait it out until the grace ends
                        self._stop_at = self._stop_at or self.monotonic() + self.grace
                        left = self._stop_at - self.monotonic()
                        if left <= 0:
                            log.error("store fault (%s) outlasted the grace period; stopping without saving "
                                      "(leases will expire and the jobs be rescued)", exc)
                            break
                        log.error("store fault (%s); retrying in %.1fs", exc, min(pause, left))
                        time.sleep(min(pause, left))  # the stop event is set: waiting on it would spin
                        continue
                    log.error("store fault (%s); retrying in %.1fs", exc, pause)
                    if self._stopping.wait(pause):
                        self._stop_at = self._stop_at or self.monotonic() + self.grace
                    continue
                if faults and not turn.stopping:
                    log.info("store is reachable again; resuming")
                    faults = 0
                if turn.done:
                    break
                if turn.wait is not None:
                    self._wake.wait(turn.wait)
                    self._wake.clear()
                    self.completer.dry = False
        finally:
            if listener is not None:
                listener.close()
            self._shutdown()
            hooks.call(tuple(duties))  # each duty's stop function; one that raises is logged
            hooks.call(hooks.worker_stopped, self)
        return self.stats

    def turn(self) -> Turn:
        """One pass of the loop: take in the transactions that ended; heartbeat and rescue (and look
        for suspects) when due; save the outcomes that came back (or let them linger for the
        rest of their batch); conclude attempts past their timeout; claim what the free slots allow,
        with the outcomes in the same transaction; and say how long to wait for a wake-up. Stopping,
        it claims nothing and releases what the grace period did not see end. A store fault is
        raised (the caller backs off and turns again: nothing is lost, outcomes it could not save
        are kept to save again)."""
        self._collect()
        now = self.monotonic()
        if now - self._last_beat >= self.heartbeat_interval:
            self._heartbeat()
            self._last_beat = now
        if now - self._last_rescue >= self.rescue_interval and self._leads:
            self._rescue()
            self.quarantine.check()
            self._last_rescue = now
        lingering = self._linger()
        if not lingering:
            self._flush()
        self._timeouts()
        if self._stopping.is_set():
            self._save_outbox()
            if self._stop_at is None:
                self._stop_at = self.monotonic() + self.grace
            if not self.busy() or self.monotonic() >= self._stop_at:
                self._release_all()  # not the outcomes in flight: _shutdown waits for those
                return Turn(stopping=True, done=True)
            return Turn(stopping=True, wait=0.05)
        # While outcomes linger for the rest of their batch, the free slots wait too: the claim goes
        # with those outcomes, in their transaction, instead of in one of its own.
        claimed = [] if lingering else self._claim()
        self._save_outbox()
        if claimed:
            return Turn(claimed)
        if not self.busy() and self.burst and self._idle():
            return Turn(done=True)
        return Turn(wait=self._sleep_time())

    def _live(self) -> bool:
        """Whether an attempt is still to conclude here. One concluded as timed out whose thread has
        not returned (a job that ignores ``ctx.cancelled``) keeps its thread's slot, but nothing waits
        for it: its outcome is saved, so a burst worker may end and a stopping one need not wait."""
        return any(not r.done for r in self.running.values())

    def _held(self) -> list[Running]:
        """The attempts whose leases this loop keeps or gives back: not concluded, and their outcome
        not in the pipeline (the commit in flight ends those leases, or they run out)."""
        flying = self.completer.in_flight()
        return [r for k, r in self.running.items() if not r.done and k not in flying]

    def _collect(self) -> None:
        """Take in the pipeline's transactions that ended (see :meth:`Completer.collect`): their
        outcomes booked, the jobs they claimed started."""
        self.completer.collect(self._took)

    def _took(self, claimed: list[Claimed]) -> None:
        self.stats.claimed += len(claimed)
        for c in claimed:
            self._start(c)

    #: How long a stopping worker waits for the transactions in its pipeline (seconds).
    SETTLE = 10.0

    def _settle(self) -> None:
        """Wait for the pipeline's transactions in flight (up to ``SETTLE`` seconds) and take them in."""
        self.completer.settle(self.SETTLE, self._took)

    #: How long outcomes that came back may wait for the rest of their batch (see :meth:`_linger`).
    LINGER = 0.002

    def _linger(self) -> bool:
        """Hold the outcomes that came back while the rest of their batch still runs, for up to
        ``LINGER`` seconds, so that one commit saves them all. Each commit costs a disk flush; saving
        whatever is back at each wake-up splits a busy worker's batches in two (claims of 4 and saves of 4
        instead of 8 and 8), which halves its throughput. Nothing is acknowledged before its commit: an
        outcome only waits a little longer in memory, its lease held and heartbeated as before."""
        back = self._done.qsize()
        if not back or self.completer.unsaved or self._stopping.is_set() or back >= sum(
                1 for r in self.running.values() if not r.done and not r.saving):
            self._linger_until = None
            return False
        now = self.monotonic()
        if self._linger_until is None:
            self._linger_until = now + self.LINGER
        if now < self._linger_until:
            return True
        self._linger_until = None
        return False

    def _sleep_time(self) -> float:
        wait = self.poll_interval
        if self._linger_until is not None:
            wait = min(wait, max(0.0, self._linger_until - self.monotonic()))
        # Attempts end by their deadline; jobs waiting for a thread are given back after Prefetch.wait.
        give_back = self.prefetch.wait
        deadlines = [due for r in self.running.values() if not r.done and (
            due := r.claimed_at + give_back if r.started is None else r.deadline) is not None]
        if deadlines:
            wait = min(wait, max(0.0, min(deadlines) - self.monotonic()))
        if self._limits is not None:  # wake when jobs given back to a limiter come up
            wait = self._limits.sleep_time(wait)
        return wait

    def _idle(self) -> bool:
        """Burst mode: done when nothing is runnable now; with ``wait_scheduled``, when nothing is
        waiting or running anywhere in these queues (retries and rescues may still come back). One of
        several claim loops of a process (lanes) is not done while another still has attempts: those
        may hold every runnable job (prefetched) and give some back, which this loop must be there
        to take."""
        if self._group is not None and self._group.others_live(self):
            return False
        pending = self.store.job_pending(self.queues)
        if pending.runnable:
            return False
        if not self.wait_scheduled:
            return True
        if pending.running or pending.next_at is not None:
            delay = (pending.next_at - self.store.now()) if pending.next_at is not None else self.poll_interval
            self._wake.wait(min(max(delay, 0.0), self.poll_interval))
            self._wake.clear()
            return False
        return True

    def _claim(self) -> list[Claimed]:
        """Claim what fits in the free slots. A job that lost its worker before (a suspect of
        killing it) runs alone, in the one worker holding the isolation lease (see
        firesafe/worker/quarantine.py)."""
        # The attempts whose outcomes wait in the outbox free their slots with this claim, and so do
        # those whose outcomes are in flight (a claim in flight holds the slots it may fill instead).
        leaving = self.completer.leaving()
        staying = [r for k, r in self.running.items() if k not in leaving]
        q = self.quarantine
        if q.holding(self.running, leaving):  # a suspect runs here: nothing beside it
            return []
        flying = self.completer.flying
        group = self._group
        if group is not None and not self._leads:  # another loop of this process: see LaneGroup
            return group.claim_beside(lambda: self.claim_free(staying))
        if q.isolating and q.wants(idle=not staying and not flying and (group is None or not group.others_busy(self))):
            if (group is not None and not group.clear_for_suspect(self)) or staying or flying:
                return []  # let the running attempts finish (this loop's and the others'), then run it alone
            self._save_outbox(here=True)  # a suspect is claimed on its own, with nothing in flight
            claimed = self._take(1, suspects=True)
            if claimed:
                return claimed
            q.none_found()
        if group is not None:
            group.suspect_done()
        return self.claim_free(staying)

    def claim_free(self, staying: Sequence[Running]) -> list[Claimed]:
        """Claim the free slots (lanes call it for the loops that do not lead): what the threads and
        the prefetch allow, less the attempts ``staying`` and what the claims in flight may fill,
        sized by :func:`~firesafe.worker.prefetch.claim_size`."""
        pipe = self.completer.pipe
        free = claim_size(self.concurrency + self.prefetch.want(), len(staying), self.batch,
                          depth=pipe.depth if pipe is not None else 1,
                          reserved=pipe.reserved() if pipe is not None else 0, concurrency=self.concurrency)
        return self._take(free, suspects=False) if free else []

    def _take(self, limit: int, suspects: bool) -> list[Claimed]:
        """Claim up to ``limit`` jobs (the outbox's outcomes go in the same transaction) and start
        them; with a pipeline they start when the transaction's reply comes (see :meth:`_collect`)."""
        claimed = self.completer.claim(ClaimParams(self.queues, limit, self.id, self.lease, suspects=suspects))
        if not claimed:
            return claimed
        self.stats.claimed += len(claimed)
        start = claimed
        if self._limits is not None:  # jobs under limiters that may not start now were given back (no attempt used)
            admission = self._limits.admit(claimed)
            start = admission.start
            self.stats.deferred += admission.deferred
            self.stats.fenced += admission.fenced
        for c in start:
            self._start(c)
        return claimed

    def _start(self, claimed: Claimed) -> None:
        job = claimed.job
        jobdef = self.app.jobs.get(job.name)
        if jobdef is None:
            log.error("job %s has unknown name %r: dead (unknown_job)", job.key, job.name)
            self._end_unrun(claimed, executor.unknown_job(claimed))
            return
        if job.unreadable is not None:
            log.error("job %s has stored arguments that cannot be read: dead (undecodable_payload)", job.key)
            self._end_unrun(claimed, executor.undecodable(claimed))
            return
        attempt = Attempt()
        ctx = Context(JobInfo(job.key, job.name, job.queue, job.attempt, job.max_attempts, job.runs, job.id,
                              claimed.token), store=self.store, app=self.app, is_async=jobdef.is_async,
                      attempt=attempt, on_divergence=jobdef.on_divergence)
        # Sync attempts end by the loop's deadline; async ones are cancelled by their own event loop at
        # the timeout, and the loop's deadline, a little later, ends one that blocks its event loop
        # (time.sleep, a busy loop) and so cannot be cancelled.
        timeout = (jobdef.timeout + max(0.5, jobdef.timeout / 10) if jobdef.is_async else jobdef.timeout) \
            if jobdef.timeout else None
        now = self.monotonic()
        running = Running(claimed, ctx, attempt, now, now + self._startable_for)
        self.running[(job.id, job.runs)] = running
        self._withdraw_due = min(self._withdraw_due, now + self.prefetch.wait, running.lease_until)
        self.quarantine.started((job.id, job.runs), job.lost)

        def task() -> None:
            with self._starting:
                start = self.monotonic()
                if running.done or self._stopping.is_set() or start >= running.lease_until:
                    self._wake.set()  # not to run here: the loop gives it back (see _withdraw)
                    return
                running.started = start
            if running.ctx.cancelled:  # a cancel came (with a heartbeat) while it waited: not started at all
                self._done.put((running, executor.AttemptResult(
                    Cancelled("cancel requested while the job waited for a thread; not started"))))
                self._wake.set()
                return
            hooks = self.app.hooks
            if hooks.attempt_started:  # its value is built only when some hook listens
                hooks.call(hooks.attempt_started, AttemptStarted.of(job, self.id))
            if timeout:
                running.deadline = start + timeout
                self._wake.set()  # the loop's wait must end by this deadline
            try:
                res = executor.execute(jobdef, ctx, job.args, job.kwargs, gate=self._limits)
            except executor.ProcessDeath:
                raise
            except BaseException as exc:  # execute() records what a job raises; this is firesafe's own bug
                log.exception("attempt of %s could not be run", job.key)
                res = executor.AttemptResult(exc, duration=self.monotonic() - start)
            self._done.put((running, res))
            if not self._wake.is_set():  # already set: the loop has yet to look, and will see this one too
                self._wake.set()

        assert self._pool is not None
        self._waiting.put(job, task)
        self._pool.submit(self._run_next)

    def _run_next(self) -> None:
        """A pool thread's task: run the waiting job that ranks first (priorities; see :class:`Waiting`)."""
        self._waiting.take()()

    def _end_unrun(self, claimed: Claimed, fin: FinishParams) -> None:
        """Save the outcome of a claimed job that cannot run here (booked and told to the hooks as any
        attempt's). A store fault keeps it to save again (see :meth:`_flush`) without stopping the
        start of the jobs claimed with it."""
        try:
            self.completer.complete([fin], [(Unrun(claimed), None)])
        except StoreError as exc:
            log.error("could not save the outcome of a job that cannot run (%s); saving it again later", exc)

    def _flush(self) -> None:
        """Save again what store faults kept, then collect the outcomes that came back for the next
        claim's transaction (the completer's outbox)."""
        self.completer.retry()  # outcomes a store fault kept from being saved: they still hold their leases
        finishes: list[FinishParams] = []
        meta: Meta = []
        while True:
            try:
                running, res = self._done.get_nowait()
            except queue.Empty:
                break
            if running.done:  # already concluded as timed out or released: the late result is void
                self.running.pop((running.claimed.job.id, running.claimed.job.runs), None)
                log.warning("late result of %s dropped (attempt already ended)", running.claimed.job.key)
                self.stats.fenced += 1
                continue
            self.prefetch.note(res.duration)
            jobdef = self.app.jobs[running.claimed.job.name]
            finishes.append(executor.conclude(running.claimed, jobdef, res, self.random.random(),
                                              cancel_requested=running.ctx.cancelled,
                                              detail=running.attempt.detail()))
            meta.append((running, res))
            running.saving = True
        settled: Meta | None = meta
        if finishes and self._limits is not None:  # Retry-After, breakers: may give attempts back
            finishes, settled = self._limits.settle(finishes, meta)
        if finishes:
            self.completer.complete(finishes, settled, hold=True)

    def _save_outbox(self, here: bool = False) -> None:
        """Save the outcomes :meth:`_flush` collected that no claim took along: through the pipeline
        if there is one (when it has room; else they wait for the next claim), else (or ``here``) in a
        transaction of the loop's own."""
        self.completer.send(here)

    def _timeouts(self) -> None:
        now = self.monotonic()
        if self._stopping.is_set() or (len(self.running) > self.concurrency  # some may wait for a thread
                                       and now >= self._withdraw_due):
            self._withdraw(now)
        expired = [r for r in self.running.values()
                   if r.deadline and not r.done and not r.saving and now >= r.deadline]
        if not expired:
            return
        finishes = []
        for r in expired:
            jobdef = self.app.jobs[r.claimed.job.name]
            duration = now - (r.started or now)
            self.prefetch.note(duration)
            res = executor.AttemptResult(
                executor.TimedOut(f"the attempt ran longer than its timeout of {jobdef.timeout:g}s"),
                timed_out=True, duration=duration)
            r.attempt.request_cancel()
            finishes.append(executor.conclude(r.claimed, jobdef, res, self.random.random(), detail=r.attempt.detail()))
            r.done = True  # keeps its slot until the thread really returns
        meta: Meta | None = [(r, None) for r in expired]
        if self._limits is not None:  # a timeout counts toward the breaker
            finishes, meta = self._limits.settle(finishes, meta, keep_slots=True)
        if finishes:
            self.completer.complete(finishes, meta, keep_slots=True)

    def _withdraw(self, now: float) -> None:
        """Give back the prefetched jobs no thread has started that should not wait here any longer:
        all of them once the worker is stopping; one that waited ``Prefetch.wait`` (every thread is
        busy with something long, or stuck in an attempt past its timeout), so another worker can run
        it; one whose lease may lapse (heartbeats failing). Each is recorded as ``interrupted`` and is
        runnable again at once, its attempt given back. One whose lease was lost is only forgotten.
        A wait that long also stops prefetching (the attempts ahead are that long at least), so this
        worker does not take the same job back while its threads are still busy."""
        stopping = self._stopping.is_set()
        wait = self.prefetch.wait
        out: list[tuple[Running, str]] = []
        due = math.inf  # when the next of those that stay would be given back: no need to look before
        with self._starting:  # a thread starts a waiting job, or the loop takes it back: never both
            for key, r in list(self.running.items()):
                if r.started is not None:
                    continue
                if r.done:  # its lease was lost while it waited (see _heartbeat): nothing to save
                    del self.running[key]
                elif stopping or now - r.claimed_at >= wait or now >= r.lease_until:
                    self.prefetch.waited(now - r.claimed_at)
                    r.done = True
                    out.append((r, "the worker stopped before the attempt started" if stopping else
                                f"waited {now - r.claimed_at:.1f}s for a thread of this worker; given back"))
                else:
                    due = min(due, r.claimed_at + wait, r.lease_until)
        self._withdraw_due = due
        if out:
            self.completer.complete([released(r.claimed, why) for r, why in out], [(r, None) for r, _ in out])

    def _book(self, finishes: list[FinishParams], meta: Meta | None, applied: list[bool],
              keep_slots: bool = False) -> None:
        """Account for saved outcomes (the completer calls this once their transaction committed):
        free slots, count, log, run the finish hooks."""
        info = log.isEnabledFor(logging.INFO)  # else skip building the log fields (once per attempt)
        debug = log.isEnabledFor(logging.DEBUG)
        for i, (fin, ok) in enumerate(zip(finishes, applied, strict=True)):
            running = meta[i][0] if meta else None
            if running is not None and not keep_slots:
                self.running.pop((fin.job_id, running.claimed.job.runs), None)
            if not ok:
                self.stats.fenced += 1
                log.warning("attempt of %s ended after its lease was lost; its result was dropped",
                            running.claimed.job.key if running else fin.job_id)
                continue
            self._count(fin)
            # A limiter's wait (gate.waited) is bookkeeping: DEBUG; the limiter's INFO summary counts it.
            wait = fin.reason == "limiter" and fin.outcome == "deferred"
            if not (debug if wait else info):
                continue
            key = running.claimed.job.key if running else str(fin.job_id)
            name = running.claimed.job.name if running else "?"
            duration = (self.monotonic() - running.started) if running and running.started else 0.0
            log.log(logging.DEBUG if wait else logging.INFO, "%s %s attempt=%s outcome=%s state=%s duration=%.3fs%s",
                    name, key, running.claimed.job.attempt if running else "?", fin.outcome, fin.state, duration,
                    f" error={fin.error_type}: {fin.message}" if fin.error_type and fin.outcome != "succeeded"
                    else "",
                    extra={"job_key": key, "job_name": name, "outcome": str(fin.outcome),
                           "state": str(fin.state), "duration": round(duration, 6)})
        hooks = self.app.hooks
        if hooks.attempt_ended or hooks.job_dead:  # their values are built only when some hook listens
            self._report(finishes, meta, applied)

    def _report(self, finishes: list[FinishParams], meta: Meta | None, applied: list[bool]) -> None:
        """Tell the hooks of the attempts whose outcomes were committed (those dropped by the fence
        were not), and of the jobs that became dead letters. A hook's exception is logged, never
        raised: the outcomes are saved already."""
        hooks = self.app.hooks
        for i, (fin, ok) in enumerate(zip(finishes, applied, strict=True)):
            running = meta[i][0] if meta and ok else None
            if running is None:  # fenced: its result was dropped
                continue
            job = running.claimed.job
            res = meta[i][1] if meta else None
            duration = res.duration if res is not None else (
                self.monotonic() - running.started if running.started is not None else 0.0)
            if hooks.attempt_ended:
                hooks.call(hooks.attempt_ended, AttemptEnded.of(job, fin, self.id, duration))
            if fin.state == State.DEAD and hooks.job_dead:
                hooks.call(hooks.job_dead, JobDead.of(job, fin, self.id))

    def _count(self, fin: FinishParams) -> None:
        s = self.stats
        s.by_outcome[str(fin.outcome)] = s.by_outcome.get(str(fin.outcome), 0) + 1
        if fin.state == State.SUCCEEDED:
            s.succeeded += 1
        elif fin.state == State.DEAD:
            s.dead += 1
        elif fin.given_back:
            s.deferred += 1
        else:
            s.failed += 1

    def _heartbeat(self) -> None:
        self.store.worker_beat(self.id, socket.gethostname(), os.getpid(), self.queues)
        live = self._held()
        if not live:
            return
        beat = self.monotonic()
        held = self.store.job_heartbeat_many([(r.claimed.job.id, r.claimed.token) for r in live], self.lease)
        for r in live:
            job_id = r.claimed.job.id
            if job_id not in held:
                log.warning("lease of %s was lost (rescued elsewhere?); asking the attempt to stop",
                            r.claimed.job.key)
                r.attempt.request_cancel()
                r.done = True
                self._withdraw_due = 0.0  # if it waited for a thread, forget it now (see _withdraw)
                continue
            r.lease_until = beat + self._startable_for
            if held[job_id]:
                r.attempt.request_cancel()

    def _rescue(self) -> None:
        expired = self.store.job_list_expired(limit=500)
        if not expired:
            return
        items = []
        for e in expired:
            jobdef = self.app.jobs.get(e.name)
            backoff = jobdef.backoff if jobdef else Backoff()
            reason: str | None
            if e.cancel_requested:
                state, delay, reason = State.CANCELLED, None, "cancelled"
            else:
                d = decide_lost(Budget(e.attempt, e.max_attempts, e.deferrals), e.lost + 1, self.max_lost,
                                backoff, self.random.random())
                state, delay, reason = d.state, d.delay, d.reason
            msg = "the worker running this attempt stopped heartbeating (killed, crashed or hung)"
            items.append(RescueParams(e.id, e.token, e.runs, state, delay, reason, msg))
        applied = self.store.job_rescue_many(items)
        n = sum(applied)
        self.stats.rescued += n
        if n:
            log.warning("rescued %d job(s) whose worker stopped heartbeating", n)
        hooks = self.app.hooks
        if hooks.job_dead:  # jobs lost too often are dead letters now: told once their rescue committed
            for e, it, ok in zip(expired, items, applied, strict=True):
                if ok and it.state == State.DEAD:
                    hooks.call(hooks.job_dead, JobDead.rescued(e, it, self.id))

    def _release_all(self) -> None:
        pending = self._held()  # not those unanswered after the settle: their leases run out
        if not pending:
            return
        log.warning("releasing %d running job(s) that did not finish within the grace period", len(pending))
        for r in pending:
            r.attempt.request_cancel()
            r.done = True
        try:  # booked as any outcome (counted, logged, the finish hooks run); the slots free at shutdown
            self.completer.complete([released(r.claimed, "worker shut down before the attempt ended")
                                     for r in pending], [(r, None) for r in pending], keep_slots=True)
        except StoreError as exc:
            log.error("could not release jobs (%s); their leases will expire and they will be rescued", exc)

    def _shutdown(self) -> None:
        self._stopping.set()  # however the loop ended: no waiting job starts now
        if self._group is not None and self._leads:  # the other loops may claim again (see LaneGroup)
            self._group.suspect_done()
        try:
            self._settle()
        except StoreError as exc:
            log.error("could not save results (%s); the leases will expire and be rescued", exc)
        self.completer.close_pipeline()  # from here on the loop saves in transactions of its own
        try:
            self._flush()
            self._save_outbox()
            self._withdraw(self.monotonic())
        except StoreError as exc:
            log.error("could not save final results (%s); the leases will expire and be rescued", exc)
        if self._pool:
            self._pool.shutdown()
        try:
            self.store.worker_remove(self.id)
            self.quarantine.release()
        except StoreError:
            pass
        log.info("worker %s stopped: %s", self.id, json.dumps(self.stats.__dict__))


def install_signal_handlers(stop: Any, grace: float) -> None:
    """SIGTERM/SIGINT call ``stop`` (running attempts get ``grace`` seconds); a second one exits now."""
    signals = 0

    def handler(signum: int, frame: Any) -> None:
        nonlocal signals
        signals += 1
        if signals > 1:
            log.warning("second signal: exiting now; leases of running jobs will expire and be rescued")
            os._exit(1)
        log.info("signal %s: finishing running jobs (grace %.0fs), claiming no more", signum, grace)
        # Not stop() here: Event.set() takes a lock the interrupted main thread may hold.
        threading.Thread(target=stop, name="firesafe-stop", daemon=True).start()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
