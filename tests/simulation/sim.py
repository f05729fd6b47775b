"""A deterministic simulation: workers, faults and time in one process, on the real store and the
real decisions.

One seed is one scenario: a few jobs of durable steps, two or three workers, and faults at the named
points of :mod:`firesafe.drill.faults`, each with its own probability. The workers are real
:class:`~firesafe.worker.Worker` objects driven one turn of their loop at a time: the simulation
calls :meth:`Worker.turn <firesafe.worker.Worker.turn>`, the loop's body itself (heartbeat, rescue,
prune, save, timeouts, claim), with attempts run inline instead of on threads and the worker's
monotonic clock the simulated one; the store is a real SQLite file on a
:class:`~firesafe.FakeClock`; retries, rescues, fencing and steps are the real code. What a thread
pool and a wall clock would make random comes from one ``random.Random(seed)``, so a seed replays
exactly: the same events, the same stored jobs, the same traces.

A *crash* ends the simulated worker process where it stands (its jobs keep their leases until they
expire and are rescued); a *stall* freezes it for three lease periods while the other workers go on
(a zombie), after which it resumes with everything it believed; an *error* is an exception raised
in the job.

After the scenario settles (and, in some scenarios, after an operator replays the dead jobs) the
invariants are checked; every breach is reported as a violation, with the seed that replays it:

- no job lost: every job enqueued ends ``succeeded`` or ``dead``, none is left running;
- no effect applied twice: with a provider that deduplicates by ``ctx.idempotency_key``, each step
  of each job has its effect applied at most once, and exactly once when the job succeeded;
- attempts never above the job's maximum;
- only the moves the state machine allows (:func:`firesafe.states.can_move`), checked after every
  store call that may move a job;
- every death has its dead-letter alert in the outbox, and every dead job its trace;
- no lost wake-up: a job that waits for a durable signal (kind ``approve``) and was sent it before
  its wait's deadline never sits parked until that deadline; it gets the signal once.
- fan-out (kind ``fan``; one of an odd number of steps first waits for any child with
  ``ctx.wait_any``, then for all): each child is spawned once (its keys), each child's effect applied once,
  the parent woken at most once per park and never parked again in the same run (no early wake),
  never stranded (it ends within :data:`STRANDED` of its last child's end, not at its park's
  safety net), and its result is its step's receipt and its children's results.

Signals come from a sender at a time drawn for each ``approve`` job (before the job waits, or
while it is parked), and at the fault point ``parking``: the job found no signal and is about to
park, still running, when the signal arrives (or its worker crashes or stalls there).

A fan job spawns ``steps + 1`` children (one step each; the ``deny`` ones may die, and their parent
then dies too: ``ChildrenFailed``) and waits for them, with its fault points: ``spawned`` (the
children's insert committed, the spawn step not recorded yet), ``fan_parking`` (its children have
not all ended and it is about to park, still running: they may all end right then, or its worker
crashes or stalls there) and ``woken`` (its wait just returned its children's results).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firesafe.app import App
from firesafe.clock import FakeClock
from firesafe.drill.faults import POINTS, FaultyStore
from firesafe.errors import InvalidInput, Permanent, RetryAfter, StoreError, WaitingForChildren
from firesafe.retries.backoff import Backoff
from firesafe.states import State, can_move
from firesafe.steps import SignalWait
from firesafe.steps.children import child_key
from firesafe.store.base import JobFilter
from firesafe.stores.sqlite import SQLiteStore
from firesafe.worker import Worker
from firesafe.worker.executor import ProcessDeath

#: What each fault point may do (a stall is never nested: a stalled world's workers only crash).
ACTIONS: dict[str, tuple[str, ...]] = {
    "after_claim": ("crash", "stall", "error"),
    "in_step": ("crash", "stall", "error"),
    "after_effect": ("crash", "stall", "error"),
    "before_complete": ("crash", "stall"),
    "heartbeat": ("stall",),
    "store": ("before", "after"),
    "parking": ("signal", "crash", "stall"),  # a wait found no signal and its job is about to park
    "spawned": ("crash", "stall", "error"),  # a fan job's children are stored, its spawn not recorded yet
    "fan_parking": ("children", "crash", "stall"),  # a fan job's children are not all ended: about to park
    "woken": ("crash", "stall", "error"),  # a fan job's wait just returned its children's results
}
#: The simulation's own fault points, beside the drills' (firesafe.drill.faults.POINTS).
SIM_POINTS = (*POINTS, "parking", "spawned", "fan_parking", "woken")
#: Job kinds: plain steps; flaky (transient errors); deny (a permanent error); defer (RetryAfter);
#: nap (a durable sleep between steps); approve (waits for a durable signal between steps); fan
#: (spawns ``steps + 1`` children, waits for them, then runs one step of its own).
KINDS = ("plain", "flaky", "deny", "defer", "nap", "approve", "fan")
#: The kinds of a fan job's children, by index (one step each; a deny child may die, and its parent then too).
CHILD_KINDS = ("plain", "flaky", "deny")
#: The declared job (its max_attempts) a fan job's children run as.
CHILD_JOB = "job3"
#: The spawn and wait steps' name in a fan job (FAN_REST: the second wait of one of an odd number of
#: steps, which first waits for any child with ctx.wait_any, then for all).
FAN = "fan"
FAN_REST = "fan-rest"
#: A parent that ends later than this after its last child ended sat parked for nothing (stranded):
#: far above any backoff, stall or lease of a scenario, far below the parked wait's PARK_MAX.
STRANDED = 3600.0
#: An approve job's wait: far longer than any scenario runs, so a job still parked at its deadline
#: after its signal was sent is a lost wake-up, not a slow world.
SIGNAL_TIMEOUT = 86400.0  # (a day: finished jobs are pruned after a week, which would lose them)
#: Signals are sent within this long of the start: before some jobs wait, while others are parked.
SEND_WITHIN = 90.0
START = 1_800_000_000.0
MAX_TURNS = 20_000
STORE_BACKOFF = Backoff(base=0.5, factor=2.0, cap=15.0, jitter="equal")
RETRY = Backoff(base=1.0, factor=2.0, cap=20.0, jitter="full")


class SimCrash(ProcessDeath):
    """The simulated worker process dies here (a BaseException: no job code can catch it; a
    ProcessDeath: the worker does not record it as the attempt's failure either)."""


@dataclass(frozen=True)
class JobSpec:
    key: str
    kind: str
    steps: int
    max_attempts: int


@dataclass(frozen=True)
class Scenario:
    """Everything a seed decides before the run starts."""

    seed: int
    jobs: tuple[JobSpec, ...]
    workers: int
    concurrency: int
    lease: float
    faults: dict[str, float]
    replay: bool
    dedupe: bool = True

    @classmethod
    def from_seed(cls, seed: int, *, dedupe: bool = True, faults: dict[str, float] | None = None) -> Scenario:
        """The scenario of ``seed``; ``faults`` replaces the drawn fault probabilities."""
        rng = random.Random(f"scenario:{seed}")
        jobs = tuple(JobSpec(key=f"s{seed}-j{i}", kind=rng.choice(KINDS), steps=rng.randint(1, 4),
                             max_attempts=rng.randint(1, 5)) for i in range(rng.randint(2, 6)))
        if faults is None:
            faults = {}
            for point in SIM_POINTS:
                if rng.random() < 0.5:
                    top = 0.08 if point == "store" else 0.3
                    faults[point] = round(rng.uniform(0.02, top), 3)
        return cls(seed=seed, jobs=jobs, workers=rng.randint(2, 3), concurrency=rng.randint(1, 3),
                   lease=float(rng.choice((5, 10, 30))), faults=faults, replay=rng.random() < 0.4, dedupe=dedupe)


@dataclass
class Result:
    """What one scenario did and which invariants it broke (none, when ``ok``)."""

    scenario: Scenario
    violations: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)
    fingerprint: str = ""  # a hash of the events and of every stored job: equal on a replay

    @property
    def ok(self) -> bool:
        return not self.violations

    def explain(self) -> str:
        s = self.scenario
        head = (f"seed {s.seed}: {len(s.jobs)} jobs {[(j.kind, j.steps, j.max_attempts) for j in s.jobs]}, "
                f"{s.workers} workers x {s.concurrency}, lease {s.lease:g}s, faults {s.faults}, "
                f"replay={s.replay}, dedupe={s.dedupe}")
        tail = "\n".join(f"  {e}" for e in self.events[-40:])
        return (f"{head}\nviolations:\n" + "\n".join(f"  - {v}" for v in self.violations)
                + f"\nlast events:\n{tail}\nreplay it: FIRESAFE_SIM_SEED={s.seed} pytest tests/simulation")


