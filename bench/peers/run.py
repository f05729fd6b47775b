"""Peers, side by side: the same workloads through firesafe and the libraries users pick instead.

    make bench-peers                          # the full run: docs/benchmarks.md table, bench/HISTORY.md
    python bench/peers/run.py --quick         # N = 1,000 and shorter phases (about 5 minutes), no docs
    python bench/peers/run.py --only firesafe-sqlite,huey-sqlite --quick

Each library is installed by name with pip into a virtual environment of its own under
``bench/peers/.venvs/<lib>`` (created on the first run, ignored by git; ``--upgrade`` reinstalls);
firesafe runs from the project's environment. Every library runs the same job body (common.record),
on this machine's PostgreSQL (127.0.0.1:5432, a schema per library, dropped afterwards) and Redis
(127.0.0.1:6379, a database and key prefix per library, deleted afterwards), or on SQLite files in a
temporary folder. Workloads, for each library (one at a time, so none slows another):

1. enqueue N jobs one at a time, then drain them with ONE worker process;
2. enqueue N jobs in bulk (where the library has a bulk enqueue; else one at a time again), then
   drain them with TWO worker processes (rates run from the first job's start to the last one's end);
   each drain is run ``--repeat`` times (3 by default, 1 with --quick), each time in a new store,
   and the median rate is reported (one drain of 10,000 jobs lasts a second or two, and two such
   runs on a shared 2-CPU machine can differ by a quarter);
3. enqueue-to-start latency on an idle worker, p50 and p99 (each job enqueued 50-650 ms after the
   previous one ran, so polling workers are sampled at every phase of their poll);
4. the worker's resident memory after draining N jobs (VmRSS from /proc, with its child processes).

Then the recovery workload, for all libraries at once (it waits on timeouts, not on the CPU):
100 jobs of 200 ms each, each logging its start and its end to an external log; once 30 have ended
the worker is killed with SIGKILL (with any child process) and a new one is started at once; the log
is read for ``--window`` seconds after the kill: jobs lost (never ended), jobs run twice (ended twice),
jobs restarted (started twice), seconds from the kill until every job had ended once.

The bare loops (bare.py) measure each storage's own limit in the same run. One table is printed with
every figure as a ratio to firesafe on the same storage (Redis libraries: to firesafe on PostgreSQL)
and to the storage's bare loop; the full run writes it, the versions and the machine into
docs/benchmarks.md (between the ``peers-table`` markers, nothing else of the page), appends the same
under a dated heading to bench/HISTORY.md (where every earlier run stays), and writes the raw figures
into bench/results/.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENVS = HERE / ".venvs"
DOCS = ROOT / "docs" / "benchmarks.md"
HISTORY = ROOT / "bench" / "HISTORY.md"
HISTORY_SECTION = "## Peers runs"
RESULTS = ROOT / "bench" / "results"
BEGIN, END = "<!-- peers-table:begin -->", "<!-- peers-table:end -->"

#: venv name -> the packages pip installs in it, by name.
PACKAGES = {
    "huey": ["huey", "redis"],
    "rq": ["rq"],
    "celery": ["celery[redis]"],
    "dramatiq": ["dramatiq[redis]"],
    "procrastinate": ["procrastinate", "psycopg[binary]"],
    "pgqueuer": ["pgqueuer", "asyncpg", "psycopg[binary]"],
    "bare": ["redis", "psycopg[binary]"],
}


@dataclass
class Target:
    """One row of the table: a library on a storage (or a storage's bare loop)."""

    name: str
    storage: str
    venv: str | None  # None: the project's own environment
    script: str
    env: dict[str, str] = field(default_factory=dict)
    redis_db: int = 10
    #: Extra options of the bench run (the rows at other settings: drains only, no recovery run).
    extra: list[str] = field(default_factory=list)

    @property
    def python(self) -> str:
        return sys.executable if self.venv is None else str(VENVS / self.venv / "bin" / "python")

    @property
    def bare(self) -> bool:
        return self.script == "bare.py"


TARGETS = [
    Target("bare-sqlite", "sqlite", "bare", "bare.py"),
    Target("firesafe-sqlite", "sqlite", None, "peer_firesafe.py", {"PEERS_STORAGE": "sqlite"}),
    Target("firesafe-sqlite c64", "sqlite", None, "peer_firesafe.py", {"PEERS_STORAGE": "sqlite"},
           extra=["--concurrency", "64", "--drain-only"]),
    Target("huey-sqlite", "sqlite", "huey", "peer_huey.py", {"PEERS_STORAGE": "sqlite"}),
    Target("huey-sqlite c64", "sqlite", "huey", "peer_huey.py", {"PEERS_STORAGE": "sqlite"},
           extra=["--concurrency", "64", "--drain-only"]),
    Target("bare-postgresql", "postgresql", "bare", "bare.py"),
    Target("firesafe-postgresql", "postgresql", None, "peer_firesafe.py", {"PEERS_STORAGE": "postgresql"}),
    Target("firesafe-postgresql c64", "postgresql", None, "peer_firesafe.py", {"PEERS_STORAGE": "postgresql"},
           extra=["--concurrency", "64", "--drain-only"]),
    Target("firesafe-postgresql l2", "postgresql", None, "peer_firesafe.py",
           {"PEERS_STORAGE": "postgresql", "PEERS_FIRESAFE_LANES": "2"}, extra=["--drain-only"]),
    Target("procrastinate", "postgresql", "procrastinate", "peer_procrastinate.py"),
    Target("pgqueuer", "postgresql", "pgqueuer", "peer_pgqueuer.py"),
    Target("pgqueuer c8", "postgresql", "pgqueuer", "peer_pgqueuer.py", {"PEERS_PGQUEUER_CAP": "8"},
           extra=["--drain-only"]),
    Target("bare-redis", "redis", "bare", "bare.py", redis_db=14),
    Target("huey-redis", "redis", "huey", "peer_huey.py", {"PEERS_STORAGE": "redis"}, redis_db=10),
    Target("rq", "redis", "rq", "peer_rq.py", redis_db=11),
    Target("celery", "redis", "celery", "peer_celery.py", redis_db=12),
    Target("dramatiq", "redis", "dramatiq", "peer_dramatiq.py", redis_db=13),
]
REFERENCE = {"sqlite": "firesafe-sqlite", "postgresql": "firesafe-postgresql", "redis": "firesafe-postgresql"}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- set-up -----------------------------------------------------------------------------------------
def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def ensure_venvs(names: set[str], upgrade: bool) -> None:
    """Create the venvs that are missing and pip install their packages (in parallel)."""
    def one(name: str) -> str | None:
        venv = VENVS / name
        stamp = venv / ".installed"
        wanted = " ".join(PACKAGES[name])
        if not upgrade and stamp.exists() and stamp.read_text() == wanted:
            return None
        if not (venv / "bin" / "python").exists():
            base = getattr(sys, "_base_executable", None) or shutil.which("python3") or sys.executable
            subprocess.run([base, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
        proc = subprocess.run(pip + (["--upgrade"] if upgrade else []) + PACKAGES[name],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return f"{name}: pip install {wanted} failed:\n{proc.stderr[-2000:]}"
        stamp.write_text(wanted)
        return None

    VENVS.mkdir(parents=True, exist_ok=True)
    todo = sorted(names)
    if not todo:
        return
    say(f"virtual environments in {VENVS.relative_to(ROOT)}: {', '.join(todo)}")
    with concurrent.futures.ThreadPoolExecutor(len(todo)) as pool:
        errors = [e for e in pool.map(one, todo) if e]
    if errors:
        raise SystemExit("\n".join(errors))


def machine(folder: Path) -> dict[str, str]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = "unknown"
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    df = subprocess.run(["df", "-hT", str(folder)], capture_output=True, text=True).stdout.splitlines()
    disk = "unknown"
    if len(df) > 1:
        dev, fstype, size = df[-1].split()[:3]
        rot = Path(f"/sys/block/{Path(dev).name.rstrip('0123456789')}/queue/rotational")
        kind = {"0": "non-rotational", "1": "the kernel reports it rotational"}.get(
            rot.read_text().strip(), "") if rot.exists() else ""
        disk = f"{dev} {fstype} {size}" + (f" ({kind})" if kind else "")
    return {"nproc": str(os.cpu_count()), "cpu": cpu, "ram": mem, "disk": disk,
            "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
            "kernel": platform.release()}


def load() -> float:
    return os.getloadavg()[0]


# -- running the drivers ----------------------------------------------------------------------------
def env_for(t: Target, work: Path, prefix: str) -> dict[str, str]:
    folder = work / t.name
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(t.env)
    env.update({"PEERS_NAME": t.name, "PEERS_LOG": str(folder / "jobs.log"), "PEERS_DIR": str(folder),
                "PEERS_PREFIX": prefix, "PEERS_REDIS_DB": str(t.redis_db), "PEERS_CONCURRENCY": "8",
                "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def run_driver(t: Target, argv: list[str], work: Path, prefix: str, timeout: float) -> dict[str, Any]:
    cmd = [t.python, str(HERE / t.script), *argv]
    try:
        proc = subprocess.run(cmd, cwd=HERE, env=env_for(t, work, prefix), stdout=subprocess.PIPE,
                              stderr=None, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"error": f"exit {proc.returncode}"}
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": f"no JSON: {lines[-1][:200]}"}


def cleanup(t: Target, work: Path, prefix: str) -> None:
    """Drop whatever a driver that failed half-way left in PostgreSQL or Redis."""
    if not t.bare:
        subprocess.run([t.python, str(HERE / t.script), "cleanup"], cwd=HERE, env=env_for(t, work, prefix),
                       capture_output=True, timeout=120)


# -- the table ----------------------------------------------------------------------------------------
def fmt_rate(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f}"


def fmt_ms(v: float | None) -> str:
    return "—" if v is None else (f"{v:.1f}" if v < 100 else f"{v:,.0f}")


def ratio(v: float | None, ref: float | None) -> str:
    if v is None or ref is None or ref == 0:
        return "—"
    r = v / ref
    return f"{r:.2f}" if r < 10 else f"{r:.0f}"


def cell(v: float | None, fs: float | None, bare: float | None, kind: str = "rate") -> str:
    text = fmt_rate(v) if kind == "rate" else fmt_ms(v)
    if v is None:
        return text
    return f"{text} ({ratio(v, fs)}, {ratio(v, bare)})"


def figures(res: dict[str, Any]) -> dict[str, float | None]:
    """The table's figures of one bench result (None where there is none)."""
    def drain(k: str) -> float | None:
        d = res.get(k)
        return d["rate"] if d else None

    lat = res.get("latency") or {}
    rss = (res.get("drain_1") or {}).get("rss_mib")
    return {"enqueue_one": res.get("enqueue_one"), "enqueue_bulk": res.get("enqueue_bulk"),
            "drain_1": drain("drain_1"), "drain_2": drain("drain_2"),
            "p50": lat.get("p50_ms"), "p99": lat.get("p99_ms"), "rss": rss[0] if rss else None}


def table(bench: dict[str, dict[str, Any]], recov: dict[str, dict[str, Any]]) -> str:
    head = ["library (storage)", "enqueue 1 by 1, jobs/s", "enqueue bulk, jobs/s", "drain 1 process, jobs/s",
            "drain 2 processes, jobs/s", "latency p50, ms", "latency p99, ms", "worker RSS, MiB",
            "recovery: lost", "run twice", "restarted", "s until all done", "load"]
    rows = [head, ["---"] * len(head)]
    for t in TARGETS:
        res = bench.get(t.name)
        if res is None:
            continue
        if "error" in res:
            rows.append([t.name, f"failed: {res['error']}"] + [""] * (len(head) - 2))
            continue
        f = figures(res)
        fs = figures(bench.get(REFERENCE[t.storage], {}))
        bare = figures(bench.get(f"bare-{t.storage}", {}))
        note = []
        for k in ("drain_1", "drain_2"):
            d = res.get(k) or {}
            if d and not d.get("complete", True):
                note.append(f"{k.replace('_', ' ')}: {d['done']:,} of {d['jobs']:,} in the time cap")
        row = [t.name + (" *" if note else ""),
               cell(f["enqueue_one"], fs["enqueue_one"], bare["enqueue_one"]),
               cell(f["enqueue_bulk"], fs["enqueue_bulk"], bare["enqueue_bulk"]),
               cell(f["drain_1"], fs["drain_1"], bare["drain_1"]),
               cell(f["drain_2"], fs["drain_2"], bare["drain_2"]),
               cell(f["p50"], fs["p50"], bare["p50"], "ms"),
               cell(f["p99"], fs["p99"], bare["p99"], "ms"),
               "—" if f["rss"] is None else f"{f['rss']:.0f} ({ratio(f['rss'], fs['rss'])})"]
        r = recov.get(t.name)
        if t.bare or r is None:
            row += ["—"] * 4
        elif "error" in r:
            row += [f"failed: {r['error']}", "", "", ""]
        else:
            ref = recov.get(REFERENCE[t.storage], {}).get("seconds")
            secs = r.get("seconds")
            row += [str(r["lost"]), str(r["twice"]), str(r["restarted"]),
                    f"> {r['window']:.0f}" if secs is None else f"{secs:.1f} ({ratio(secs, ref)})"]
        row.append(f"{res.get('load', 0):.1f}")
        rows.append(row)
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def partial_notes(bench: dict[str, dict[str, Any]]) -> list[str]:
    out = []
    for name, res in bench.items():
        for k, label in (("drain_1", "1 process"), ("drain_2", "2 processes")):
            d = res.get(k) or {}
            if d and not d.get("complete", True):
                out.append(f"{name}: the drain with {label} ran {d['done']:,} of {d['jobs']:,} jobs in the "
                           f"time cap; its rate is over those")
    return out


#: How firesafe at concurrency 8 and ``pgqueuer c8`` match: both run 8 jobs at a time; firesafe, whose
#: jobs here are short, also holds up to 504 more that wait for a thread (prefetch, its default).
C8_NOTE = "both run at most 8 jobs at a time; firesafe holds " + (
    "up to 504 more, prefetched" if os.environ.get("PEERS_FIRESAFE_PREFETCH") is None
    else f"{os.environ['PEERS_FIRESAFE_PREFETCH']} more, prefetched (PEERS_FIRESAFE_PREFETCH)")


def targets(bench: dict[str, dict[str, Any]], recov: dict[str, dict[str, Any]]) -> list[str]:
    out = []

    def vs(ours: str, theirs: str, note: str = "") -> None:
        a, b = bench.get(ours, {}), bench.get(theirs, {})
        for k, label in (("drain_1", "1 process"), ("drain_2", "2 processes")):
            x, y = (a.get(k) or {}).get("rate"), (b.get(k) or {}).get("rate")
            if x and y and note:
                out.append(f"beside the targets: {ours} drains {x / y:.1f}x {theirs} with {label} ({note})")
            elif x and y:
                out.append(f"{ours} drains {x / y:.1f}x {theirs} with {label} (target >= 2x): "
                           f"{'met' if x / y >= 2 else 'MISSED'}")

    vs("firesafe-sqlite", "huey-sqlite")
    vs("firesafe-postgresql", "procrastinate")
    vs("firesafe-postgresql", "pgqueuer")
    # The same comparison at matched settings (beside the targets, which stay as above): both running
    # at most 8 jobs at a time per process, and neither held to 8.
    vs("firesafe-postgresql", "pgqueuer c8", note=C8_NOTE)
    vs("firesafe-postgresql c64", "pgqueuer", note="neither capped at 8: 64 threads, pgqueuer's no cap")
    vs("firesafe-postgresql l2", "pgqueuer", note="firesafe with two claim loops per process, lanes=2")
    vs("firesafe-sqlite c64", "huey-sqlite c64", note="both at 64 threads")
    for name in ("firesafe-sqlite", "firesafe-postgresql"):
        r = recov.get(name)
        if r and "error" not in r:
            ok = r["lost"] == 0 and r["twice"] == 0
            out.append(f"{name} recovery: {r['lost']} lost, {r['twice']} run twice (target 0 and 0): "
                       f"{'met' if ok else 'MISSED'}")
    bad = [f"{n} ({r['lost']} lost, {r['twice']} twice)" for n, r in recov.items()
           if "error" not in r and not n.startswith("firesafe") and (r["lost"] or r["twice"])]
    if bad:
        out.append("peers that lost or repeated jobs: " + ", ".join(bad))
    return out


def report(info: dict[str, Any], bench: dict[str, dict[str, Any]], recov: dict[str, dict[str, Any]],
           args: argparse.Namespace) -> str:
    versions: dict[str, str] = {}
    for res in list(bench.values()) + list(recov.values()):
        versions.update(res.get("versions") or {})
    lines = [
        f"Measured {info['date']} with `{info['command']}`: N = {args.jobs:,} jobs per enqueue mode, "
        f"recovery {args.recovery_jobs} jobs of {args.sleep * 1000:.0f} ms, window {args.window:.0f} s, "
        f"drains capped at {args.drain_timeout:.0f} s"
        + (f"; each drain figure is the median of {args.repeat} runs (every run's rate is in the raw "
           "figures)." if args.repeat > 1 else "."),
        "",
        f"Machine: {info['nproc']} CPUs ({info['cpu']}), {info['ram']} RAM, disk {info['disk']}, "
        f"Linux {info['kernel']}; Python {info['python']}, SQLite {info['sqlite']}, "
        f"PostgreSQL {versions.get('postgresql', '?')} (synchronous commit, fsync on), "
        f"Redis {versions.get('redis', '?')} (this machine's: no AOF, no RDB snapshots). "
        f"Load average (1 min): {info['load_start']:.1f} at the start, {info['load_end']:.1f} at the end; "
        f"the last column is the load when each row's run began.",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())
                                 if k not in ("postgresql", "synchronous", "journal_mode")) + ".",
        "",
        "In each cell: the figure, then (the figure / firesafe's on the same storage, the figure / the "
        "storage's bare loop). Redis libraries are compared with firesafe on PostgreSQL. For latency and "
        "memory a ratio above 1 is worse; for rates, better. Recovery counts are plain numbers.",
        "",
        table(bench, recov),
        "",
    ]
    for n in partial_notes(bench):
        lines.append(f"\\* {n}.  ")
    lines += ["", "Targets:", ""] + [f"- {t}" for t in targets(bench, recov)]
    lines += ["", "How each library ran (worker; what happens to a killed worker's jobs):", ""]
    for t in TARGETS:
        res = bench.get(t.name) or recov.get(t.name) or {}
        if t.bare or "worker" not in res:
            continue
        bulk = f"; bulk: `{res['bulk_api']}`" if res.get("bulk_api") else "; no bulk enqueue (1 by 1 again)"
        lines.append(f"- **{t.name}**: {res['worker']}{bulk}; {res.get('recovery_note', '')}.")
    return "\n".join(lines)


def write_docs(text: str, page: Path = DOCS) -> None:
    """Put the generated part between the markers of the benchmarks page's peers section (appending the
    section if it is not there); the rest of the page is left as it is, so it stays the short page
    for users and the history goes to :func:`append_history`."""
    doc = page.read_text() if page.exists() else "# Benchmarks\n"
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        doc = head + block + rest.split(END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n## Peers side by side\n\n" + block + "\n"
    page.write_text(doc)


def append_history(text: str, title: str, history: Path = HISTORY) -> None:
    """Append a run, under a heading of its date and command, to the end of bench/HISTORY.md (after the
    runs before it, which stay as they were; the "Peers runs" section is started if missing)."""
    doc = history.read_text() if history.exists() else "# Benchmark history\n"
    doc = doc.rstrip("\n") + "\n"
    if HISTORY_SECTION not in doc:
        doc += f"\n{HISTORY_SECTION}\n\nAppended by `bench/peers/run.py`, oldest first.\n"
    body = text.strip("\n")
    history.write_text(f"{doc}\n### {title}\n\n{body}\n")


# -- main -----------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--quick", action="store_true", help="N = 1,000 and shorter phases; no docs unless --docs")
    p.add_argument("--jobs", type=int, help="jobs per enqueue mode (default 10,000; 1,000 with --quick)")
    p.add_argument("--only", help="comma-separated rows to run (e.g. firesafe-sqlite,huey-sqlite)")
    p.add_argument("--no-recovery", action="store_true", help="skip the recovery workload")
    p.add_argument("--docs", action=argparse.BooleanOptionalAction, default=None,
                   help="write the table into docs/benchmarks.md (default: on for a full run of every row)")
    p.add_argument("--history", action=argparse.BooleanOptionalAction, default=None,
                   help="append the run to bench/HISTORY.md (default: as --docs; --history records a partial run)")
    p.add_argument("--upgrade", action="store_true", help="reinstall the libraries at their newest versions")
    p.add_argument("--repeat", type=int, metavar="K",
                   help="run each drain K times, each in a new store, and report the median rate (default 3; "
                        "1 with --quick)")
    args = p.parse_args(argv)
    args.jobs = args.jobs or (1_000 if args.quick else 10_000)
    args.repeat = args.repeat or (1 if args.quick else 3)
    if args.repeat < 1:
        raise SystemExit("--repeat takes a count of 1 or more")
    args.samples = 20 if args.quick else 100
    args.latency_seconds = 6.0 if args.quick else 20.0
    args.drain_timeout = 20.0 if args.quick else 60.0
    args.recovery_jobs, args.sleep, args.kill_after = 100, 0.2, 30
    args.window = 45.0 if args.quick else 70.0
    chosen = [t for t in TARGETS if not args.only or t.name in args.only.split(",")]
    if args.only and len(chosen) != len(args.only.split(",")):
        raise SystemExit(f"--only takes names among: {', '.join(t.name for t in TARGETS)}")
    if args.docs is None:
        args.docs = not args.quick and not args.only
    if args.history is None:
        args.history = args.docs

    for port, storage in ((5432, "postgresql"), (6379, "redis")):
        if any(t.storage == storage for t in chosen) and not port_open(port):
            raise SystemExit(f"{storage} is not answering on 127.0.0.1:{port}")
    ensure_venvs({t.venv for t in chosen if t.venv}, args.upgrade)

    prefix = f"fsp{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="firesafe-peers-"))
    info: dict[str, Any] = machine(work)
    info.update(date=time.strftime("%Y-%m-%d %H:%M %Z"), load_start=load(),
                command="make bench-peers" if not (args.quick or args.only) else "bench/peers/run.py "
                + " ".join(argv if argv is not None else sys.argv[1:]))
    say(f"machine: {info['nproc']} CPUs ({info['cpu']}), {info['ram']}, disk {info['disk']}; "
        f"load {info['load_start']:.1f}; work folder {work}")
    bench: dict[str, dict[str, Any]] = {}
    recov: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    try:
        for t in chosen:
            say(f"\n{t.name}:")
            before = load()
            if t.bare:
                argv_t = [t.storage, "--jobs", str(min(args.jobs, 3000)), "--samples", str(args.samples)]
            else:
                argv_t = ["bench", "--jobs", str(args.jobs), "--samples", str(args.samples),
                          "--latency-seconds", str(args.latency_seconds), "--drain-timeout", str(args.drain_timeout),
                          "--repeat", str(args.repeat), *t.extra]
            res = run_driver(t, argv_t, work, prefix, timeout=900)
            res["load"] = before
            if "error" in res:
                say(f"  {t.name}: FAILED ({res['error']})")
                cleanup(t, work, prefix)
            elif t.bare:
                say(f"  {t.name:<24} enqueue {res['enqueue_one']:,.0f}/s, bulk {res['enqueue_bulk']:,.0f}/s, "
                    f"drain {res['drain_1']['rate']:,.0f}/s (1 process), {res['drain_2']['rate']:,.0f}/s (2)")
            bench[t.name] = res
        if not args.no_recovery:
            peers = [t for t in chosen if not t.bare and not t.extra]
            say(f"\nrecovery, all at once ({len(peers)} libraries, {args.window:.0f} s after each kill):")
            argv_r = ["recovery", "--jobs", str(args.recovery_jobs), "--sleep", str(args.sleep),
                      "--kill-after", str(args.kill_after), "--window", str(args.window)]
            with concurrent.futures.ThreadPoolExecutor(max(1, len(peers))) as pool:
                futures = {t.name: pool.submit(run_driver, t, argv_r, work, prefix, 600) for t in peers}
                for t in peers:
                    recov[t.name] = futures[t.name].result()
                    r = recov[t.name]
                    if "error" in r:
                        say(f"  {t.name}: FAILED ({r['error']})")
                        cleanup(t, work, prefix)
                    else:
                        when = "not" if r["seconds"] is None else f"{r['seconds']:.1f} s"
                        say(f"  {t.name:<24} lost {r['lost']}, run twice {r['twice']}, restarted {r['restarted']}, "
                            f"all done {when} after the kill ({r['running_at_kill']} running, "
                            f"{r['done_at_kill']} done at the kill)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info["load_end"] = load()
    info["minutes"] = (time.monotonic() - started) / 60
    text = report(info, bench, recov, args)
    print()
    print(text)
    say(f"\n{info['minutes']:.1f} minutes")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"peers-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"machine": info, "bench": bench, "recovery": recov,
                               "args": vars(args)}, indent=2, default=str))
    say(f"raw figures: {out.relative_to(ROOT)}")
    if args.docs:
        write_docs(text)
        say(f"written to {DOCS.relative_to(ROOT)}")
    if args.history:
        append_history(text, f"{info['date']}, `{info['command']}`")
        say(f"appended to {HISTORY.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
