"""``firesafe drill``: run your own jobs against a scratch store while faults strike, then say what
happened to each job and which promise, if any, your code breaks.

The drill never opens your store: it enqueues samples of your jobs into a new SQLite file in a
temporary folder, runs worker processes of your app on that file (see :mod:`firesafe.drill.worker`)
while faults are injected for ``seconds``, lets the workers finish without faults for up to
``settle`` seconds, and reads the scratch store and the workers' event record back.

Your jobs' code runs for real: whatever a job does outside firesafe (a charge, an e-mail, an HTTP
call) happens at each of its attempts, and each round of samples has new job keys, so the
idempotency keys passed to providers differ from round to round. Point the jobs at sandboxes first.

Broken invariants it reports:

- a step whose function started, was not recorded as done (it completed but its record was lost, or
  the process died during the call) and then started again, in attempts that never asked for the
  step's ``ctx.idempotency_key``: its effect may have happened twice (only a provider key closes that
  window). A step counts as run when its function starts (see :func:`tally_steps`). A step whose
  function is declared safe to repeat (:func:`firesafe.steps.repeatable`) is never flagged;
- a job that never ended (still waiting or running once the drill settled);
- a dead job without its trace or without its dead-letter alert;
- an attempt above the job's maximum.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firesafe.drill.worker import FAULTS
from firesafe.errors import InvalidInput
from firesafe.states import State
from firesafe.store.base import InsertParams, JobFilter
from firesafe.stores.sqlite import SQLiteStore

#: The most rounds of samples a drill enqueues.
MAX_ROUNDS = 500


@dataclass(frozen=True)
class DrillOptions:
    target: str  # MODULE:APP, as the workers import it
    jobs: tuple[str, ...]
    samples: Mapping[str, Sequence[tuple[list[Any], dict[str, Any]]]]
    faults: tuple[str, ...] = FAULTS
    seconds: float = 30.0
    settle: float = 60.0
    rate: float = 0.2
    workers: int = 2
    concurrency: int = 4
    lease: float = 3.0
    seed: int | None = None
    keep: bool = False


@dataclass
class JobReport:
    """What happened to one job name during the drill."""

    name: str
    runs: int = 0  # jobs enqueued
    succeeded: int = 0
    dead: int = 0
    unfinished: int = 0
    attempts: int = 0  # every claim (trace entries)
    resumes: int = 0  # attempts that restored at least one recorded step
    steps_restored: int = 0
    steps_ran: int = 0  # step functions called (counted when they start)
    steps_rerun: int = 0  # calls of a step function beyond the first, per job and step
    steps_repeatable: int = 0  # of those, calls of steps declared safe to repeat (never broken)
    steps_cut: int = 0  # calls that started and never returned (the process died during the call)
    dead_reasons: dict[str, int] = field(default_factory=dict)
    alerts: int = 0  # dead-letter alerts raised (kept in the scratch outbox; none were sent)
    faults: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class DrillReport:
    store: str
    seconds: float
    settle_seconds: float
    faults: tuple[str, ...]
    rate: float
    seed: int
    jobs: list[JobReport]
    worker_starts: int
    store_faults: int = 0  # store calls that failed on purpose (they belong to no one job)
    kept: str | None = None

    @property
    def violations(self) -> int:
        return sum(len(j.violations) for j in self.jobs)

    def effects(self) -> str:
        """What ran for real, in words: each job's attempts (its code ran that often) and step calls.

        >>> r = DrillReport("s", 1, 1, (), 0, 1, [JobReport("refund", attempts=11, steps_ran=14)], 2)
        >>> r.effects()
        "refund's code ran 11 times (its steps' functions 14 times)"
        """
        parts = []
        for j in self.jobs:
            steps = f" (its steps' functions {_times(j.steps_ran)})" if j.steps_ran else ""
            parts.append(f"{j.name}'s code ran {_times(j.attempts)}{steps}")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"scratch_store": self.store, "seconds": self.seconds, "settle_seconds": round(self.settle_seconds, 3),
                "faults": list(self.faults), "rate": self.rate, "seed": self.seed,
                "worker_starts": self.worker_starts, "store_faults": self.store_faults, "ok": self.violations == 0,
                # your store was never opened; your jobs' code (and so its side effects) ran for real
                "store_touched": False, "job_code_ran": {j.name: j.attempts for j in self.jobs},
                "jobs": [j.as_dict() for j in self.jobs], "kept": self.kept}


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def parse_samples(text: str, source: str, jobs: Sequence[str], takes_arguments: Callable[[str], bool]
                  ) -> dict[str, list[tuple[list[Any], dict[str, Any]]]]:
    """Sample arguments per job from JSON: ``{"refund": [["o-1", 100], {"kwargs": {...}}], ...}``.

    Each sample is a list (positional arguments) or an object with ``args`` and/or ``kwargs``. A job
    that takes no arguments needs no sample.

    >>> parse_samples('{"refund": [["o-1", 100], {"kwargs": {"order": "o-2"}}]}', "s.json", ["refund"],
    ...               lambda name: True)["refund"]
    [(['o-1', 100], {}), ([], {'order': 'o-2'})]
    >>> parse_samples('{"refund": "o-1"}', "s.json", ["refund"], lambda name: True)
    Traceback (most recent call last):
    ...
    firesafe.errors.InvalidInput: s.json: the samples of 'refund' must be a list ...
    """
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{source} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
                           ) from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{source} must hold a JSON object of sample arguments by job name, not "
                           f"{type(data).__name__}")
    unknown = sorted(set(data) - set(jobs))
    if unknown:
        raise InvalidInput(f"{source} has samples for {unknown}, which --jobs does not name")
    out: dict[str, list[tuple[list[Any], dict[str, Any]]]] = {}
    for name in jobs:
        raw = data.get(name)
        if raw is None:
            if takes_arguments(name):
                raise InvalidInput(f"{source} has no sample arguments for job {name!r}, which takes arguments")
            out[name] = [([], {})]
            continue
        if not isinstance(raw, list) or not raw:
            raise InvalidInput(f"{source}: the samples of {name!r} must be a list of samples (each a list of "
                               "arguments or an object with args/kwargs), with at least one")
        samples: list[tuple[list[Any], dict[str, Any]]] = []
        for n, item in enumerate(raw):
            if isinstance(item, list):
                samples.append((item, {}))
            elif isinstance(item, dict) and set(item) <= {"args", "kwargs"} and isinstance(
                    item.get("args", []), list) and isinstance(item.get("kwargs", {}), dict):
                samples.append((list(item.get("args", [])), dict(item.get("kwargs", {}))))
            else:
                raise InvalidInput(f"{source}: sample {n} of {name!r} must be a list of arguments or an object "
                                   "with 'args' (a list) and/or 'kwargs' (an object)")
        out[name] = samples
    return out


def _sample_insert(jobdef: Any, args: list[Any], kwargs: dict[str, Any], key: str) -> InsertParams:
    """The insert of one sample under ``key``, built by the job's own enqueue checks."""
    params: InsertParams = jobdef._params(args, kwargs, key, None, None, None)
    return params