class Provider:
    """The outside world of the simulated jobs: counts every call and every effect applied.

    With ``dedupe`` it applies an effect at most once per idempotency key (as Stripe does with an
    ``Idempotency-Key``); without, every call applies it again.
    """

    def __init__(self, dedupe: bool) -> None:
        self.dedupe = dedupe
        self.calls: Counter[str] = Counter()
        self.effects: Counter[tuple[str, str]] = Counter()

    def apply(self, idem_key: str, job_key: str, step: str) -> str:
        self.calls[idem_key] += 1
        if not self.dedupe or self.calls[idem_key] == 1:
            self.effects[(job_key, step)] += 1
        return f"receipt:{idem_key}"


class _SyncPool:
    """Runs an attempt at once, in the caller's thread (the simulation has one thread)."""

    def submit(self, task: Callable[[], Any]) -> None:
        task()

    def shutdown(self) -> None:
        pass


@dataclass
class _SimWorker:
    name: str
    worker: Worker
    alive: bool = True
    resume_at: float = 0.0
    faults: int = 0
    turns: int = 0  # calls of its loop's turn


_TEMPLATES: dict[str, Path] = {}
_TEMPLATE_LOCK = threading.Lock()


def _template(folder: Path) -> Path:
    """A migrated, empty store file to copy for each scenario (migrating costs more than a copy)."""
    with _TEMPLATE_LOCK:
        key = str(folder)
        path = _TEMPLATES.get(key)
        if path is None or not path.exists():
            path = folder / f"template-{os.getpid()}.db"
            store = SQLiteStore(str(path), FakeClock(START), synchronous="OFF")
            store.migrate()
            store.close()  # the last connection checkpoints the WAL into the file
            _TEMPLATES[key] = path
        return path


