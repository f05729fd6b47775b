"""The harness every peer driver shares: the workloads, the job body, the clocks, /proc reading.

Standard library only: each driver runs it inside its own library's virtual environment. A driver
(``peer_<lib>.py``) defines a :class:`Peer` subclass and calls :func:`main`; the runner (``run.py``)
starts it as ``<venv>/bin/python peer_<lib>.py bench|recovery|worker [options]`` and reads the JSON
it prints as its last line.

Every job, in every library, is the same function body, :func:`record`: it appends one line to an
external log (``O_APPEND``, one ``write`` per line, so lines from many processes never interleave)
with its tag, its number and its start and end times, sleeping first if asked to. The harness reads
that log, never the library's own bookkeeping, so every library is timed and counted the same way:

- drain rate: jobs / (last job's end - first job's start), so worker start-up is not counted;
- enqueue-to-start latency: the job's start minus the enqueue time passed to it as an argument;
- recovery: which jobs ran (an ``E`` line), which ran twice, which were started twice.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# -- configuration, passed by the runner in the environment (inherited by worker processes) -------
LOG = os.environ.get("PEERS_LOG", "")
WORKDIR = Path(os.environ.get("PEERS_DIR", "/tmp"))
PG_URL = os.environ.get("PEERS_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_HOST = os.environ.get("PEERS_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("PEERS_REDIS_PORT", "6379"))
REDIS_DB = int(os.environ.get("PEERS_REDIS_DB", "10"))
#: Names this run's objects carry (Redis key prefix, PostgreSQL schema, queue name): unique per run.
PREFIX = os.environ.get("PEERS_PREFIX", "peers")
CONCURRENCY = int(os.environ.get("PEERS_CONCURRENCY", "8"))

Item = tuple[int, str, float, float]  # (number, tag, seconds to sleep, enqueue time)


def queries(schema: str = "") -> dict[str, str]:
    """The named queries of peers.sql, with ``{schema}`` quoted in (it must be a plain identifier)."""
    if schema and not schema.replace("_", "a").isalnum():
        raise ValueError(f"not a plain schema name: {schema!r}")
    out: dict[str, str] = {}
    name = None
    for line in (HERE / "peers.sql").read_text().splitlines():
        if line.startswith("-- name:"):
            name = line.split(":", 1)[1].strip()
            out[name] = ""
        elif name and not line.startswith("--"):
            out[name] += line.replace("{schema}", f'"{schema}"') + "\n"
    return out


def schema_name(lib: str) -> str:
    """This run's PostgreSQL schema for one library (lower case: unquoted names fold to it)."""
    return f"{PREFIX}_{lib}".lower()

_fd: int | None = None
_pid = 0


def _log_fd() -> int:
    global _fd, _pid
    if _fd is None or _pid != os.getpid():  # reopen after a fork: harmless, and keeps O_APPEND
        _fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _pid = os.getpid()
    return _fd


def record(i: int, tag: str, sleep: float = 0.0, sent: float = 0.0) -> None:
    """The body of every job: (sleep,) then log ``E tag i start end sent``; ``S`` first if it sleeps."""
    start = time.time()
    fd = _log_fd()
    if sleep:
        os.write(fd, f"S {tag} {i} {start:.6f}\n".encode())
        time.sleep(sleep)
    os.write(fd, f"E {tag} {i} {start:.6f} {time.time():.6f} {sent:.6f}\n".encode())


async def arecord(i: int, tag: str, sleep: float = 0.0, sent: float = 0.0) -> None:
    """:func:`record` for ``async def`` jobs: the sleep does not block the event loop."""
    start = time.time()
    fd = _log_fd()
    if sleep:
        os.write(fd, f"S {tag} {i} {start:.6f}\n".encode())
        await asyncio.sleep(sleep)
    os.write(fd, f"E {tag} {i} {start:.6f} {time.time():.6f} {sent:.6f}\n".encode())


class Log:
    """Reads the job log incrementally (only the new complete lines on each :meth:`poll`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.rest = b""
        self.ends: dict[str, dict[int, list[tuple[float, float, float]]]] = {}
        self.starts: dict[str, dict[int, int]] = {}
        self.first_start: dict[str, dict[int, float]] = {}

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        data = self.rest + data
        lines = data.split(b"\n")
        self.rest = lines.pop()
        for line in lines:
            parts = line.decode().split()
            if parts[0] == "E":
                self.ends.setdefault(parts[1], {}).setdefault(int(parts[2]), []).append(
                    (float(parts[3]), float(parts[4]), float(parts[5])))
            elif parts[0] == "S":
                runs = self.starts.setdefault(parts[1], {})
                runs[int(parts[2])] = runs.get(int(parts[2]), 0) + 1
                self.first_start.setdefault(parts[1], {}).setdefault(int(parts[2]), float(parts[3]))

    def done(self, tag: str) -> int:
        return len(self.ends.get(tag, {}))

    def wait(self, tag: str, n: int, timeout: float, every: float = 0.05,
             procs: Sequence[subprocess.Popen[bytes]] = ()) -> bool:
        """Until ``n`` jobs of ``tag`` ran, ``timeout`` passed or every one of ``procs`` exited."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if self.done(tag) >= n:
                return True
            if time.monotonic() >= deadline or (procs and all(p.poll() is not None for p in procs)):
                return False
            time.sleep(every)