def check_samples(app: Any, options: DrillOptions) -> dict[str, list[Callable[[str], InsertParams]]]:
    """Every sample through the job's own enqueue checks (names, arity, JSON, size), now, before
    anything runs; returns, per job, a maker of each sample's insert under a given key."""
    made: dict[str, list[Callable[[str], InsertParams]]] = {}
    for name in options.jobs:
        jobdef = app.jobs[name]
        for n, (args, kwargs) in enumerate(options.samples[name]):
            try:
                jobdef._params(args, kwargs, f"drill:{name}:check:{n}", None, None, None)
            except InvalidInput as exc:
                raise InvalidInput(f"sample {n} of job {name!r}: {exc}") from None
            made.setdefault(name, []).append(functools.partial(_sample_insert, jobdef, args, kwargs))
    return made


class Drill:
    """One drill run: scratch store, workers, the fault window, the settle, the report."""

    def __init__(self, app: Any, options: DrillOptions, progress: Callable[[str], None] | None = None) -> None:
        self.app = app
        self.o = options
        self.progress = progress or (lambda text: None)
        self.seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**31)
        self.random = random.Random(self.seed)
        self._params = check_samples(app, options)  # before anything is made: a bad sample leaves nothing behind
        self.folder = Path(tempfile.mkdtemp(prefix="firesafe-drill-"))
        self.url = f"sqlite:///{self.folder}/scratch.db"
        self.store = SQLiteStore(str(self.folder / "scratch.db"))
        self.store.migrate()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.starts = 0
        self.keys: dict[str, str] = {}  # key -> job name
        self.rounds = 0
        self.logs: dict[int, Path] = {}  # worker pid -> its log

    # -- processes -------------------------------------------------------------------------------------
    def _start_worker(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        command = [sys.executable, "-m", "firesafe.drill.worker", self.o.target, "--store", self.url,
                   "--dir", str(self.folder), "--jobs", ",".join(self.o.jobs), "--faults", ",".join(self.o.faults),
                   "--rate", repr(self.o.rate), "--seed", str(self.random.randrange(2**31)),
                   "--concurrency", str(self.o.concurrency), "--lease", repr(self.o.lease)]
        path = self.folder / f"worker-{self.starts}.log"
        err = open(path, "wb")  # noqa: SIM115 - the child writes it
        try:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)}
            proc = subprocess.Popen(command, stdout=err, stderr=err, stdin=subprocess.DEVNULL, env=env)
        finally:
            err.close()
        self.logs[proc.pid] = path
        return proc

    def _supervise(self) -> None:
        """Restart worker processes that died (the kill fault); fail if they cannot start at all."""
        for i, p in enumerate(self.procs):
            if p.poll() is None:
                continue
            if p.returncode == 2:  # the worker could not load the app: nothing a restart would fix
                text = self.logs[p.pid].read_text(errors="replace").strip()
                raise InvalidInput(f"a drill worker could not start: {text.splitlines()[-1] if text else p.returncode}")
            self.procs[i] = self._start_worker()

    def _enqueue_round(self) -> None:
        self.rounds += 1
        items = []
        for name in self.o.jobs:
            for n, make in enumerate(self._params[name]):
                key = f"drill:{name}:{self.rounds}:{n}"
                self.keys[key] = name
                items.append(make(key))
        self.store.job_insert_many(items)

    def _open(self) -> list[Any]:
        keys = list(self.keys)
        jobs = []
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            jobs += self.store.job_list(JobFilter(keys=chunk, limit=len(chunk)))
        return [j for j in jobs if j.state not in (State.SUCCEEDED, State.DEAD, State.CANCELLED)]

    # -- the run -----------------------------------------------------------------------------------------
    def run(self) -> DrillReport:
        queues = sorted({self.app.jobs[j].queue for j in self.o.jobs})
        try:
            self._enqueue_round()
            self.procs = [self._start_worker() for _ in range(self.o.workers)]
            self.progress(f"faults for {self.o.seconds:g}s: {', '.join(self.o.faults) or 'none'} (seed {self.seed})")
            end = time.monotonic() + self.o.seconds
            while time.monotonic() < end:
                self._supervise()
                pending = self.store.job_pending(queues)
                if not pending.runnable and self.rounds < MAX_ROUNDS and end - time.monotonic() > 1.0:
                    self._enqueue_round()
                time.sleep(0.1)
            (self.folder / "calm").write_text("the fault window is over")
            self.progress(f"settling: no more faults; waiting up to {self.o.settle:g}s for every job to end")
            settled_at = time.monotonic()
            while self._open() and time.monotonic() - settled_at < self.o.settle:
                self._supervise()
                time.sleep(0.1)
            settle_seconds = time.monotonic() - settled_at
        finally:
            self._stop()
        report = self._report(settle_seconds)
        self.store.close()
        if self.o.keep:
            report.kept = str(self.folder)
        else:
            shutil.rmtree(self.folder, ignore_errors=True)
        return report

    def _stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    # -- the report --------------------------------------------------------------------------------------
    def _events(self) -> list[dict[str, Any]]:
        path = self.folder / "events.jsonl"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill
                continue
        return out

    def _report(self, settle_seconds: float) -> DrillReport:
        reports = {name: JobReport(name) for name in self.o.jobs}
        events = self._events()
        store_faults = 0
        for e in events:
            if e.get("e") == "fault" and e.get("name") in reports:
                r = reports[e["name"]]
                r.faults[e["kind"]] = r.faults.get(e["kind"], 0) + 1
            elif e.get("e") == "fault" and e.get("kind") == "store":
                store_faults += 1
        alerts = Counter(ev.job_id for ev in self.store.alert_pending(1_000_000) if ev.kind == "dead_letter")
        for key, name in self.keys.items():
            r = reports[name]
            job = self.store.job_get(key, full=True)
            if job is None:
                r.violations.append(f"{key}: lost (not in the store)")
                continue
            r.runs += 1
            r.attempts += len(job.trace)
            for a in job.trace:
                statuses = [s.get("status") for s in a.detail.get("steps", [])] if isinstance(a.detail, dict) else []
                restored = statuses.count("restored")
                r.steps_restored += restored
                r.resumes += 1 if restored else 0
                if a.attempt > job.max_attempts:
                    r.violations.append(f"{key}: attempt {a.attempt} above its maximum {job.max_attempts}")
            if job.state == State.SUCCEEDED:
                r.succeeded += 1
            elif job.state == State.DEAD:
                r.dead += 1
                reason = job.reason or "?"
                r.dead_reasons[reason] = r.dead_reasons.get(reason, 0) + 1
                r.alerts += alerts[job.id]
                if not job.trace or not job.last_error:
                    r.violations.append(f"{key}: dead without its trace")
                if not alerts[job.id]:
                    r.violations.append(f"{key}: dead without its dead-letter alert")
            else:
                r.unfinished += 1
                when = (f", next attempt at {job.run_at.isoformat()}"
                        if job.state == State.SCHEDULED and job.run_at else "")
                r.violations.append(f"{key}: never ended within the settle time (state {job.state}{when})")
        stepped = tally_steps(events, self.keys, reports)
        for name, r in reports.items():
            if r.attempts and name not in stepped:
                r.warnings.append(
                    f"job {name!r} ran no steps: effects outside ctx.step are not checked for double effects (an "
                    "attempt cut short after an effect runs it again unseen); put each effect in a ctx.step and "
                    "pass ctx.idempotency_key to its provider")
        for name in self.o.jobs:
            jd = self.app.jobs[name]
            if "timeout" in self.o.faults and not jd.timeout:
                reports[name].warnings.append(
                    f"job {name!r} has no timeout, so no timeout was injected; a hung attempt would hold its "
                    "worker (and keep its lease) until the process dies")
        return DrillReport(store=self.url, seconds=self.o.seconds, settle_seconds=settle_seconds,
                           faults=self.o.faults, rate=self.o.rate, seed=self.seed, jobs=list(reports.values()),
                           worker_starts=self.starts, store_faults=store_faults)


