"""Commands that run the user's code: ``worker`` and ``enqueue``."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import click

from firesafe.cli._common import Duration, JSONValue, echo_json, fail, json_option, not_empty, plain, safe_url
from firesafe.cli._loader import load_app
from firesafe.cli._render import masked_job_dict, to_json
from firesafe.errors import IdempotencyConflict
from firesafe.hooks import Hook
from firesafe.idempotency.keys import check_name
from firesafe.jobs import RESERVED
from firesafe.masking import mask
from firesafe.models import PRIORITY_MAX, PRIORITY_MIN

log = logging.getLogger("firesafe.worker")


def parse_queues(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    queues = tuple(q.strip() for q in text.split(",") if q.strip())
    if not queues:
        raise click.BadParameter("give at least one queue name", param_hint="--queues")
    return tuple(check_name(q, "queue name") for q in queues)


class _LeaseEnder:
    """The supervisor's ``on_gone``: ends the leases of a worker process that exited, on a store
    connection of the supervisor's own, opened at the first use (most runs never need it)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.store: Any = None
        self.closed = False
        self.lock = threading.Lock()

    def __call__(self, prefix: str, detail: dict[str, Any]) -> int:
        with self.lock:
            if self.closed:
                raise RuntimeError("the supervisor's store connection is closed")
            if self.store is None:
                self.store = self.app.connect()
            return self.store.worker_process_gone(prefix, detail)

    def close(self) -> None:
        if self.lock.acquire(timeout=1.0):  # not behind a call the store holds up
            try:
                self.closed = True
                if self.store is not None:
                    self.store.close()
                    self.store = None
            finally:
                self.lock.release()


def _watch_parent(worker: Any) -> None:
    """In a supervised child: stop gracefully if the supervisor goes away (killed with SIGKILL)."""
    from firesafe.worker.supervisor import SUPERVISOR_PID_ENV

    expected = os.environ.get(SUPERVISOR_PID_ENV)
    if not expected or not expected.isdigit():
        return

    def watch() -> None:
        while not worker.wait_stopped(1.0):
            if os.getppid() != int(expected):
                log.warning("supervisor (pid %s) is gone: stopping this worker", expected)
                worker.stop()
                return

    threading.Thread(target=watch, name="firesafe-parent-watch", daemon=True).start()


@click.command(short_help="Run worker processes for MODULE:APP.")
@click.argument("target", metavar="MODULE:APP")
@click.option("--queues", "-q", metavar="Q1,Q2", help="Comma-separated queues to take jobs from "
              "(default: every queue the app's jobs declare).")
@click.option("--concurrency", "-c", type=click.IntRange(1, 1024), default=8, show_default=True,
              help="Attempts run at once in each process (threads).")
@click.option("--prefetch", type=click.IntRange(0, 4096), default=None, metavar="N",
              help="Jobs each process may claim beyond its free threads while its attempts are short "
                   "(under 20 ms on average), so one commit saves more outcomes [default: as many as the "
                   "threads run in about 20 ms, at least the concurrency, at most 512 jobs held in all "
                   "(or twice the concurrency); N fixes it; 0 turns it off]. A prefetched job waits in the "
                   "worker, its lease held.")
@click.option("--pipeline", type=click.IntRange(1, 8), default=None, metavar="N",
              help="Store transactions each process keeps in flight: while one saves a batch's outcomes "
                   "and claims the next, the threads run the batch before it [default: 2 on PostgreSQL for "
                   "a worker that prefetches, else 1 (SQLite has one writer; limiters and --lanes use 1)]. "
                   "Each one in flight uses a store connection.")
@click.option("--lanes", type=click.IntRange(1, 16), default=1, show_default=True, metavar="N",
              help="Claim loops in each process, sharing its threads, each with its own store connection: "
                   "while one waits for its transaction another runs its Python. 2 may help one process "
                   "of very short jobs on PostgreSQL; see docs/operations.md.")