class Simulation:
    """One scenario on one SQLite file."""

    def __init__(self, scenario: Scenario, folder: str | Path) -> None:
        self.s = scenario
        self.folder = Path(folder)
        self.rng = random.Random(f"run:{scenario.seed}")
        self.clock = FakeClock(START)
        self.path = self.folder / f"sim-{scenario.seed}-{os.getpid()}.db"
        shutil.copyfile(_template(self.folder), self.path)
        self.raw = SQLiteStore(str(self.path), self.clock, synchronous="OFF")
        self.store = FaultyStore(self.raw, self._store_fault, self._moved)
        self.app = App(self.raw, clock=self.clock, lease=scenario.lease, auto_migrate=False)
        self.app._store = self.store  # every worker and job sees the faulty store
        self.provider = Provider(scenario.dedupe)
        self.result = Result(scenario)
        self.queue = "sim"
        self.workers: list[_SimWorker] = []
        self.restarts: list[float] = []
        self.stack: list[_SimWorker] = []
        self.states: dict[str, str] = {}
        self.deaths: Counter[str] = Counter()
        self.turns = 0
        self.faults_on = False
        #: when each approve job's signal is due from the sender (removed once sent)
        self.sends = {j.key: START + self.rng.uniform(0.0, SEND_WITHIN) for j in scenario.jobs if j.kind == "approve"}
        self._declare()
        self._fan_spawns()

    # -- the jobs ----------------------------------------------------------------------------------
    def _declare(self) -> None:
        for n in range(1, 6):
            self.app.job(self._body, name=f"job{n}", queue=self.queue, max_attempts=n, backoff=RETRY)

    def _fan_spawns(self) -> None:
        """The ``spawned`` fault point: right after a spawn's insert committed, before the spawn step is
        recorded (the store call returned; the process may die, stall or fail there)."""
        spawn = self.store.job_spawn_many  # the faulty store's (a store fault may hit it too)

        def spawned(*args: Any, **kwargs: Any) -> Any:
            out = spawn(*args, **kwargs)
            if out is not None and self.stack:
                self._point("spawned", str(kwargs.get("step")))
            return out

        self.store.__dict__["job_spawn_many"] = spawned

    def _body(self, ctx: Any, kind: str, steps: int) -> Any:
        self._point("after_claim", ctx.job.key)
        if kind == "fan":
            return self._fan(ctx, steps)
        receipts = []
        for i in range(steps):
            if i:
                self._between(ctx)
            if kind == "nap" and i == 1:
                ctx.sleep(self.rng.uniform(1.0, 60.0), name="nap")
            if kind == "approve" and i == min(1, steps - 1):
                self._wait(ctx)
            receipts.append(ctx.step(f"s{i}", self._effect, ctx, f"s{i}", kind, i == steps - 1))
        return receipts

    def _wait(self, ctx: Any) -> None:
        """Wait for the signal ``go``; where it is not there yet, the job is about to park: the
        ``parking`` fault point (the signal may arrive right then, while the job still runs)."""
        try:
            ctx.wait_for_signal("go", timeout=SIGNAL_TIMEOUT)
        except SignalWait:
            self._point("parking", ctx.job.key)
            raise

    def _fan(self, ctx: Any, steps: int) -> list[Any]:
        """Spawn ``steps + 1`` children, wait for them all (parked meanwhile), then one step of its own;
        the result is that step's receipt and the children's results."""
        items = [[CHILD_KINDS[i % len(CHILD_KINDS)], 1] for i in range(steps + 1)]
        keys = ctx.spawn_many(self.app.jobs[CHILD_JOB], items, name=FAN)
        try:
            if steps % 2:  # as they finish: the first to end, then all
                first = ctx.wait_any(keys, at_least=1, name=FAN)
                if not first or any(k not in keys for k in first):
                    self._violation(f"{ctx.job.key}: wait_any answered {sorted(first)} for {keys}")
                results = ctx.wait_children(keys, name=FAN_REST)
            else:
                results = ctx.wait_children(keys, name=FAN)
        except WaitingForChildren:
            self._point("fan_parking", ctx.job.key)
            raise
        self._point("woken", ctx.job.key)
        return [ctx.step("s0", self._effect, ctx, "s0", "fan", True), results]

    def _children_end(self, key: str) -> None:
        """The fault ``children`` at ``fan_parking``: the other workers run until the parking job's
        children have all ended (or three lease periods passed), while it is still running."""
        def ended() -> bool:
            job = self.raw.job_get(key)
            return job is not None and job.children_pending <= 0

        self._world(until=self.clock.now() + 3 * self.s.lease, stop=ended)
        self._event(f"{key} parks now, its children ended={ended()}")

    def _send(self, key: str, when: str) -> None:
        """The sender sends ``key``'s signal (through the faulty store); kept due if it did not go."""
        try:
            sent = self.app.signal(key, "go", {"for": key}, actor="sender")
        except InvalidInput as exc:  # finished (dead): a replay may bring it back to wait again
            self._event(f"signal to {key} refused {when}: {exc}")
            return
        except StoreError as exc:
            self._event(f"signal to {key} failed {when}: {exc}")
            return
        self.sends.pop(key, None)
        self.result.stats["signals_sent" if sent.sent else "signals_again"] += 1
        self._event(f"signal to {key} {when}: sent={sent.sent} woke={sent.woke}")

    def _effect(self, ctx: Any, step: str, kind: str, last: bool) -> str:
        self._point("in_step", f"{ctx.job.key}/{step}")
        if kind == "flaky" and self.rng.random() < 0.3:
            raise RuntimeError("flaky downstream: connection reset")
        if kind == "deny" and last and self.rng.random() < 0.5:
            raise Permanent("the downstream refused this record")
        if kind == "defer" and self.rng.random() < 0.3:
            raise RetryAfter(round(self.rng.uniform(1.0, 30.0), 3), "rate limited")
        receipt = self.provider.apply(ctx.idempotency_key(step), ctx.job.key, step)
        self._point("after_effect", f"{ctx.job.key}/{step}")
        return receipt

    def _between(self, ctx: Any) -> None:
        """Time passes between two steps; the worker's loop heartbeats meanwhile (unless paused): the
        attempt runs inline, in the turn, so the simulation beats for the loop's thread."""
        self.clock.advance(self.rng.uniform(0.1, 2.0))
        self._point("heartbeat", ctx.job.key)
        w = self.stack[-1]
        now = self.clock.now()
        if now - w.worker._last_beat >= w.worker.heartbeat_interval:
            w.worker._last_beat = now  # a failed beat is not tried again at once: the loop would back off
            try:
                w.worker._heartbeat()
            except StoreError as exc:  # the loop thread would back off; the attempt runs on
                self._event(f"{w.name} heartbeat failed: {exc}")

    # -- faults ------------------------------------------------------------------------------------
    def _event(self, text: str) -> None:
        self.result.events.append(f"t+{self.clock.now() - START:.3f} {text}")

    def _point(self, point: str, where: str) -> None:
        p = self.s.faults.get(point, 0.0)
        if not self.faults_on or not p or self.rng.random() >= p:
            return
        actions = [a for a in ACTIONS[point] if a not in ("stall", "children") or len(self.stack) == 1]
        if not actions:
            return
        action = self.rng.choice(actions)
        w = self.stack[-1]
        self.result.stats[f"{point}:{action}"] += 1
        self._event(f"{w.name} {action} at {point} ({where})")
        if action == "crash":
            raise SimCrash(point)
        if action == "error":
            raise RuntimeError(f"injected error at {point}")
        if action == "signal":
            self._send(where, "while it parks")
            return
        if action == "children":
            self._children_end(where)
            return
        self._stall(w)

    def _store_fault(self, method: str) -> str | None:
        p = self.s.faults.get("store", 0.0)
        if not self.faults_on or not p or self.rng.random() >= p:
            return None
        when = self.rng.choice(ACTIONS["store"])
        self.result.stats[f"store:{when}"] += 1
        self._event(f"store fault {when} {method}")
        return when

    def _stall(self, w: _SimWorker) -> None:
        """Freeze ``w`` for three lease periods while the others go on (a zombie)."""
        self._world(until=self.clock.now() + 3 * self.s.lease)
        self._event(f"{w.name} resumes after its stall")

    # -- the state checker ---------------------------------------------------------------------------
    def _moved(self, method: str) -> None:
        for job in self.raw.job_list(JobFilter(queue=self.queue, limit=1000)):
            before, now = self.states.get(job.key), str(job.state)
            if job.attempt > job.max_attempts:
                self._violation(f"{job.key}: attempt {job.attempt} above its maximum {job.max_attempts}")
            if before == now:
                continue
            if before is None:
                if now not in (State.QUEUED, State.SCHEDULED):
                    self._violation(f"{job.key}: appeared as {now} ({method})")
            elif not can_move(before, now):
                self._violation(f"{job.key}: illegal move {before} -> {now} ({method})")
            if now == State.DEAD:
                self.deaths[job.key] += 1
            self.states[job.key] = now

    def _violation(self, text: str) -> None:
        if text not in self.result.violations:
            self.result.violations.append(text)
            self._event(f"VIOLATION {text}")
        if self.faults_on:  # found one while running: stop here (the end checks still run)
            raise _Abort

    # -- the world -----------------------------------------------------------------------------------
    def _spawn(self) -> _SimWorker:
        name = f"w{len(self.workers) + 1}"
        # No prefetch (a job of max_attempts=1 turns it off anyway): the synchronous pool runs each
        # job as it is claimed, so no job would ever wait, and the pace it keeps is wall-clock time,
        # which a seed could not replay. tests/integration/test_prefetch.py covers prefetch. No
        # pipeline either: the loop's turn runs each transaction (tests/integration/test_pipeline.py).
        worker: Worker = self.app.worker([self.queue], concurrency=self.s.concurrency, lease=self.s.lease,
                                         seed=self.rng.randrange(2**32), prefetch=0, pipeline=1)
        worker.id = f"sim:{name}"
        worker.monotonic = self.clock.now  # timeouts, lingering and probes in simulated time, on every replay
        worker._pool = _SyncPool()
        w = _SimWorker(name, worker)
        self.workers.append(w)
        return w

    def _world(self, until: float | None = None, stop: Callable[[], bool] | None = None) -> None:
        """Run turns of workers until the store has nothing left (or, nested, until ``until`` or ``stop()``)."""
        busy_turn = False  # the last turn did something: the store cannot have settled by itself
        while True:
            now = self.clock.now()
            if until is not None and now >= until:
                return
            if stop is not None and stop():
                return
            pending = None
            if not busy_turn:
                pending = self.raw.job_pending([self.queue])
                if until is None and not pending.runnable and not pending.running and pending.next_at is None:
                    return
            self.turns += 1
            if self.turns > MAX_TURNS:
                raise _Stuck
            due = [t for t in self.restarts if t <= now]
            for t in due:
                self.restarts.remove(t)
                self._event(f"{self._spawn().name} starts")
            for key in [k for k, t in sorted(self.sends.items()) if t <= now]:
                self.sends[key] = now + 1.0  # tried again in a second if it does not go now
                self._send(key, "on time")
                pending = None  # a signal may have made a parked job due: what is pending is read again
            busy = {id(w) for w in self.stack}
            alive = [w for w in self.workers if w.alive and id(w) not in busy]
            if not alive and not self.restarts:  # someone must be running (a supervisor restarts one)
                self.restarts.append(now)
                busy_turn = False
                continue
            ready = [w for w in alive if w.resume_at <= now]
            busy_turn = False
            if ready:
                w = ready[self.rng.randrange(len(ready))]
                if self._turn(w):
                    self.clock.advance(self.rng.uniform(0.01, 0.3))
                    busy_turn = True
                    continue
            # Nothing to do now: time passes until something is due (a job, a rescue, a restart).
            if pending is None:
                pending = self.raw.job_pending([self.queue])
            wake = [w.resume_at for w in alive if w.resume_at > now] + self.restarts
            if pending.next_at is not None:
                wake.append(pending.next_at)
            wake.extend(self.sends.values())
            if pending.running or not wake:
                wake.append(now + min(w.worker.rescue_interval for w in self.workers))
            target = max(min(wake), now + 0.01) + self.rng.uniform(0.0, 0.2)
            self.clock.set(min(target, until) if until is not None else target)

    def _turn(self, w: _SimWorker) -> bool:
        """One turn of ``w``'s loop: :meth:`Worker.turn`, the real loop's body, its attempts run inline
        (the simulation moves the clock instead of waiting as the loop would); True if it claimed or
        saved something. A store fault is the loop's to back off from, in simulated time."""
        self.stack.append(w)
        worker = w.worker
        try:
            before = worker.stats.succeeded + worker.stats.failed + worker.stats.dead + worker.stats.deferred
            w.turns += 1
            turn = worker.turn()
            if turn.claimed:  # the attempts ran (inline); their outcomes wait for a later turn to save them
                self._point("before_complete", ",".join(c.job.key for c in turn.claimed))
            w.faults = 0
            after = worker.stats.succeeded + worker.stats.failed + worker.stats.dead + worker.stats.deferred
            return bool(turn.claimed) or after != before
        except StoreError as exc:
            w.faults += 1
            w.resume_at = self.clock.now() + STORE_BACKOFF.delay(w.faults, self.rng.random())
            self._event(f"{w.name} store fault in its loop ({exc}); backs off")
            return True
        except SimCrash:
            w.alive = False
            self.restarts.append(self.clock.now() + self.rng.uniform(0.5, 5.0))
            self._event(f"{w.name} died")
            return True
        finally:
            self.stack.pop()

    # -- a whole scenario ------------------------------------------------------------------------------
    def run(self) -> Result:
        with _logs_to(self._event):
            return self._run()

    def _run(self) -> Result:
        res = self.result
        try:
            for spec in self.s.jobs:
                self.app.jobs[f"job{spec.max_attempts}"].enqueue(spec.kind, spec.steps, key=spec.key)
            self._moved("enqueue")
            for _ in range(self.s.workers):
                self._spawn()
            self.faults_on = True
            self._world()
            if self.s.replay:
                dead = [j.id for j in self.raw.job_list(JobFilter(state="dead", queue=self.queue, limit=1000))]
                if dead:  # two operators replay the same dead jobs: each moves once
                    first = self.raw.job_replay_many(dead, "operator-1")
                    second = self.raw.job_replay_many(dead, "operator-2")
                    self._moved("job_replay_many")
                    if sorted(first + second) != sorted(dead):
                        self._violation(f"replayed by two operators: {first} + {second} != {dead}")
                    self._event(f"replayed {len(first)} dead job(s)")
                    self._world()
            self.faults_on = False
        except _Stuck:
            self.faults_on = False
            self._violation(f"the scenario did not settle within {MAX_TURNS} turns (a job never ended)")
        except _Abort:
            self.faults_on = False
        self._check()
        res.stats["turns"] = self.turns
        res.stats["worker_turns"] = sum(w.turns for w in self.workers)
        res.stats["workers_started"] = len(self.workers)
        res.stats["fenced"] = sum(w.worker.stats.fenced for w in self.workers)
        res.stats["rescued"] = sum(w.worker.stats.rescued for w in self.workers)
        res.stats["calls"] = sum(self.provider.calls.values())
        res.stats["effects"] = sum(self.provider.effects.values())
        res.stats["deaths"] = sum(self.deaths.values())
        self.close()
        return res

    def _check(self) -> None:
        jobs = {j.key: j for j in self.raw.job_list(JobFilter(queue=self.queue, limit=1000))}
        alerts = Counter(e.job_id for e in self.raw.alert_pending(100_000) if e.kind == "dead_letter")
        dump = []
        for spec in self.s.jobs:
            job = jobs.get(spec.key)
            if job is None:
                self._violation(f"{spec.key}: lost (not in the store)")
                continue
            full = self.raw.job_get(spec.key, full=True)
            assert full is not None
            if full.state not in (State.SUCCEEDED, State.DEAD):
                self._violation(f"{spec.key}: never ended (state {full.state})")
            steps = ["s0"] if spec.kind == "fan" else [f"s{i}" for i in range(spec.steps)]
            for step in steps:
                n = self.provider.effects[(spec.key, step)]
                if n > 1:
                    self._violation(f"{spec.key}/{step}: effect applied {n} times")
                if full.state == State.SUCCEEDED and n != 1:
                    self._violation(f"{spec.key}/{step}: succeeded with its effect applied {n} times")
            if spec.kind == "fan":
                dump += self._check_fan(spec, full)
            elif full.state == State.SUCCEEDED and self.s.dedupe:
                want = [f"receipt:{spec.key}/{s}" for s in steps]
                if full.result != want:
                    self._violation(f"{spec.key}: result {full.result} is not the steps' receipts {want}")
            for a in full.trace:
                if a.attempt > full.max_attempts:
                    self._violation(f"{spec.key}: attempt {a.attempt} of {full.max_attempts} in the trace")
                if a.outcome is None:
                    self._violation(f"{spec.key}: attempt {a.seq} never ended")
                if a.error_type in ("SimCrash", "_Abort"):  # a process's death is no attempt's failure
                    self._violation(f"{spec.key}: attempt {a.seq} recorded the simulation's {a.error_type} as its "
                                    "error: the worker caught a process death")
            if len(full.trace) != full.runs:
                self._violation(f"{spec.key}: {len(full.trace)} trace entries for {full.runs} runs")
            if full.state == State.DEAD and (not full.trace or not full.trace[-1].error_type or not full.reason):
                self._violation(f"{spec.key}: dead without its trace or reason")
            if alerts[full.id] != self.deaths[spec.key]:
                self._violation(f"{spec.key}: died {self.deaths[spec.key]} time(s), "
                                f"{alerts[full.id]} dead-letter alert(s)")
            recorded = [r.name for r in self.raw.step_list(full.id)]
            if len(set(recorded)) != len(recorded):
                self._violation(f"{spec.key}: a step recorded twice: {recorded}")
            if spec.kind == "approve":
                self._check_signal(spec, full)
            d = full.as_dict()
            for a in d["trace"]:
                a["detail"].pop("duration", None)  # wall-clock time the attempt took: not simulated
            dump.append(d)
        text = json.dumps({"events": self.result.events, "jobs": dump}, sort_keys=True, default=str)
        self.result.fingerprint = hashlib.sha256(text.encode()).hexdigest()

    def _check_fan(self, spec: JobSpec, job: Any) -> list[dict[str, Any]]:
        """A fan job spawned each child once, each child's effect happened once, it was woken at most
        once per park and never sat parked after its last child ended, and its result is its
        children's. Returns the children, for the fingerprint."""
        children = self.raw.job_children(job.id, limit=1000)
        want = [child_key(spec.key, FAN, i) for i in range(spec.steps + 1)]
        if (children or job.state == State.SUCCEEDED) and sorted(c.key for c in children) != sorted(want):
            self._violation(f"{spec.key}: children {[c.key for c in children]}, "
                            f"not the {len(want)} spawned once {want}")
        spawned = [e for e in job.events if e.kind == "spawned"]
        if len(spawned) > 1 or (children and not spawned):
            self._violation(f"{spec.key}: {len(spawned)} spawn events for one spawn step")
        dump = []
        for child in children:
            full = self.raw.job_get(child.key, full=True)
            assert full is not None
            n = self.provider.effects[(child.key, "s0")]
            if n > 1 or (full.state == State.SUCCEEDED and n != 1):
                self._violation(f"{child.key}: {full.state} with its effect applied {n} times")
            if full.state not in (State.SUCCEEDED, State.DEAD):
                self._violation(f"{child.key}: child never ended (state {full.state})")
            if alerts := [a for a in full.trace if a.attempt > full.max_attempts]:
                self._violation(f"{child.key}: attempt {alerts[0].attempt} of {full.max_attempts} in the trace")
            dump.append(full.as_dict())
        for d in dump:
            for a in d["trace"]:
                a["detail"].pop("duration", None)
        replays = sum(1 for e in job.events if "replay" in e.kind or "rerun" in e.kind)
        parks = 0
        for wait in (FAN, FAN_REST):
            statuses = [s.get("status") for a in job.trace for s in a.detail.get("steps", [])
                        if s.get("name") == f"wait-children:{wait}"]
            parked = statuses.count("waiting")
            parks += parked
            if parked > 1 + replays:
                self._violation(f"{spec.key}: wait {wait} parked {parked} times in {1 + replays} run(s): woken "
                                "before enough of its children had ended")
        woken = sum(1 for e in job.events if e.kind == "woken")
        if woken > parks:
            self._violation(f"{spec.key}: woken {woken} time(s) for {parks} park(s) (a wake-up without a park)")
        ends = [c.finished_at.timestamp() for c in children if c.finished_at is not None]
        last = max(ends) if len(ends) == len(children) and ends else None
        ended = job.finished_at.timestamp() if job.finished_at else self.clock.now()
        if last is not None and ended - last > STRANDED:
            self._violation(f"{spec.key}: stranded: its last child ended at t+{last - START:.3f} but it ended "
                            f"only at t+{ended - START:.3f} ({job.state})")
        if job.state == State.SUCCEEDED:
            by_key = {c.key: c for c in children}
            results = [by_key[k].result if k in by_key else None for k in want]
            if job.result != [f"receipt:{spec.key}/s0", results] and self.s.dedupe:
                self._violation(f"{spec.key}: result {job.result} is not its children's {results}")
            if any(c.state != State.SUCCEEDED for c in children):
                self._violation(f"{spec.key}: succeeded while children did not: "
                                f"{[(c.key, str(c.state)) for c in children]}")
        return dump

    def _check_signal(self, spec: JobSpec, job: Any) -> None:
        """An approve job got its signal once, and never sat parked past its deadline once sent."""
        wait = next((r for r in self.raw.step_list(job.id) if r.name == "signal:go"), None)
        signals = self.raw.signal_list(job.id)
        got = [s for a in job.trace for s in a.detail.get("steps", []) if s.get("name") == "signal:go"
               and s.get("status") == "signal"]
        if job.state == State.SUCCEEDED and (wait is None or not signals or not got):
            self._violation(f"{spec.key}: succeeded without its wait answered by the signal "
                            f"(wait {wait is not None}, {len(signals)} signal(s), answered {len(got)} time(s))")
        if wait is None or not signals:
            return
        until, sent_at = json.loads(wait.result or "{}")["until"], signals[0].sent_at
        ended = job.finished_at.timestamp() if job.finished_at else self.clock.now()
        if sent_at <= until and ended >= until:
            self._violation(f"{spec.key}: lost wake-up: its signal was sent at t+{sent_at - START:.3f} but it sat "
                            f"parked until its deadline t+{until - START:.3f}")
        if any(s.get("status") == "timed_out" for a in job.trace for s in a.detail.get("steps", [])):
            self._violation(f"{spec.key}: its wait timed out although the signal came in time")

    def close(self) -> None:
        self.raw.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)


