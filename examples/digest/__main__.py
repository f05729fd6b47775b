"""The story: the workers are down at 08:00, the digest's send fails once, and the team still
gets each day's digest exactly once.

    python -m examples.digest [--dir DIR]

Time is a fake clock (``App(clock=...)``); the workers (each with its scheduler) run in threads.
Every claim printed is checked; the run exits 1 if one does not hold.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from examples.digest.digest import PARIS, Relay, build
from firesafe import App, FakeClock
from firesafe.schedules.scheduler import Scheduler


class StoryFailed(Exception):
    pass


def check(condition: bool, claim: str) -> None:
    if not condition:
        raise StoryFailed(claim)
    print(f"  ok: {claim}")


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=PARIS).timestamp()


def key(day: str) -> str:
    return f"daily_digest@{day}T08:00:00+01:00"


def wait_for(what: str, done: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise StoryFailed(f"timed out waiting for {what}")
        time.sleep(0.05)


class Workers:
    """Worker processes stand-ins: each a worker (and its scheduler) in a thread."""

    def __init__(self, app: App, count: int) -> None:
        self.workers = [app.worker(concurrency=2, poll_interval=0.05) for _ in range(count)]
        self.threads = [threading.Thread(target=w.run, daemon=True) for w in self.workers]
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        for w in self.workers:
            w.stop()
        for t in self.threads:
            t.join(30)


def state_of(app: App, day: str) -> str | None:
    try:
        return str(app.get(key(day)).state)
    except KeyError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.digest", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="digest-data", help="where the store goes (made afresh)")
    data = Path(parser.parse_args(argv).dir).resolve()
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    clock = FakeClock(at("2026-12-01T07:00:00"))
    relay = Relay(drop_reply_once={"Shop digest for 2026-12-01"})
    app = build(f"sqlite:///{data}/firesafe.db", clock, relay)
    try:
        code = story(app, clock, relay)
    except StoryFailed as exc:
        print(f"\nthe story did not hold: {exc}", file=sys.stderr)
        code = 1
    finally:
        app.close()
    (data / "mailbox.txt").write_text("".join(f"{m['message_id']}\t{m['subject']}\n" for m in relay.mailbox))
    return code


def now(clock: FakeClock) -> str:
    return datetime.fromtimestamp(clock.now(), PARIS).strftime("%a %Y-%m-%d %H:%M")


def story(app: App, clock: FakeClock, relay: Relay) -> int:
    print(f"1. {now(clock)}: the digest is deployed (0 8 * * *, Europe/Paris); one worker runs")
    workers = Workers(app, 1)
    wait_for("the scheduler to see the schedule", lambda: bool(app.store.schedule_state_list()))
    clock.set(at("2026-12-01T08:00:01"))
    wait_for("Monday's digest", lambda: state_of(app, "2026-11-30") == "succeeded")
    print(f"   {now(clock)}: {relay.mailbox[-1]['subject']} sent")

    clock.set(at("2026-12-01T19:00:00"))
    print(f"\n2. {now(clock)}: the worker host goes down for the night and the morning")
    workers.stop()
    clock.set(at("2026-12-02T09:30:00"))

    print(f"\n3. {now(clock)}: three workers come back at once; their schedulers catch up the 08:00 digest")
    workers = Workers(app, 3)
    try:
        day = "2026-12-01"
        wait_for("the missed digest's first attempt to end", lambda: state_of(app, day) == "scheduled")
        job = app.get(key(day))
        first = job.trace[0]
        print(f"   {key(day)}: attempt 1 {first.outcome}: {first.error_type}: {first.message}")
        print("   (the relay had taken the mail before the connection dropped: the team has it already)")
        clock.advance(60)
        print(f"   {now(clock)}: the retry, after its 30 s backoff")
        wait_for("the retry", lambda: state_of(app, day) == "succeeded")
        job = app.get(key(day))
        steps = job.trace[-1].detail.get("steps", [])
        print(f"   attempt 2: {job.trace[-1].outcome}; steps {[(s['name'], s['status']) for s in steps]}; "
              f"relay said: {job.result['relay']!r}")
    finally:
        workers.stop()

    print("\n4. Another restart: the scheduler's tick (what each worker runs every second) finds nothing to do")
    tick = Scheduler(app, "after-restart").run()["daily_digest"]
    print(f"   enqueued {tick.enqueued}, missed {tick.missed}")
    check(tick.enqueued == 0 and tick.missed == 0, "a restart enqueues nothing that was already decided")

    print("\n5. The team's mailbox")
    for mail in relay.mailbox:
        print(f"   {mail['subject']}  {mail['message_id']}")
    subjects = [m["subject"] for m in relay.mailbox]
    check(subjects == ["Shop digest for 2026-11-30", "Shop digest for 2026-12-01"],
          "the team got Monday's digest and the missed Tuesday one, each exactly once")
    jobs = app.jobs_list(job="daily_digest")
    check(sorted(j.key for j in jobs) == [key("2026-11-30"), key(day)],
          "the catch-up enqueued the missed window once, though three schedulers came back together")
    job = app.get(key(day))
    check([a.outcome for a in job.trace] == ["failed", "succeeded"] and job.result["relay"].startswith("duplicate"),
          "the failed send was retried with the same Message-ID, and the relay dropped the copy")
    check([s["status"] for s in job.trace[-1].detail["steps"]] == ["restored", "ran"],
          "the retry restored the composed mail and only re-ran the send")
    check(relay.calls.count(job.result["message_id"]) == 2, "the relay was called twice for it, and delivered once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