@click.option("--processes", "-p", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Worker processes; above 1 a supervisor starts, watches and restarts them.")
@click.option("--burst", is_flag=True, help="Exit once nothing is runnable (scripts, tests, cron).")
@click.option("--no-scheduler", "no_scheduler", is_flag=True,
              help="Run no scheduler here: enqueue no schedule windows. Without it, a worker runs the scheduler "
                   "of the schedules whose queue it serves (one active per queue across workers).")
@click.option("--wait-scheduled", is_flag=True, help="With --burst: also wait for jobs scheduled later "
              "(retries in backoff, delayed jobs).")
@click.option("--grace", type=Duration(), default="30s", show_default=True,
              help="On SIGTERM/SIGINT, how long running attempts may take to finish before they are "
                   "released back to the queue.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one JSON object per line (timestamp, level, logger, message, job_key, ...).")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              default="INFO", show_default=True)
def worker(target: str, queues: str | None, concurrency: int, prefetch: int | None, pipeline: int | None,
           lanes: int, processes: int, burst: bool, no_scheduler: bool, wait_scheduled: bool, grace: float,
           log_format: str, log_level: str) -> None:
    """Run workers for the app MODULE:APP (imported like uvicorn does; the current directory is importable).

    Each attempt is logged at INFO with its key, job, outcome, state and duration. SIGTERM or
    SIGINT stops claiming and lets running attempts finish within --grace, then releases the rest;
    a second signal exits at once (unfinished attempts are rescued when their lease expires).

    \b
    Examples:
      firesafe worker myapp:app --queues payments,default --concurrency 8
      firesafe worker myapp:app --processes 4 --log-format json
      firesafe worker myapp:app --burst          # drain what is runnable, then exit
      firesafe worker myapp:app --queues payments --no-scheduler
    """
    from firesafe.cli import _logs
    from firesafe.worker.supervisor import ready_notifier

    ready = ready_notifier()  # set by a supervisor (--processes N); taken now, so no job's process inherits it
    _logs.configure(log_format, log_level)
    queue_list = parse_queues(queues)
    app = load_app(target)
    declared = app.queues()
    unused = [q for q in queue_list if q not in declared]
    if unused and app.jobs:  # jobs can be sent to any queue (enqueue(queue=...)), so only a warning
        log.warning("no job of %s is declared on queue(s) %s (declared: %s); this worker takes only jobs "
                    "enqueued there explicitly", target, ", ".join(unused), ", ".join(declared))
    if processes > 1:
        from firesafe.limits.api import check_app
        from firesafe.worker.supervisor import Supervisor

        check_app(app)  # a job naming an undeclared limiter fails here, not in every child
        _ = app.store  # open and migrate once, before any child does, so a bad store fails here
        app.close()
        command = [sys.executable, "-m", "firesafe", "worker", target, "--concurrency", str(concurrency),
                   "--processes", "1", "--grace", repr(grace), "--log-format", log_format,
                   "--log-level", log_level]
        if queue_list:
            command += ["--queues", ",".join(queue_list)]
        if prefetch is not None:
            command += ["--prefetch", str(prefetch)]
        if pipeline is not None:
            command += ["--pipeline", str(pipeline)]
        if lanes != 1:
            command += ["--lanes", str(lanes)]
        if burst:
            command.append("--burst")
        if wait_scheduled:
            command.append("--wait-scheduled")
        if no_scheduler:
            command.append("--no-scheduler")
        ender = _LeaseEnder(app)
        try:
            code = Supervisor(command, processes, burst=burst, on_gone=ender).run()
        finally:
            ender.close()
        raise SystemExit(code)

    w = app.runner(queue_list or None, lanes, concurrency=concurrency, burst=burst,
                    wait_scheduled=wait_scheduled, grace=grace, prefetch=prefetch, pipeline=pipeline,
                    scheduler=not no_scheduler)
    w.install_signal_handlers()
    _watch_parent(w)
    if ready is not None:  # supervised: ready once the worker loop starts (store open, about to claim)
        app.add_hook(_Ready(ready))
    log.info("store %s", safe_url(app.store_url))
    try:  # its loops register with the app as they start: jobs that enqueue jobs wake them at once
        w.run()
    except Exception:  # a bug, not a user mistake: keep the traceback in the log stream
        log.critical("worker crashed", exc_info=True)
        raise SystemExit(1) from None
    finally:
        app.close()


