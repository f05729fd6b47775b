"""The story: a nightly sync whose workers were down all weekend.

    python -m examples.nightly_sync [--dir DIR]

Time is a fake clock (``App(clock=...)``) moved across a weekend; everything else is real: a
worker (with its scheduler) running in a thread, the store, the warehouse. Every claim printed is
checked; the run exits 1 if one does not hold.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path

from examples.nightly_sync.sync import BERLIN, CRM, Warehouse, build
from firesafe import App, FakeClock

BROKEN_DAY = "2026-11-28"


class StoryFailed(Exception):
    pass


def check(condition: bool, claim: str) -> None:
    if not condition:
        raise StoryFailed(claim)
    print(f"  ok: {claim}")


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=BERLIN).timestamp()


def key(day: str) -> str:
    return f"nightly_sync@{day}T02:00:00+01:00"


class Workers:
    """A worker (and so a scheduler) running in a thread, as ``firesafe worker`` would in a process."""

    def __init__(self, app: App) -> None:
        self.worker = app.worker(concurrency=2, poll_interval=0.05)
        self.thread = threading.Thread(target=self.worker.run, name="worker", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(30)


def wait_for(what: str, done: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise StoryFailed(f"timed out waiting for {what}")
        time.sleep(0.05)


def finished(app: App, *days: str) -> Callable[[], bool]:
    def check_days() -> bool:
        for day in days:
            try:
                if app.get(key(day)).state not in ("succeeded", "dead"):
                    return False
            except KeyError:
                return False
        return True

    return check_days


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.nightly_sync", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="nightly-sync-data", help="where the stores go (made afresh)")
    data = Path(parser.parse_args(argv).dir).resolve()
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    clock = FakeClock(at("2026-11-26T23:00:00"))
    crm = CRM(BROKEN_DAY)
    warehouse = Warehouse(str(data / "warehouse.db"))
    app = build(f"sqlite:///{data}/firesafe.db", clock, crm, warehouse)
    try:
        return story(app, clock, crm, warehouse)
    except StoryFailed as exc:
        print(f"\nthe story did not hold: {exc}", file=sys.stderr)
        return 1
    finally:
        app.close()


def now(clock: FakeClock) -> str:
    return datetime.fromtimestamp(clock.now(), BERLIN).strftime("%a %Y-%m-%d %H:%M")


def story(app: App, clock: FakeClock, crm: CRM, warehouse: Warehouse) -> int:
    print(f"1. {now(clock)}: the sync is deployed (0 2 * * *, Europe/Berlin, catch-up: all within 3 days)")
    workers = Workers(app)
    wait_for("the scheduler to see the schedule", lambda: bool(app.store.schedule_state_list()))
    clock.set(at("2026-11-27T02:00:05"))
    print(f"   {now(clock)}: the first window ends and runs")
    wait_for("Thursday's window", finished(app, "2026-11-26"))
    print(f"   {key('2026-11-26')}: {app.get(key('2026-11-26')).state}")

    clock.set(at("2026-11-27T18:00:00"))
    print(f"\n2. {now(clock)}: the workers go down for the weekend")
    workers.stop()
    clock.set(at("2026-11-30T08:00:00"))

    print(f"\n3. {now(clock)}: the workers come back; the scheduler catches up the windows it missed")
    workers = Workers(app)
    try:
        weekend = ("2026-11-27", "2026-11-28", "2026-11-29")
        wait_for("the weekend's windows", finished(app, *weekend))
        for day in weekend:
            job = app.get(key(day))
            print(f"   {job.key}: {job.state}" + (f"  {job.last_error}" if job.state == "dead" else ""))
        check([app.get(key(d)).state for d in weekend] == ["succeeded", "dead", "succeeded"],
              "the three weekend windows ran once each; Saturday's failed on a broken export and is dead")
        status = app.schedules_status()[0]
        print(f"   firesafe schedules: {status.counts}")
        dead = app.get(key(BROKEN_DAY))
        check(dead.reason == "permanent" and [a.outcome for a in dead.trace] == ["failed"],
              "a broken export is not retried (give_up_on=BadExport): one attempt, then the dead letters")

        print("\n4. The CRM fixes its export. Backfill the week, re-running the failed window "
              "(firesafe backfill ... --from 2026-11-23 --to 2026-11-29 --rerun failed)")
        crm.fixed = True
        plan = app.backfill("nightly_sync", date(2026, 11, 23), date(2026, 11, 29), rerun="failed", dry_run=True)
        print(f"   dry run: {plan.enqueued} to enqueue, {plan.rerun_count} to re-run, "
              f"{plan.succeeded} succeeded already: {', '.join(k.split('@')[1][:10] for k in plan.keys)}")
        check(sorted(plan.keys) == sorted([key(d) for d in ("2026-11-23", "2026-11-24", "2026-11-25", BROKEN_DAY)]),
              "the dry run lists the three days before the deploy and the failed day, nothing else")
        result = app.backfill("nightly_sync", date(2026, 11, 23), date(2026, 11, 29), rerun="failed")
        print(f"   backfill: enqueued {result.enqueued}, re-ran {result.rerun_count}, "
              f"skipped {result.succeeded} that had succeeded")
        week = [f"2026-11-{d}" for d in range(23, 30)]
        wait_for("the backfill", finished(app, *week))
        again = app.backfill("nightly_sync", date(2026, 11, 23), date(2026, 11, 29), rerun="failed")
        check(again.enqueued == 0 and again.rerun_count == 0, "running the same backfill again changes nothing")
        fixed = app.get(key(BROKEN_DAY))
        check(fixed.state == "succeeded" and [a.outcome for a in fixed.trace] == ["failed", "succeeded"]
              and [e.kind for e in fixed.events] == ["rerun"],
              "the failed window re-ran under its own key, its first attempt kept in the trace")
    finally:
        workers.stop()

    print("\n5. The warehouse")
    days, loads = warehouse.days(), warehouse.loads()
    for day in sorted(days):
        print(f"   {day}: {days[day]} deals, loaded {loads.count(day)}x")
    check(days == {f"2026-11-{d}": 3 for d in range(23, 30)}, "every day of the week is in the warehouse")
    check(sorted(loads) == sorted(days), "each day was loaded exactly once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