def tally_steps(events: Iterable[Mapping[str, Any]], keys: Mapping[str, str],
                reports: Mapping[str, JobReport]) -> set[str]:
    """Count the step calls of the event record into ``reports`` (by job name; ``keys`` maps each job key
    to its name) and flag every step whose effect may have happened twice without an idempotency key.
    Returns the names of the jobs that called at least one step function.

    A call counts as run when it starts (its ``step_start`` is written before the step's function
    runs): a call the process died in counts too. Calls of one step of one job are ordered by
    ``run`` (a late call of a timed-out attempt may end after the next attempt's). A step is flagged
    when it started again after a call that did not fail (one that completed but was not recorded, or
    one that never ended), and no attempt asked for ``ctx.idempotency_key(step)``. Calls that ran
    again only after failures get a warning: safe only if a failed call leaves no effect. A step
    declared safe to repeat (``repeatable`` on its events) is neither flagged nor warned about; its
    repeated calls are counted in ``steps_repeatable``.

    >>> reports = {"notify": JobReport("notify")}
    >>> events = [{"e": "step_start", "job": "k1", "step": "send", "run": 1, "keyed": False},
    ...           {"e": "step_start", "job": "k1", "step": "send", "run": 2, "keyed": False},
    ...           {"e": "step", "job": "k1", "step": "send", "run": 2, "ok": True, "keyed": False}]
    >>> tally_steps(events, {"k1": "notify"}, reports)
    {'notify'}
    >>> r = reports["notify"]
    >>> r.steps_ran, r.steps_rerun, r.steps_cut, len(r.violations)
    (2, 1, 1, 1)
    >>> reports = {"fetch": JobReport("fetch")}
    >>> events = [{"e": "step_start", "job": "k2", "step": "rates", "run": 1, "repeatable": True},
    ...           {"e": "step_start", "job": "k2", "step": "rates", "run": 2, "repeatable": True}]
    >>> _ = tally_steps(events, {"k2": "fetch"}, reports)
    >>> r = reports["fetch"]
    >>> r.steps_rerun, r.steps_repeatable, r.violations
    (1, 1, [])
    """
    calls: dict[tuple[str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for e in events:
        kind = e.get("e")
        if kind not in ("step_start", "step", "step_key") or e.get("job") not in keys:
            continue
        call = calls[(e["job"], e["step"])].setdefault(int(e.get("run") or 0),
                                                       {"ok": None, "keyed": False, "repeatable": False})
        call["keyed"] = call["keyed"] or kind == "step_key" or bool(e.get("keyed"))
        call["repeatable"] = call["repeatable"] or e.get("repeatable") is True
        if kind == "step":  # an end without its start (a record older than starts) still counts as a call
            call["ok"] = bool(e.get("ok"))
    stepped = set()
    for (key, step), by_run in calls.items():
        name = keys[key]
        stepped.add(name)
        r = reports[name]
        runs = [by_run[n] for n in sorted(by_run)]
        r.steps_ran += len(runs)
        r.steps_rerun += len(runs) - 1
        r.steps_cut += sum(c["ok"] is None for c in runs)
        if any(c["repeatable"] for c in runs):  # declared safe to repeat: a repetition breaks nothing
            r.steps_repeatable += len(runs) - 1
            continue
        if len(runs) < 2 or any(c["keyed"] for c in runs):
            continue
        completed = sum(c["ok"] is True for c in runs[:-1])
        cut = sum(c["ok"] is None for c in runs[:-1])
        if completed or cut:
            how = " and ".join(part for part in (
                _calls(completed, "completed and was not recorded (a crash, a timeout, a lost lease or a failed "
                       "record)", "completed and were not recorded (crashes, timeouts, lost leases or failed records)"),
                _calls(cut, "never ended (the process died during it, or its attempt was abandoned)",
                       "never ended (the process died during them, or their attempts were abandoned)")) if part)
            r.violations.append(
                f"{key}: step {step!r} ran {len(runs)} times without an idempotency key: {how}, then it ran "
                f"again, so its effect may have happened twice. Pass ctx.idempotency_key({step!r}) to the provider")
        else:
            r.warnings.append(f"{key}: step {step!r} ran {len(runs)} times (after failures) without an "
                              "idempotency key; safe only if a failed call never leaves an effect behind")
    return stepped


def _calls(n: int, one: str, many: str) -> str:
    return "" if not n else f"a call {one}" if n == 1 else f"{n} calls {many}"


def run_drill(app: Any, options: DrillOptions, progress: Callable[[str], None] | None = None) -> DrillReport:
    """Run a drill of ``options.jobs`` of ``app`` (loaded from ``options.target``); see the module doc."""
    missing = [j for j in options.jobs if j not in app.jobs]
    if missing:
        known = ", ".join(sorted(app.jobs)) or "none"
        raise InvalidInput(f"no job named {', '.join(map(repr, missing))} is declared (declared: {known})")
    unknown = [f for f in options.faults if f not in FAULTS]
    if unknown:
        raise InvalidInput(f"unknown fault(s) {unknown}: use {', '.join(FAULTS)}")
    return Drill(app, options, progress).run()


__all__ = ["DrillOptions", "DrillReport", "JobReport", "check_samples", "parse_samples", "run_drill",
           "tally_steps"]