class _Stuck(Exception):
    pass


class _Abort(ProcessDeath):
    """A violation was found mid-run: the scenario stops there (no job code may catch this, and the
    worker passes it through as it does a process's death)."""


class _Events(logging.Handler):
    def __init__(self, sink: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink(f"log {record.levelname.lower()}: {record.getMessage()}")


@contextmanager
def _logs_to(sink: Callable[[str], None]) -> Iterator[None]:
    """firesafe's warnings during a scenario go to its events (they replay with it), not to stderr."""
    logger = logging.getLogger("firesafe")
    handler = _Events(sink)
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


@contextmanager
def _folder(folder: str | Path | None) -> Iterator[Path]:
    if folder is not None:
        yield Path(folder)
        return
    shm = "/dev/shm"  # memory, where there is one: the scenarios' files never need a disk
    where = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="firesafe-sim-", dir=where) as tmp:
        yield Path(tmp)


def run_seed(seed: int, folder: str | Path | None = None, **options: Any) -> Result:
    """Run the scenario of ``seed`` (``dedupe``, ``faults``: see :meth:`Scenario.from_seed`)."""
    with _folder(folder) as where:
        return Simulation(Scenario.from_seed(seed, **options), where).run()


def run_range(first: int, count: int, folder: str | Path | None = None, parent: int | None = None,
              **options: Any) -> dict[str, Any]:
    """Run ``count`` seeds from ``first``; a JSON-ready summary with the failures explained. With
    ``parent``, stop (SystemExit 3) as soon as that process is no longer this one's parent."""
    totals: Counter[str] = Counter()
    failures = []
    with _folder(folder) as where:
        for seed in range(first, first + count):
            if parent is not None and os.getppid() != parent:
                raise SystemExit(3)
            res = Simulation(Scenario.from_seed(seed, **options), where).run()
            totals.update(res.stats)
            totals["jobs"] += len(res.scenario.jobs)
            if not res.ok:
                failures.append({"seed": seed, "violations": res.violations, "explain": res.explain()})
    return {"first": first, "count": count, "totals": dict(totals), "failures": failures}


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.simulation.sim --first 0 --count 1000``: run seeds, print a JSON summary."""
    parser = argparse.ArgumentParser(prog="python -m tests.simulation.sim")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--no-dedupe", action="store_true", help="the provider applies every call (a control)")
    parser.add_argument("--parent", type=int, default=None, help="stop when this process is gone")
    opts = parser.parse_args(argv)
    summary = run_range(opts.first, opts.count, parent=opts.parent, dedupe=not opts.no_dedupe)
    with suppress(BrokenPipeError):
        print(json.dumps(summary))
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["ACTIONS", "SIM_POINTS", "Provider", "Result", "Scenario", "SimCrash", "Simulation",
           "main", "run_range", "run_seed"]