# -- processes ----------------------------------------------------------------------------------
def descendants(pid: int) -> list[int]:
    """pid's children, grandchildren, ... from /proc (every thread's children file)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                kids = Path(f"/proc/{p}/task/{t}/children").read_text().split()
            except OSError:
                continue
            for k in map(int, kids):
                if k not in out:
                    out.append(k)
                    todo.append(k)
    return out


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_mib(pid: int) -> float:
    """Resident memory of a process and all its descendants, in MiB (shared pages counted in each)."""
    return sum(rss_kib(p) for p in [pid, *descendants(pid)]) / 1024


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant (frozen first with SIGSTOP so none can respawn or
    escape: workers that fork a child per job, or that setsid it, lose it too)."""
    seen: list[int] = []
    for _ in range(5):
        new = [p for p in [pid, *descendants(pid)] if p not in seen]
        if not new:
            break
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        seen += new
    for p in seen:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM, then after ``grace`` seconds SIGKILL the whole tree."""
    if proc.poll() is None:
        kids = descendants(proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.wait(10)
        for k in kids:  # a child that outlived its parent
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


# -- the peer interface -------------------------------------------------------------------------
class Peer:
    """One library on one storage. Subclasses fill in the hooks."""

    name = "?"
    storage = "?"
    #: Whether the library has a bulk enqueue that batches round trips (None: it has none).
    bulk_api: str | None = None
    #: Worker configuration, as the report prints it.
    worker_note = ""
    #: How the library gets a killed worker's jobs back, as the report prints it.
    recovery_note = ""

    def setup(self) -> None:
        """Create this run's storage objects (schema, tables)."""

    def teardown(self) -> None:
        """Drop this run's storage objects."""

    def versions(self) -> dict[str, str]:
        return {}

    def enqueue(self, item: Item) -> None:
        raise NotImplementedError

    def enqueue_bulk(self, items: list[Item]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Close the enqueuing side's connections."""

    def work(self, concurrency: int, recovery: bool) -> None:
        """Run one worker in this process until it is signalled."""
        raise NotImplementedError

    def worker_argv(self, concurrency: int, recovery: bool) -> list[str]:
        """The command that starts one worker process (default: this driver's ``worker`` mode)."""
        argv = [sys.executable, sys.argv[0], "worker", "--concurrency", str(concurrency)]
        return argv + (["--recovery"] if recovery else [])

    # -- helpers ---------------------------------------------------------------------------------
    def spawn(self, concurrency: int, recovery: bool = False) -> subprocess.Popen[bytes]:
        with open(WORKDIR / f"{self.name}-worker-{time.monotonic_ns()}.err", "wb") as err:  # the child's output
            return subprocess.Popen(self.worker_argv(concurrency, recovery), cwd=HERE, stdout=err, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)

    def enqueue_all(self, items: list[Item], bulk: bool, chunk: int = 1000) -> None:
        if bulk and self.bulk_api:
            for lo in range(0, len(items), chunk):
                self.enqueue_bulk(items[lo:lo + chunk])
        else:
            for it in items:
                self.enqueue(it)


def _worker_errors(peer: Peer) -> str:
    tails = []
    for f in sorted(WORKDIR.glob(f"{peer.name}-worker-*.err")):
        text = f.read_text(errors="replace").strip()
        if text:
            tails.append(f"--- {f.name}\n{text[-1500:]}")
    return "\n".join(tails[-2:])


# -- the workloads ------------------------------------------------------------------------------
def drain(peer: Peer, log: Log, tag: str, n: int, processes: int, concurrency: int,
          timeout: float) -> dict[str, Any]:
    """Start ``processes`` workers on ``n`` waiting jobs; time the drain from the log; RSS after it."""
    t0 = time.monotonic()
    procs = [peer.spawn(concurrency) for _ in range(processes)]
    try:
        ok = log.wait(tag, n, timeout, procs=procs)
        wall = time.monotonic() - t0
        ends = log.ends.get(tag, {})
        first = min(r[0][0] for r in ends.values()) if ends else 0.0
        last = max(r[0][1] for r in ends.values()) if ends else 0.0
        done = len(ends)
        time.sleep(0.3)  # let the last outcomes be committed before reading memory
        rss = [tree_rss_mib(p.pid) for p in procs]
        dead = [p.returncode for p in procs if p.poll() is not None]
    finally:
        for p in procs:
            stop(p)
    if done == 0:
        raise SystemExit(f"{peer.name}: no job ran in {timeout:.0f}s\n{_worker_errors(peer)}")
    return {"jobs": n, "done": done, "complete": ok, "rate": done / max(last - first, 1e-9),
            "window": last - first, "wall": wall, "rss_mib": rss, "exited": dead,
            "twice": sum(1 for r in ends.values() if len(r) > 1)}


def latency(peer: Peer, log: Log, samples: int, seconds: float, concurrency: int) -> dict[str, Any]:
    """Enqueue-to-start on an idle worker: one job at a time, each after the previous one ran and a
    random pause of 50 to 650 ms (so the worker is back in its idle wait, at a random phase of a poll
    interval up to 0.6 s: a fixed pause would always land at the same point of a polling worker's
    cycle)."""
    proc = peer.spawn(concurrency)
    rng = random.Random(7)
    out: list[float] = []
    try:
        peer.enqueue((0, "warm", 0.0, time.time()))
        if not log.wait("warm", 1, 60, every=0.005, procs=[proc]):
            raise SystemExit(f"{peer.name}: the latency worker never ran a job\n{_worker_errors(peer)}")
        deadline = time.monotonic() + seconds
        for i in range(samples):
            if time.monotonic() > deadline:
                break
            time.sleep(rng.uniform(0.05, 0.65))
            peer.enqueue((i, "lat", 0.0, time.time()))
            if not log.wait("lat", i + 1, 30, every=0.0005, procs=[proc]):
                break
            start, _end, sent = log.ends["lat"][i][0]
            out.append((start - sent) * 1000)
    finally:
        stop(proc)
    if not out:
        return {"samples": 0}
    return {"samples": len(out), "p50_ms": percentile(out, 50), "p99_ms": percentile(out, 99),
            "max_ms": max(out)}


def drains(peer: Peer, log: Log, tag: str, n: int, processes: int, args: argparse.Namespace) -> dict[str, Any]:
    """The drain of ``n`` jobs already waiting, then ``args.repeat - 1`` more, each in a new store
    (set up again, so no run drains a table the runs before it left dead rows in) on a backlog
    enqueued in bulk: the result of the run with the median rate (the lower one of an even count),
    with every run's rate under ``rates``. One drain of 10,000 jobs lasts a second or two, and on a
    shared 2-CPU machine two such runs can differ by a quarter."""
    runs: list[dict[str, Any]] = []
    for r in range(args.repeat):
        name = tag if r == 0 else f"{tag}.{r}"
        if r:
            peer.setup()
            peer.enqueue_all([(i, name, 0.0, 0.0) for i in range(n)], bulk=True)
        res = drain(peer, log, name, n, processes, args.concurrency, args.drain_timeout)
        if not res["complete"]:  # start the next phase on an empty store
            peer.setup()
        runs.append(res)
    chosen = dict(sorted(runs, key=lambda d: d["rate"])[(len(runs) - 1) // 2])
    chosen["rates"] = [d["rate"] for d in runs]
    return chosen


def _rates(d: dict[str, Any]) -> str:
    return "" if len(d["rates"]) < 2 else f", median of {', '.join(f'{r:,.0f}' for r in d['rates'])}"


def bench(peer: Peer, args: argparse.Namespace) -> dict[str, Any]:
    log = Log(LOG)
    n, res = args.jobs, {}
    items = [(i, "d1", 0.0, 0.0) for i in range(n)]
    t = time.perf_counter()
    peer.enqueue_all(items, bulk=args.drain_only)
    if not args.drain_only:
        res["enqueue_one"] = n / (time.perf_counter() - t)
        say(peer, f"enqueue one at a time {res['enqueue_one']:,.0f}/s")
    res["drain_1"] = drains(peer, log, "d1", n, 1, args)
    say(peer, f"drain, 1 process {res['drain_1']['rate']:,.0f}/s ({res['drain_1']['done']:,}/{n:,} jobs, "
        f"RSS {res['drain_1']['rss_mib'][0]:.0f} MiB{_rates(res['drain_1'])})")
    items = [(i, "d2", 0.0, 0.0) for i in range(n)]
    t = time.perf_counter()
    peer.enqueue_all(items, bulk=True)
    rate = n / (time.perf_counter() - t)
    if args.drain_only:
        pass
    elif peer.bulk_api:
        res["enqueue_bulk"] = rate
        say(peer, f"enqueue in bulk ({peer.bulk_api}) {rate:,.0f}/s")
    else:
        res["enqueue_one_again"] = rate
    res["drain_2"] = drains(peer, log, "d2", n, 2, args)
    say(peer, f"drain, 2 processes {res['drain_2']['rate']:,.0f}/s ({res['drain_2']['done']:,}/{n:,} jobs"
        f"{_rates(res['drain_2'])})")
    if args.drain_only:
        return res
    res["latency"] = latency(peer, log, args.samples, args.latency_seconds, args.concurrency)
    lat = res["latency"]
    if lat["samples"]:
        say(peer, f"latency p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms ({lat['samples']} samples)")
    return res


def recovery(peer: Peer, args: argparse.Namespace) -> dict[str, Any]:
    """kill -9 a worker running ``--jobs`` sleeping jobs once ``--kill-after`` of them are done and some
    are half-way through (a batch that all started together also ends together: a kill right after
    it would find nothing running), start a new worker at once, and watch the log for ``--window``
    seconds after the kill."""
    log = Log(LOG)
    n = args.jobs
    peer.enqueue_all([(i, "rc", args.sleep, time.time()) for i in range(n)], bulk=True)
    first = peer.spawn(args.concurrency, recovery=True)
    second = None
    try:
        if not log.wait("rc", args.kill_after, 120, every=0.01, procs=[first]):
            raise SystemExit(f"{peer.name}: the recovery worker never got going\n{_worker_errors(peer)}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until a job has run for a quarter to half of its time
            log.poll()
            ends = log.ends.get("rc", {})
            ages = [time.time() - t for i, t in log.first_start.get("rc", {}).items() if i not in ends]
            if any(args.sleep / 4 <= a <= args.sleep / 2 for a in ages):
                break
            time.sleep(0.002)
        running = sum(1 for i in log.starts.get("rc", {}) if i not in log.ends.get("rc", {}))
        done_at_kill = log.done("rc")
        killed = time.time()
        kill_tree(first.pid)
        first.wait(10)
        second = peer.spawn(args.concurrency, recovery=True)
        all_done: float | None = None
        deadline = time.monotonic() + args.window
        while time.monotonic() < deadline:
            log.poll()
            if all_done is None and log.done("rc") >= n:
                all_done = max(min(r[1] for r in runs) for runs in log.ends["rc"].values()) - killed
            time.sleep(0.1)
        log.poll()
    finally:
        stop(first, 1)
        if second is not None:
            stop(second)
    ends, starts = log.ends.get("rc", {}), log.starts.get("rc", {})
    return {"jobs": n, "sleep": args.sleep, "done_at_kill": done_at_kill, "running_at_kill": running,
            "lost": n - len(ends), "twice": sum(1 for r in ends.values() if len(r) > 1),
            "restarted": sum(1 for c in starts.values() if c > 1), "seconds": all_done,
            "window": args.window}


def say(peer: Peer, text: str) -> None:
    print(f"  {os.environ.get('PEERS_NAME', peer.name):<24} {text}", file=sys.stderr, flush=True)


def main(peer_factory: Callable[[], Peer], argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["bench", "recovery", "worker", "cleanup"])
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=CONCURRENCY)
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--latency-seconds", type=float, default=25.0)
    p.add_argument("--drain-timeout", type=float, default=240.0)
    p.add_argument("--sleep", type=float, default=0.2)
    p.add_argument("--kill-after", type=int, default=30)
    p.add_argument("--window", type=float, default=75.0)
    p.add_argument("--recovery", action="store_true")
    p.add_argument("--drain-only", action="store_true", help="bench: bulk enqueues and the two drains only")
    p.add_argument("--repeat", type=int, default=1, help="bench: run each drain this many times; report the median")
    args = p.parse_args(argv)
    peer = peer_factory()
    if args.mode == "worker":
        peer.work(args.concurrency, args.recovery)
        return 0
    if args.mode == "cleanup":
        peer.teardown()
        return 0
    peer.setup()
    try:
        out = bench(peer, args) if args.mode == "bench" else recovery(peer, args)
        out["versions"] = peer.versions()
        out["worker"] = peer.worker_note.format(c=args.concurrency)
        out["recovery_note"] = peer.recovery_note
        out["bulk_api"] = peer.bulk_api
    finally:
        peer.close()
        peer.teardown()
    print(json.dumps(out))
    return 0
