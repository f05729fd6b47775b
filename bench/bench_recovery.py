"""Recovery from a killed worker process: under the supervisor, against a lone worker restarted at once.

In one command, on one store, the same workload twice: 16 jobs of 2 s on 2 worker processes of 4
threads each (``--burst --wait-scheduled``, the default 30 s lease); once 8 have started, one worker
process gets SIGKILL.

1. supervised: ``firesafe worker APP --processes 2``; the supervisor sees its child die, ends the
   leases of the attempts it held, restarts it, and the attempts are rescued at once;
2. lone (the baseline): two ``firesafe worker APP`` processes; the killed one is started again at
   once, as systemd or Kubernetes would, and the attempts it held wait for their leases to run out.

Printed for each: seconds from the kill until every job had ended once, jobs lost (never ended) and
jobs whose effect ran twice (ended twice), then the baseline's time over the supervised one's.

    python bench/bench_recovery.py                       # SQLite in a temporary folder
    python bench/bench_recovery.py --store postgresql://postgres@127.0.0.1:5432/test?schema=bench_recovery
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
JOBS, SECONDS, PROCESSES, THREADS = 16, 2.0, 2, 4

APP = """
import os
import time

from firesafe import App

app = App({url!r})
LOG = {log!r}


@app.job
def slow(ctx, i: int) -> None:
    with open(LOG, "a") as f:
        f.write(f"S {{os.getpid()}} {{i}}\\n")
    time.sleep({seconds!r})
    with open(LOG, "a") as f:
        f.write(f"E {{os.getpid()}} {{i}}\\n")
"""


def read_log(path: Path) -> tuple[list[tuple[int, int]], Counter[int]]:
    """(pid, job) of each start, and how many times each job ended."""
    starts: list[tuple[int, int]] = []
    ends: Counter[int] = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            kind, pid, i = line.split()
            if kind == "S":
                starts.append((int(pid), int(i)))
            else:
                ends[int(i)] += 1
    return starts, ends


def run(mode: str, url: str, workdir: Path) -> dict[str, float | int]:
    log = workdir / f"{mode}.log"
    name = f"recovery_{mode}"
    (workdir / f"{name}.py").write_text(APP.format(url=url, log=str(log), seconds=SECONDS))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(workdir), str(ROOT)]))
    run_id = uuid.uuid4().hex[:8]  # keys of this run only: a store given with --store may hold earlier runs
    subprocess.run([sys.executable, "-c", f"import {name} as m; m.app.store.migrate(); m.slow.enqueue_many("
                    f"[{{'args': [i], 'key': '{mode}:{run_id}:' + str(i)}} for i in range({JOBS})])"],
                   env=env, cwd=workdir, check=True)
    worker = [sys.executable, "-m", "firesafe", "worker", f"{name}:app", "--concurrency", str(THREADS),
              "--burst", "--wait-scheduled", "--log-level", "warning"]

    procs: list[subprocess.Popen[bytes]] = []
    with open(workdir / f"{mode}.err", "ab") as err:
        try:
            return _kill_one(mode, log, procs, lambda argv: procs.append(subprocess.Popen(
                argv, env=env, cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)), worker)
        except RuntimeError as exc:  # the workers' output goes with the temporary folder: show its end
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            tail = (workdir / f"{mode}.err").read_text(errors="replace")[-3000:]
            raise SystemExit(f"{exc}\n--- the workers' output, last lines:\n{tail}") from None


def _kill_one(mode: str, log: Path, procs: list[subprocess.Popen[bytes]], start: Any,
              worker: list[str]) -> dict[str, float | int]:
    """Start the workers, SIGKILL one once its attempts are a quarter through, time the rest."""
    if mode == "supervised":
        start([*worker, "--processes", str(PROCESSES)])
    else:
        for _ in range(PROCESSES):
            start(worker)
    deadline = time.monotonic() + 60
    while len(read_log(log)[0]) < PROCESSES * THREADS:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{mode}: the jobs did not start within 60 s")
        time.sleep(0.02)
    time.sleep(SECONDS / 4)  # a quarter of the way into the running attempts
    victim = min(pid for pid, _ in read_log(log)[0])
    held = sum(1 for pid, i in read_log(log)[0] if pid == victim and not read_log(log)[1][i])
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    if mode == "lone":
        start(worker)
    done_at = None
    while any(p.poll() is None for p in procs):
        if done_at is None and len(read_log(log)[1]) == JOBS:
            done_at = time.monotonic()
        if time.monotonic() - killed > 180:
            raise RuntimeError(f"{mode}: not done 180 s after the kill")
        time.sleep(0.02)
    _, ends = read_log(log)
    done_at = done_at or time.monotonic()
    return {"seconds": round(done_at - killed, 2), "held": held, "lost": JOBS - len(ends),
            "twice": sum(1 for n in ends.values() if n > 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--store", help="store URL (default: a SQLite file in a temporary folder)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="firesafe-recovery-") as tmp:
        workdir = Path(tmp)
        results = {}
        for mode in ("supervised", "lone"):
            url = args.store or f"sqlite:///{workdir / (mode + '.db')}"
            if args.store:  # both modes in the store given, their keys apart
                from firesafe.stores import open_store

                store = open_store(url)
                store.migrate()
                store.close()
            results[mode] = run(mode, url, workdir)
            if not args.json:
                r = results[mode]
                what = f"all {JOBS} jobs done" if not r["lost"] else f"NOT ALL DONE ({r['lost']} lost); workers ended"
                print(f"{mode:>10}: {what} {r['seconds']:.1f} s after the kill (the killed process held "
                      f"{r['held']}); lost {r['lost']}, run twice {r['twice']}", flush=True)
    ratio = results["lone"]["seconds"] / max(float(results["supervised"]["seconds"]), 1e-9)
    if args.json:
        print(json.dumps({"results": results, "lone_over_supervised": round(ratio, 2)}))
    else:
        print(f"recovery under the supervisor: {ratio:.1f}x as fast as a lone worker restarted at once "
              f"(lease 30 s, rescue pass every 5 s)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