@click.command(short_help="Enqueue a job of MODULE:APP, idempotent per --key.")
@click.argument("target", metavar="MODULE:APP")
@click.argument("job_name", metavar="JOB_NAME")
@click.option("--args", "args_", type=JSONValue(list), default="[]", metavar="JSON_LIST",
              help="Positional arguments as a JSON list, e.g. '[\"o-1\", 100]'.")
@click.option("--kwargs", "kwargs_", type=JSONValue(dict), default="{}", metavar="JSON_OBJECT",
              help="Keyword arguments as a JSON object, e.g. '{\"amount\": 100}'.")
@click.option("--key", help="The job's idempotency key (default: a new unique key).")
@click.option("--delay", type=Duration(), default=None, help="Run no sooner than this from now: 30, 30s, 10m, 2h.")
@click.option("--queue", callback=not_empty, help="Put the job in this queue instead of the job's own.")
@click.option("--priority", type=click.IntRange(PRIORITY_MIN, PRIORITY_MAX), default=None,
              metavar=f"{PRIORITY_MIN}..{PRIORITY_MAX}",
              help="Run before lower priorities of its queue (default: the job's own, else 0).")
@json_option
def enqueue(target: str, job_name: str, args_: list[Any], kwargs_: dict[str, Any], key: str | None,
            delay: float | None, queue: str | None, priority: int | None, as_json: bool) -> None:
    """Enqueue one run of JOB_NAME declared by the app MODULE:APP; idempotent per --key.

    An existing key with the same arguments prints the stored job (its state, and its result if
    done) and runs nothing new; the same key with other arguments is an error (exit code 1).

    \b
    Examples:
      firesafe enqueue myapp:app refund --args '["o-1", 100]' --key refund:o-1
      firesafe enqueue myapp:app send_digest --kwargs '{"day": "2024-05-01"}' --delay 10m --json
      firesafe enqueue myapp:app password_reset --args '["ann"]' --priority 10
    """
    reserved = sorted(RESERVED & set(kwargs_))
    if reserved:
        raise click.BadParameter(f"{', '.join(reserved)} cannot be a job argument (reserved by enqueue); "
                                 "use --key/--delay/--queue", param_hint="--kwargs")
    app = load_app(target)
    try:
        enqueuer = app.job_named(job_name).options(key=key, delay=delay, queue=queue, priority=priority)
        job = enqueuer.enqueue(*args_, **kwargs_)
    except IdempotencyConflict as exc:
        raise fail(f"{exc}; nothing was enqueued") from None
    finally:
        app.close()
    if as_json:
        echo_json({"created": job.created, **masked_job_dict(job, with_trace=False)})
        return
    if job.created:
        click.echo(plain(f"enqueued {job.key}  (job {job.name}, queue {job.queue}, state {job.state})"))
    else:
        click.echo(plain(f"{job.key} already exists (state {job.state}); nothing new was enqueued"))
        if job.result is not None:
            click.echo(f"result: {plain(to_json(mask(job.result)))}")


class _Ready(Hook):
    """Tells a supervisor the process is ready, as the leading worker starts its duties (the last
    of them: the store is open and the loop about to claim)."""

    def __init__(self, ready: Callable[[], None]) -> None:
        self._ready = ready

    def start_duty(self, worker: Any) -> None:
        self._ready()
