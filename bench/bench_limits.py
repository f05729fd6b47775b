"""A shared rate limiter under load: 2,000 jobs through a 200/s limiter across 2 worker processes.

In one run, on one store, against a provider on 127.0.0.1 (the tests' provider, tests/limits/provider.py):

1. baseline: the same jobs with no limiter, drained by the same 2 worker processes (how fast the
   workers could go: the limiter must be the bottleneck, not the workers);
2. limited: ``app.limiter("provider", rate=200, burst=20)``; every job calls the provider once.

Printed: the achieved rate as a fraction of the limit (target >= 0.95), measured from the first to
the last request, the burst granted at the start left out; and the limit violations (target 0): 1-second
windows (sliding, one starting at each request) holding more than ``rate + burst`` requests, counted at
the grant (the store's clock, as each attempt's trace records it) and at the provider (arrival); and,
at the provider, the windows of 0.1, 0.25 and 1 s holding more than ``burst + rate * w + 1``.

    python bench/bench_limits.py                       # SQLite in a temporary folder
    python bench/bench_limits.py --store postgresql://postgres@127.0.0.1:5432/test?schema=bench_limits
"""

from __future__ import annotations

import argparse
import json
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from firesafe.store.base import JobFilter  # noqa: E402
from tests.limits.procs import build_app  # noqa: E402
from tests.limits.provider import Provider  # noqa: E402

RATE_TARGET = 0.95


def windows_over(times: list[float], bound: float, window: float = 1.0) -> tuple[int, int]:
    """``(windows holding more than bound, most in any window)``, one window starting at each time."""
    over = most = 0
    j = 0
    for i, t in enumerate(times):
        while j < len(times) and times[j] < t + window:
            j += 1
        most = max(most, j - i)
        over += (j - i) > bound
    return over, most


def run(store_url: str, provider: Provider, jobs: int, workers: int, rate: float | None, burst: float | None,
        job: str) -> tuple[float, list[str]]:
    """Start the workers, enqueue, wait until every job succeeded; returns (seconds, worker outputs)."""
    app = build_app(store_url, provider.url, rate=rate, burst=burst)
    app.store.migrate()
    args = [sys.executable, "-m", "tests.limits.procs", store_url, provider.url, "--concurrency", "8"]
    if rate is not None:
        args += ["--rate", str(rate), "--burst", str(burst)]
    procs = [subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
             for _ in range(workers)]
    try:
        deadline = time.monotonic() + 60
        while len(app.store.worker_list()) < workers:  # started and heartbeating: their start-up is not timed
            if time.monotonic() > deadline:
                raise SystemExit("the workers did not start")
            time.sleep(0.05)
        before = app.store.job_count(JobFilter(state="succeeded"))
        start = time.monotonic()
        app.jobs[job].enqueue_many([{"key": f"{job}-{rate}-{i}"} for i in range(jobs)])
        while app.store.job_count(JobFilter(state="succeeded")) < before + jobs:
            if time.monotonic() - start > 300:
                raise SystemExit(f"not done after 300s: {app.store.job_stats()}")
            time.sleep(0.05)
        took = time.monotonic() - start
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
        app.close()
    return took, outs


def grant_times(store_url: str, provider_url: str, rate: float) -> list[float]:
    app = build_app(store_url, provider_url, rate=rate)
    times = []
    for j in app.jobs_list(job="call", limit=1_000_000):
        for a in app.get(j.key).trace:
            if a.outcome == "succeeded":
                times.append(a.detail["admitted"]["at"])
    app.close()
    return sorted(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", help="store URL (default: SQLite in a temporary folder)")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--burst", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    o = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="firesafe-bench-limits-")
    store_url = o.store or f"sqlite:///{folder}/bench.db"
    print(f"firesafe limiter benchmark: {o.jobs} jobs, limit {o.rate:g}/s (burst {o.burst:g}), "
          f"{o.workers} worker processes; {platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}, store {store_url.split('://')[0]}")

    with Provider() as provider:
        base_took, _ = run(store_url, provider, o.jobs, o.workers, None, None, "quick")
        base_rate = o.jobs / base_took
        print(f"  baseline (no limiter, no HTTP call): {o.jobs} jobs in {base_took:.2f}s = {base_rate:,.0f} jobs/s")

        took, outs = run(store_url, provider, o.jobs, o.workers, o.rate, o.burst, "call")
        arrivals = provider.times()
        span = arrivals[-1] - arrivals[0]
        achieved = (len(arrivals) - o.burst) / span
        bound = o.rate + o.burst
        provider_over, provider_most = windows_over(arrivals, bound)
        short = {w: windows_over(arrivals, o.burst + o.rate * w + 1, w) for w in (0.1, 0.25, 1.0)}
        granted = grant_times(store_url, provider.url, o.rate)
        grant_over, grant_most = windows_over(granted, bound)
        waits = sum(json.loads(out.strip().splitlines()[-1])["deferred"] for out in outs if out.strip())

    fraction = achieved / o.rate
    print(f"  limited: {len(arrivals)} requests in {span:.2f}s (first to last; {took:.2f}s from enqueue to done)")
    print(f"  achieved rate: {achieved:.1f}/s = {fraction:.3f} of the limit (target >= {RATE_TARGET}) "
          f"[{'ok' if fraction >= RATE_TARGET else 'BELOW TARGET'}]; {base_rate / o.rate:.1f}x headroom in the workers")
    print(f"  limit violations (1-s windows over {bound:g}): {grant_over} at grant (busiest {grant_most}), "
          f"{provider_over} at the provider (busiest {provider_most}) (target 0) "
          f"[{'ok' if grant_over == 0 and provider_over == 0 else 'VIOLATED'}]")
    print("  at the provider, windows over burst + rate * w + 1 (target 0): " + ", ".join(
        f"{w:g}s: {over} (busiest {most})" for w, (over, most) in short.items()))
    print(f"  waits (jobs given back to wait for a token, no attempt used): {waits}")
    if o.json:
        print(json.dumps({"jobs": o.jobs, "rate": o.rate, "burst": o.burst, "workers": o.workers,
                          "baseline_jobs_per_s": round(base_rate, 1), "achieved_per_s": round(achieved, 2),
                          "fraction_of_limit": round(fraction, 4), "violations_grant": grant_over,
                          "violations_provider": provider_over, "busiest_grant": grant_most,
                          "busiest_provider": provider_most, "waits": waits,
                          "provider_windows_over": {str(w): over for w, (over, _) in short.items()}}))
    return 0 if fraction >= RATE_TARGET and grant_over == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
