"""The worker loop: claim in batches, run attempts on a thread pool, commit outcomes in batches.

One thread (the loop) decides what the store is asked; attempts run on pool threads and hand their
outcomes back through a queue. A batch's outcomes and the next claim go to the store in one
transaction, run by the loop itself or, with a pipeline (firesafe/worker/pipeline.py, the default
on PostgreSQL), by committer threads while the loop goes on. The loop also extends leases
(heartbeats), enforces timeouts, rescues jobs whose worker died, and prunes finished jobs past
their retention.
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from firesafe.context import Context, JobInfo
from firesafe.errors import Cancelled, ConfigError, StoreDataError, StoreError
from firesafe.retries.backoff import Backoff
from firesafe.retries.decide import DEFAULT_MAX_LOST, Budget, decide_lost
from firesafe.states import State
from firesafe.store.base import Claimed, ClaimParams, FinishParams, RescueParams
from firesafe.worker import collector, executor
from firesafe.worker.pipeline import DEFAULT_DEPTH, Request, StorePipeline
from firesafe.worker.pool import Pool

if TYPE_CHECKING:
    from firesafe.app import App
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
class _Running:
    claimed: Claimed
    ctx: Context
    claimed_at: float  # time.monotonic() of the claim
    lease_until: float  # a job still waiting for a thread starts only before this (see Worker._start)
    started: float | None = None  # when a pool thread began it (None while it waits, prefetched)
    deadline: float | None = None
    done: bool = False  # concluded by the loop (timeout, release, lease lost): a late result is dropped
    saving: bool = False  # its outcome came back and is being saved (in the outbox, in flight, or unsaved)


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
        self._pace: float | None = None  # moving average of attempt durations (seconds)
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
        self._done: queue.SimpleQueue[tuple[_Running, executor.AttemptResult]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        # By (job id, run): a timed-out or lost attempt keeps its slot until its thread returns, while
        # the same job may already run again here.
        self._running: dict[tuple[int, int], _Running] = {}
        self._suspects: set[tuple[int, int]] = set()  # keys of attempts of jobs lost before (some left _running)
        # When a job waiting for a thread may next have to be given back (see _withdraw), monotonic.
        self._withdraw_due = 0.0
        self._pool: Pool | None = None
        # Quarantine: one worker per queue set (a leader lease) runs suspects, alone.
        self._isolation_name = "isolator:" + ",".join(sorted(self.queues))
        self._isolating = False
        self._suspects_due = False
        self._idle_probe_at = 0.0  # when an isolating worker with nothing running may look for suspects again
        self._unsaved: list[tuple[list[FinishParams], list[tuple[_Running, Any]] | None, bool]] = []
        # Outcomes collected by _flush, saved by the next claim in the same transaction (one commit
        # a batch, not two), or by _save_outbox when the loop claims nothing.
        self._outbox: tuple[list[FinishParams], list[tuple[_Running, Any]]] | None = None
        self._linger_until: float | None = None  # outcomes wait until then for the rest of their batch
        # Limiters (firesafe/limits): None unless the app declares some; checks their config now.
        self._limits: Any = None
        if app.limiters or any(j.limiters for j in app.jobs.values()):
            from firesafe.limits.gate import Gate

            self._limits = Gate(self)
        # Jobs claimed beyond the threads, to start as soon as a thread is free (see _prefetching):
        # ``prefetch`` is the most; None sizes it by the attempts' pace, from the concurrency up to
        # PREFETCH_HOLD jobs held in all. Off with limiters (a waiting job would hold its tokens) and
        # when the app has a job of a single attempt (a prefetched job lost with its worker uses an
        # attempt: such a job would go dead without having run; any queue, since enqueue may
        # override a job's queue).
        self._prefetch_sized = prefetch is None
        hold = self.PREFETCH_HOLD // (group.size if group is not None else 1)  # the loops share it
        self.prefetch = (max(self.concurrency, hold - self.concurrency) if prefetch is None
                         else max(0, prefetch))
        if self._limits is not None or any(j.max_attempts == 1 for j in app.jobs.values()):
            self.prefetch = 0
        self.batch = batch or self.concurrency + self.prefetch
        # Store transactions in flight (firesafe/worker/pipeline.py): by default two where the store
        # has concurrent writers and the loop prefetches (so that a batch runs while the next one's
        # transaction does) and is its process's only one; otherwise one, the loop waiting for each.
        # A suspect is always claimed with nothing in flight, and limiters keep the loop to one.
        if pipeline is None:
            pipeline = DEFAULT_DEPTH if getattr(self.store, "concurrent_writers", False) and self.prefetch else 1
        elif isinstance(pipeline, bool) or not isinstance(pipeline, int) or pipeline < 1:
            raise ConfigError(f"pipeline must be a whole number >= 1, not {pipeline!r}")
        self.pipeline = 1 if group is not None or self._limits is not None else pipeline
        self._pipe: StorePipeline | None = None
        # A claim in the pipeline came back empty: no claim without outcomes goes out until the loop
        # has waited (a poll interval, or a wake-up), as a loop waits after an empty claim of its own.
        self._dry = False

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

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> WorkerStats:
        with collector.tuned():  # see firesafe/worker/collector.py
            return self._run()

    def _run(self) -> WorkerStats:
        self._pool = Pool(self.concurrency)
        if self.pipeline > 1:
            self._pipe = StorePipeline(self.store, self.pipeline, self._wake.set)
        # A store that can push wake-ups (PostgreSQL LISTEN/NOTIFY) ends the idle wait as soon as a job
        # arrives; polling every poll_interval stays the fallback.
        # With several claim loops the leader's listener wakes them all (one LISTEN connection).
        wake = self._wake.set if self._group is None else self._group.wake_all
        listener = self.store.listen(self.queues, wake) if (
            not self.burst and self._leads and hasattr(self.store, "listen")) else None
        # Background duties (alert dispatch, ...) run in threads of their own: a slow one never
        # slows this loop.
        duties = self.app._start_duties(self) if self._leads else []
        store_backoff = Backoff(base=0.5, factor=2.0, cap=15.0, jitter="equal")
        faults = 0
        last_beat = last_rescue = last_prune = 0.0
        stop_at: float | None = None
        log.info("worker %s started: queues=%s concurrency=%d prefetch=%s pipeline=%d%s", self.id,
                 ",".join(self.queues), self.concurrency, f"paced(max={self.prefetch})"
                 if self._prefetch_sized and self.prefetch else self.prefetch, self.pipeline,
                 f" lane={self.lane + 1}/{self._group.size}" if self._group else "")
        try:
            while True:
                try:
                    self._collect()
                    now = time.monotonic()
                    if now - last_beat >= self.heartbeat_interval:
                        self._heartbeat()
                        last_beat = now
                    if now - last_rescue >= self.rescue_interval and self._leads:
                        self._rescue()
                        self._check_isolation()
                        last_rescue = now
                    if now - last_prune >= self.app.prune_interval and self._leads:
                        self.app.prune()
                        last_prune = now
                    lingering = self._linger()
                    if not lingering:
                        self._flush()
                    self._timeouts()
                    if self._stopping.is_set():
                        self._save_outbox()
                        if stop_at is None:
                            stop_at = time.monotonic() + self.grace
                        if not self._busy() or time.monotonic() >= stop_at:
                            self._release_all()  # not the outcomes in flight: _shutdown waits for those
                            break
                        self._wake.wait(0.05)
                        self._wake.clear()
                        continue
                    # While outcomes linger for the rest of their batch, the free slots wait too: the
                    # claim goes with those outcomes, in their transaction, instead of in one of its own.
                    claimed = [] if lingering else self._claim()
                    self._save_outbox()
                    if faults:
                        log.info("store is reachable again; resuming")
                        faults = 0
                    if not claimed and not self._busy() and self.burst and self._idle():
                        break
                    if not claimed:
                        self._wake.wait(self._sleep_time())
                        self._wake.clear()
                        self._dry = False
                except StoreError as exc:
                    faults += 1
                    pause = store_backoff.delay(faults, self.random.random())
                    if self._stopping.is_set():  # a fault while stopping: wait it out until the grace ends
                        stop_at = stop_at or time.monotonic() + self.grace
                        left = stop_at - time.monotonic()
                        if left <= 0:
                            log.error("store fault (%s) outlasted the grace period; stopping without saving "
                                      "(leases will expire and the jobs be rescued)", exc)
                            break
                        log.error("store fault (%s); retrying in %.1fs", exc, min(pause, left))
                        time.sleep(min(pause, left))  # the stop event is set: waiting on it would spin
                        continue
                    log.error("store fault (%s); retrying in %.1fs", exc, pause)
                    if self._stopping.wait(pause):
                        stop_at = stop_at or time.monotonic() + self.grace
        finally:
            if listener is not None:
                listener.close()
            self._shutdown()
            for stop in duties:
                stop()
        return self.stats

    def _live(self) -> bool:
        """Whether an attempt is still to conclude here. One concluded as timed out whose thread has
        not returned (a job that ignores ``ctx.cancelled``) keeps its thread's slot, but nothing waits
        for it: its outcome is saved, so a burst worker may end and a stopping one need not wait."""
        return any(not r.done for r in self._running.values())

    def _busy(self) -> bool:
        """Whether anything is left to do here: an attempt to conclude, or outcomes and claims still to
        be saved or answered (in the outbox, or in the pipeline)."""
        return self._live() or self._outbox is not None or bool(self._pipe and self._pipe.in_flight)

    def _in_flight(self) -> set[tuple[int, int]]:
        """The attempts whose outcomes are in the pipeline, by ``(job id, run)``."""
        if self._pipe is None:
            return set()
        return {(r.claimed.job.id, r.claimed.job.runs) for req in self._pipe.in_flight for r, _ in req.meta}

    def _held(self) -> list[_Running]:
        """The attempts whose leases this loop keeps or gives back: not concluded, and their outcome
        not in the pipeline (the commit in flight ends those leases, or they run out)."""
        flying = self._in_flight()
        return [r for k, r in self._running.items() if not r.done and k not in flying]

    def _collect(self) -> None:
        """Take in the pipeline's requests that finished: book their outcomes, start the jobs they
        claimed. One that failed keeps its outcomes to save again (see :meth:`_flush`), its claim
        took nothing, and its error is raised once the others are in; unless the store refused some
        outcome's data (not a fault of the store: :meth:`_save` saves them apart, at once)."""
        if self._pipe is None:
            return
        error: BaseException | None = None
        for req in self._pipe.completed():
            if req.error is not None:
                if req.finishes:
                    self._unsaved.append((req.finishes, req.meta, False))
                if not isinstance(req.error, StoreDataError):
                    error = error or req.error
                continue
            if req.finishes:
                self._book(req.finishes, req.meta, req.applied)
            if req.claim is not None and not req.claimed:
                self._dry = True
            self.stats.claimed += len(req.claimed)
            for c in req.claimed:
                self._start(c)
        if error is not None:
            raise error

    #: How long a stopping worker waits for the transactions in its pipeline (seconds).
    SETTLE = 10.0

    def _settle(self) -> None:
        """Wait for the pipeline's transactions in flight (up to ``SETTLE`` seconds) and take them in."""
        if self._pipe is not None and self._pipe.in_flight:
            if not self._pipe.wait_settled(self.SETTLE):
                log.error("%d store transaction(s) still unanswered after %.0fs; their leases will expire and "
                          "their jobs be rescued", len(self._pipe.in_flight), self.SETTLE)
            self._collect()

    #: How long outcomes that came back may wait for the rest of their batch (see :meth:`_linger`).
    LINGER = 0.002

    def _linger(self) -> bool:
        """Hold the outcomes that came back while the rest of their batch still runs, for up to
        ``LINGER`` seconds, so that one commit saves them all. Each commit costs a disk flush; saving
        whatever is back at each wake-up splits a busy worker's batches in two (claims of 4 and saves of 4
        instead of 8 and 8), which halves its throughput. Nothing is acknowledged before its commit: an
        outcome only waits a little longer in memory, its lease held and heartbeated as before."""
        back = self._done.qsize()
        if not back or self._unsaved or self._stopping.is_set() or back >= sum(
                1 for r in self._running.values() if not r.done and not r.saving):
            self._linger_until = None
            return False
        now = time.monotonic()
        if self._linger_until is None:
            self._linger_until = now + self.LINGER
        if now < self._linger_until:
            return True
        self._linger_until = None
        return False

    def _sleep_time(self) -> float:
        wait = self.poll_interval
        if self._linger_until is not None:
            wait = min(wait, max(0.0, self._linger_until - time.monotonic()))
        # Attempts end by their deadline; jobs waiting for a thread are given back after PREFETCH_WAIT.
        deadlines = [r.claimed_at + self.PREFETCH_WAIT if r.started is None else r.deadline
                     for r in self._running.values() if not r.done and (r.started is None or r.deadline)]
        if deadlines:
            wait = min(wait, max(0.0, min(deadlines) - time.monotonic()))
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
        killing it) runs alone, in the one worker holding the isolation lease, so a poison job
        cannot take the jobs beside it down with it: they never share its process."""
        # The attempts whose outcomes wait in the outbox free their slots with this claim, and so do
        # those whose outcomes are in flight (a claim in flight holds the slots it may fill instead).
        leaving = self._in_flight()
        if self._outbox:
            leaving.update((r.claimed.job.id, r.claimed.job.runs) for r, _ in self._outbox[1])
        staying = [r for k, r in self._running.items() if k not in leaving]
        if self._suspects:  # the attempts of suspects still here (nearly always none)
            self._suspects = {k for k in self._suspects if k in self._running}
            if any(k not in leaving for k in self._suspects):
                return []
        flying = bool(self._pipe and self._pipe.in_flight)
        group = self._group
        if group is not None and not self._leads:  # another loop of this process: see LaneGroup
            return group.claim_beside(lambda: self._take_free(staying))
        idle_probe = (not staying and not flying and time.monotonic() >= self._idle_probe_at
                      and (group is None or not group.others_busy(self)))
        if self._isolating and (self._suspects_due or idle_probe):
            if (group is not None and not group.clear_for_suspect(self)) or staying or flying:
                return []  # let the running attempts finish (this loop's and the others'), then run it alone
            self._save_outbox(here=True)  # a suspect is claimed on its own, with nothing in flight
            claimed = self._take(1, suspects=True)
            if claimed:
                return claimed
            self._suspects_due = False
            # Looking for suspects that are not there scans the waiting jobs (no index has `lost`):
            # a worker draining a backlog is idle between every two batches, so look once per poll.
            self._idle_probe_at = time.monotonic() + self.poll_interval
        if group is not None:
            group.suspect_done()
        return self._take_free(staying)

    def _take_free(self, staying: list[_Running]) -> list[Claimed]:
        """Claim the free slots: what the threads and the prefetch allow, less what stays and what the
        claims in flight may fill, at most a batch. With a pipeline, at most a share of the whole
        (one transaction's worth of ``depth``), so that the next claim has slots to fill while this
        one is in flight: a claim of everything would leave the pipeline's other committer idle,
        the loop and the store taking turns again (measured: a no-op drain on PostgreSQL had two
        transactions in flight 0% of the time, of 512 jobs each; with shares of 256, 55%). A share
        is never less than the threads, so a worker that prefetches nothing claims as without one."""
        want = self.concurrency + self._prefetching()
        free = min(want - len(staying), self.batch)
        if self._pipe is not None:
            share = max(self.concurrency, -(-want // self._pipe.depth))
            free = min(free - self._pipe.reserved(), share)
        if free <= 0:
            return []
        return self._take(free, suspects=False)

    #: Prefetch only while attempts average less than this (seconds).
    PREFETCH_BELOW = 0.02
    #: A prefetched job that waited this long for a thread is given back for other workers (seconds).
    PREFETCH_WAIT = 1.0
    #: A prefetch sized by the pace (the default) holds at most this many jobs, running and waiting,
    #: or twice the concurrency if that is more. The pace keeps it to what the threads run in about
    #: PREFETCH_BELOW, so only attempts well under a millisecond reach it (docs/operations.md).
    PREFETCH_HOLD = 512

    def _prefetching(self) -> int:
        """How many jobs to claim beyond the free threads while attempts are short, else 0.

        Each batch of outcomes costs one commit (a disk flush on SQLite, a round trip and a WAL flush
        on PostgreSQL). With short jobs that commit, not the jobs, sets the pace: claiming beyond the
        threads saves more outcomes per commit, and a thread that frees up starts a waiting job at
        once instead of after the next commit. A prefetched job waits behind the running ones, so
        only while their moving average (each attempt weighs a fifth) is under ``PREFETCH_BELOW``;
        a job that waits ``PREFETCH_WAIT`` all the same is given back (see :meth:`_withdraw`). Off
        entirely for some apps (see ``__init__``).

        How many: ``prefetch`` if it was given. By default, as many as the threads run in about
        ``PREFETCH_BELOW`` at the current pace (k waiting jobs wait about k x pace / concurrency
        for the last to start), at least the concurrency and at most ``self.prefetch``."""
        pace = self._pace
        if not self.prefetch or pace is None or pace >= self.PREFETCH_BELOW:
            return 0
        if not self._prefetch_sized:
            return self.prefetch
        within = int(self.concurrency * self.PREFETCH_BELOW / max(pace, 1e-6))
        return max(self.concurrency, min(self.prefetch, within))

    def _note_duration(self, seconds: float) -> None:
        self._pace = seconds if self._pace is None else self._pace + 0.2 * (seconds - self._pace)

    def _check_isolation(self) -> None:
        ttl = max(self.lease, 3 * self.rescue_interval)
        self._isolating = self.store.leader_acquire(self._isolation_name, self.id, ttl)
        if self._isolating:
            self._suspects_due = self.store.job_pending(self.queues).suspects > 0

    def _take(self, limit: int, suspects: bool) -> list[Claimed]:
        params = ClaimParams(self.queues, limit, self.id, self.lease, suspects=suspects)
        if self._pipe is not None and not suspects:  # the claimed jobs start when its reply comes (_collect)
            if self._pipe.room and (self._outbox or not self._dry):
                finishes, meta = self._outbox or ([], [])
                self._outbox = None
                self._pipe.submit(Request(finishes, meta, params))
            return []
        outbox, self._outbox = self._outbox, None
        if outbox is None:
            claimed = self.store.job_claim(params)
        else:  # the outcomes of the last batch and the claim of the next: one transaction
            finishes, meta = outbox
            try:
                applied, claimed = self.store.job_finish_and_claim(finishes, params)
            except StoreDataError as exc:  # some outcome's data, not the store: saved apart, then the claim
                self._save_apart(finishes, meta, False, exc)
                claimed = self.store.job_claim(params)
            except StoreError:
                self._unsaved.append((finishes, meta, False))
                raise
            else:
                self._book(finishes, meta, applied)
        self.stats.claimed += len(claimed)
        # Jobs under limiters that may not start now are given back in the store (no attempt used).
        for c in self._limits.admit(claimed) if self._limits is not None else claimed:
            self._start(c)
        return claimed

    def _start(self, claimed: Claimed) -> None:
        job = claimed.job
        jobdef = self.app.jobs.get(job.name)
        if jobdef is None:
            log.error("job %s has unknown name %r: dead (unknown_job)", job.key, job.name)
            self._end_unrun(executor.unknown_job(claimed))
            return
        if job.unreadable is not None:
            log.error("job %s has stored arguments that cannot be read: dead (undecodable_payload)", job.key)
            self._end_unrun(executor.undecodable(claimed))
            return
        ctx = Context(JobInfo(job.key, job.name, job.queue, job.attempt, job.max_attempts, job.runs, job.id),
                      store=self.store, app=self.app, token=claimed.token, is_async=jobdef.is_async,
                      gate=self._limits)
        # Sync attempts end by the loop's deadline; async ones are cancelled by their own event loop at
        # the timeout, and the loop's deadline, a little later, ends one that blocks its event loop
        # (time.sleep, a busy loop) and so cannot be cancelled.
        timeout = (jobdef.timeout + max(0.5, jobdef.timeout / 10) if jobdef.is_async else jobdef.timeout) \
            if jobdef.timeout else None
        now = time.monotonic()
        running = _Running(claimed, ctx, now, now + self._startable_for)
        self._running[(job.id, job.runs)] = running
        self._withdraw_due = min(self._withdraw_due, now + self.PREFETCH_WAIT, running.lease_until)
        if job.lost > 0:
            self._suspects.add((job.id, job.runs))

        def task() -> None:
            with self._starting:
                start = time.monotonic()
                if running.done or self._stopping.is_set() or start >= running.lease_until:
                    self._wake.set()  # not to run here: the loop gives it back (see _withdraw)
                    return
                running.started = start
            if running.ctx.cancelled:  # a cancel came (with a heartbeat) while it waited: not started at all
                self._done.put((running, executor.AttemptResult(
                    Cancelled("cancel requested while the job waited for a thread; not started"))))
                self._wake.set()
                return
            if timeout:
                running.deadline = start + timeout
                self._wake.set()  # the loop's wait must end by this deadline
            try:
                res = executor.execute(jobdef, ctx, job.args, job.kwargs)
            except executor.ProcessDeath:
                raise
            except BaseException as exc:  # execute() records what a job raises; this is firesafe's own bug
                log.exception("attempt of %s could not be run", job.key)
                res = executor.AttemptResult(exc, duration=time.monotonic() - start)
            self._done.put((running, res))
            if not self._wake.is_set():  # already set: the loop has yet to look, and will see this one too
                self._wake.set()

        assert self._pool is not None
        self._pool.submit(task)

    def _end_unrun(self, fin: FinishParams) -> None:
        """Save the outcome of a claimed job that cannot run here. A store fault keeps it to save
        again (see :meth:`_flush`) without stopping the start of the jobs claimed with it."""
        try:
            self._save([fin])
        except StoreError as exc:
            log.error("could not save the outcome of a job that cannot run (%s); saving it again later", exc)

    def _flush(self) -> None:
        while self._unsaved:  # outcomes a store fault kept from being saved: they still hold their leases
            self._save(*self._unsaved.pop(0))
        finishes: list[FinishParams] = []
        meta: list[tuple[_Running, executor.AttemptResult | None]] = []
        while True:
            try:
                running, res = self._done.get_nowait()
            except queue.Empty:
                break
            if running.done:  # already concluded as timed out or released: the late result is void
                self._running.pop((running.claimed.job.id, running.claimed.job.runs), None)
                log.warning("late result of %s dropped (attempt already ended)", running.claimed.job.key)
                self.stats.fenced += 1
                continue
            self._note_duration(res.duration)
            jobdef = self.app.jobs[running.claimed.job.name]
            finishes.append(executor.conclude(running.claimed, jobdef, res, self.random.random(),
                                              cancel_requested=running.ctx.cancelled,
                                              detail=running.ctx._detail()))
            meta.append((running, res))
            running.saving = True
        if finishes and self._limits is not None:  # Retry-After, breakers: may give attempts back
            finishes, meta = self._limits.settle(finishes, meta)  # type: ignore[assignment]
        if finishes:
            if self._outbox is not None:  # a store fault before the last claim left some: save all together
                finishes, meta = self._outbox[0] + finishes, self._outbox[1] + meta
            self._outbox = (finishes, meta)  # type: ignore[assignment]

    def _save_outbox(self, here: bool = False) -> None:
        """Save the outcomes :meth:`_flush` collected that no claim took along: through the pipeline
        if there is one (when it has room; else they wait for the next claim), else (or ``here``) in a
        transaction of the loop's own."""
        if self._outbox is None:
            return
        if self._pipe is not None and not here:
            if self._pipe.room:
                finishes, meta = self._outbox
                self._outbox = None
                self._pipe.submit(Request(finishes, meta, None))
            return
        finishes, meta = self._outbox
        self._outbox = None
        self._save(finishes, meta)

    def _timeouts(self) -> None:
        now = time.monotonic()
        if self._stopping.is_set() or (len(self._running) > self.concurrency  # some may wait for a thread
                                       and now >= self._withdraw_due):
            self._withdraw(now)
        expired = [r for r in self._running.values()
                   if r.deadline and not r.done and not r.saving and now >= r.deadline]
        if not expired:
            return
        finishes = []
        for r in expired:
            jobdef = self.app.jobs[r.claimed.job.name]
            duration = now - (r.started or now)
            self._note_duration(duration)
            res = executor.AttemptResult(
                executor.TimedOut(f"the attempt ran longer than its timeout of {jobdef.timeout:g}s"),
                timed_out=True, duration=duration)
            r.ctx._request_cancel()
            finishes.append(executor.conclude(r.claimed, jobdef, res, self.random.random(), detail=r.ctx._detail()))
            r.done = True  # keeps its slot until the thread really returns
        meta: list[tuple[_Running, Any]] | None = [(r, None) for r in expired]
        if self._limits is not None:  # a timeout counts toward the breaker
            finishes, meta = self._limits.settle(finishes, meta, keep_slots=True)
        if finishes:
            self._save(finishes, meta, keep_slots=True)

    def _withdraw(self, now: float) -> None:
        """Give back the prefetched jobs no thread has started that should not wait here any longer:
        all of them once the worker is stopping; one that waited ``PREFETCH_WAIT`` (every thread is
        busy with something long, or stuck in an attempt past its timeout), so another worker can run
        it; one whose lease may lapse (heartbeats failing). Each is recorded as ``interrupted`` and is
        runnable again at once, its attempt given back. One whose lease was lost is only forgotten.
        A wait that long also stops prefetching (the attempts ahead are that long at least), so this
        worker does not take the same job back while its threads are still busy."""
        stopping = self._stopping.is_set()
        out: list[tuple[_Running, str]] = []
        due = math.inf  # when the next of those that stay would be given back: no need to look before
        with self._starting:  # a thread starts a waiting job, or the loop takes it back: never both
            for key, r in list(self._running.items()):
                if r.started is not None:
                    continue
                if r.done:  # its lease was lost while it waited (see _heartbeat): nothing to save
                    del self._running[key]
                elif stopping or now - r.claimed_at >= self.PREFETCH_WAIT or now >= r.lease_until:
                    self._pace = max(self._pace or 0.0, now - r.claimed_at, self.PREFETCH_BELOW)
                    r.done = True
                    out.append((r, "the worker stopped before the attempt started" if stopping else
                                f"waited {now - r.claimed_at:.1f}s for a thread of this worker; given back"))
                else:
                    due = min(due, r.claimed_at + self.PREFETCH_WAIT, r.lease_until)
        self._withdraw_due = due
        if out:
            self._save([executor.released(r.claimed, why) for r, why in out], [(r, None) for r, _ in out])

    def _save(self, finishes: list[FinishParams], meta: list[tuple[_Running, Any]] | None = None,
              keep_slots: bool = False) -> None:
        try:
            applied = self.store.job_finish_many(finishes)
        except StoreDataError as exc:
            self._save_apart(finishes, meta, keep_slots, exc)
            return
        except StoreError:
            self._unsaved.append((finishes, meta, keep_slots))
            raise
        self._book(finishes, meta, applied, keep_slots)

    def _save_apart(self, finishes: list[FinishParams], meta: list[tuple[_Running, Any]] | None,
                    keep_slots: bool, refused: StoreDataError) -> None:
        """Save outcomes whose batch the store refused for the data of one of them (``refused``), not
        for a fault of its own: the batch in halves, and halves of those, down to the outcome it
        refuses alone, which is saved with its text in plain ASCII or, refused again, as dead with a
        message saying its outcome could not be recorded (see executor.escaped_ascii and
        executor.unstorable). Every other outcome is saved as it was. No data is retried as it was,
        so this ends; a store fault on the way keeps what is left to save again, and raises."""
        log.warning("the store refused the data of an outcome among %d; saving them apart (%s)", len(finishes),
                    refused)
        n = len(finishes)
        finishes = list(finishes)  # a refused outcome is replaced by what is saved in its place
        metas: list[Any] = list(meta) if meta else [None] * n
        applied: dict[int, bool] = {}  # by position: the outcomes saved, and whether each applied
        parts: list[tuple[list[int], StoreDataError | None]] = [(list(range(n)), refused)]
        try:
            while parts:
                part, error = parts.pop()
                if error is None:
                    try:
                        applied.update(zip(part, self.store.job_finish_many([finishes[i] for i in part]),
                                           strict=True))
                        continue
                    except StoreDataError as exc:
                        error = exc
                if len(part) > 1:
                    half = len(part) // 2
                    parts += [(part[half:], None), (part[:half], None)]  # the first half next
                    continue
                [i] = part
                finishes[i], applied[i] = self._save_refused(finishes[i], error)
        except StoreError:
            left = [i for i in range(n) if i not in applied]
            self._unsaved.append(([finishes[i] for i in left], [metas[i] for i in left] if meta else None,
                                  keep_slots))
            raise
        finally:
            done = sorted(applied)
            if done:
                self._book([finishes[i] for i in done], [metas[i] for i in done] if meta else None,
                           [applied[i] for i in done], keep_slots)

    def _save_refused(self, fin: FinishParams, refused: StoreDataError) -> tuple[FinishParams, bool]:
        """Save one outcome the store refused for its data: as plain ASCII, else as unstorable."""
        for attempt in (executor.escaped_ascii(fin), executor.unstorable(fin, refused)):
            try:
                return attempt, self.store.job_finish_many([attempt])[0]
            except StoreDataError as exc:
                log.error("the store refused the outcome of job id %s (%s)", fin.job_id, exc)
                refused = exc
        # Not even firesafe's own ASCII message: a store that refuses that is at fault.
        raise StoreError(f"the store refused even a plain record of job id {fin.job_id}'s outcome: {refused}")

    def _book(self, finishes: list[FinishParams], meta: list[tuple[_Running, Any]] | None, applied: list[bool],
              keep_slots: bool = False) -> None:
        """Account for saved outcomes: free slots, count, log, run the finish hooks."""
        info = log.isEnabledFor(logging.INFO)  # else skip building the log fields (once per attempt)
        debug = log.isEnabledFor(logging.DEBUG)
        for i, (fin, ok) in enumerate(zip(finishes, applied, strict=True)):
            running = meta[i][0] if meta else None
            if running is not None and not keep_slots:
                self._running.pop((fin.job_id, running.claimed.job.runs), None)
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
            duration = (time.monotonic() - running.started) if running and running.started else 0.0
            log.log(logging.DEBUG if wait else logging.INFO, "%s %s attempt=%s outcome=%s state=%s duration=%.3fs%s",
                    name, key, running.claimed.job.attempt if running else "?", fin.outcome, fin.state, duration,
                    f" error={fin.error_type}: {fin.message}" if fin.error_type and fin.outcome != "succeeded"
                    else "",
                    extra={"job_key": key, "job_name": name, "outcome": str(fin.outcome),
                           "state": str(fin.state), "duration": round(duration, 6)})
        try:
            self.app._after_finish(finishes, applied)
        except Exception:  # a hook's bug must not stop the worker: its outcomes are saved already
            log.exception("an after-finish hook failed")

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
        beat = time.monotonic()
        held = self.store.job_heartbeat_many([(r.claimed.job.id, r.claimed.token) for r in live], self.lease)
        for r in live:
            job_id = r.claimed.job.id
            if job_id not in held:
                log.warning("lease of %s was lost (rescued elsewhere?); asking the attempt to stop",
                            r.claimed.job.key)
                r.ctx._request_cancel()
                r.done = True
                self._withdraw_due = 0.0  # if it waited for a thread, forget it now (see _withdraw)
                continue
            r.lease_until = beat + self._startable_for
            if held[job_id]:
                r.ctx._request_cancel()

    def _rescue(self) -> None:
        expired = self.store.job_list_expired(limit=500)
        if not expired:
            return
        items = []
        for e in expired:
            jobdef = self.app.jobs.get(e.name)
            backoff = jobdef.backoff if jobdef else Backoff()
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
        self.app._after_rescue(items, applied)

    def _release_all(self) -> None:
        pending = self._held()  # not those unanswered after the settle: their leases run out
        if not pending:
            return
        log.warning("releasing %d running job(s) that did not finish within the grace period", len(pending))
        for r in pending:
            r.ctx._request_cancel()
            r.done = True
        try:
            self.store.job_finish_many([executor.released(r.claimed, "worker shut down before the attempt ended")
                                        for r in pending])
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
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None  # from here on the loop saves in transactions of its own
        try:
            self._flush()
            self._save_outbox()
            self._withdraw(time.monotonic())
        except StoreError as exc:
            log.error("could not save final results (%s); the leases will expire and be rescued", exc)
        if self._pool:
            self._pool.shutdown()
        try:
            self.store.worker_remove(self.id)
            if self._isolating:
                self.store.leader_release(self._isolation_name, self.id)
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
