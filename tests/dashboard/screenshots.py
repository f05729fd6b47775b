"""Screenshots of the dashboard's main pages for the README (docs/img/), from a scripted story.

    .venv/bin/python -m tests.dashboard.screenshots [OUTPUT_DIR]      # default: docs/img

A test runs :func:`take` into a temporary folder so this script keeps working.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from firesafe import FakeClock
from firesafe.alerts import Log
from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer
from tests.dashboard.appdef import make_app, populate, worker_thread

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PAGES = {
    "dashboard-overview.png": "/",
    "dashboard-jobs.png": "/jobs?queue=payments&size=25",
    "dashboard-dead-letters.png": "/dead",
    "dashboard-job.png": "/job?key=sync%3A2026-11-30",
    "dashboard-schedules.png": "/schedules",
    "dashboard-alerts.png": "/alerts",
}


def add_parts(app: Any) -> None:
    """A limiter and a schedule, so their panels have something to show."""
    app.limiter("stripe", rate=100, per=1.0, burst=20, concurrency=10)
    app.limiter("openai", rate=5, per=1.0, concurrency=2)

    @app.schedule("*/15 * * * *", catchup="skip", max_attempts=1)
    def export_orders(ctx: Any, window: Any) -> None:
        if window.start.hour % 5 == 0 and window.start.minute == 0:
            raise RuntimeError(f"the warehouse export for {window.start:%H:%M} is missing")


def backfill_today(app: Any, clock: FakeClock) -> None:
    from firesafe.schedules.backfill import backfill

    now = datetime.fromtimestamp(clock.now(), UTC)
    backfill(app, "export_orders", now - timedelta(hours=12), now, actor="screenshots")
    for limiter in app.limiters.values():
        limiter.status()  # recorded in the store, as a worker would


def hour_of_traffic(app: Any, clock: FakeClock) -> None:
    """An hour of charges, a few failing, so the charts have a shape; ends at the real time."""
    rng = random.Random(7)
    n = 0
    while clock.now() < time.time() - 90:
        for _ in range(rng.randint(8, 40)):
            n += 1
            bad = rng.random() < (0.35 if 20 * 60 < time.time() - clock.now() < 30 * 60 else 0.06)
            app.jobs["charge"].enqueue(f"{'bad' if bad else 'o'}-h{n}", rng.randint(5, 500), "sk_live_secret",
                                       key=f"charge:h{n}")
        app.work(burst=True, wait_scheduled=True, concurrency=4)
        clock.advance(rng.uniform(60, 150))
    clock.set(time.time())


def take(out: Path, browser: Any = None, minutes: int = 58) -> list[Path]:
    """Populate a scratch store, serve its dashboard, and save one PNG per main page (and the
    replay confirmation) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        clock = FakeClock(time.time() - minutes * 60)
        app, fix = make_app(f"sqlite:///{tmp}/story.db", clock=clock, alerts=[Log()])
        add_parts(app)
        hour_of_traffic(app, clock)
        populate(app, ok=40, bad=6, refunds=3, xss=False)
        backfill_today(app, clock)
        app.work(burst=True, concurrency=4)
        app.alerts.flush()
        fix["refunds"] = True
        for i in range(12):  # a live backlog for the queues table and a running worker to show
            app.jobs["charge"].enqueue(f"late-{i}", 10, "sk_live_secret", key=f"charge:late-{i}", delay=3600)
        saved = []
        with BackgroundServer(create_app(app)) as server, worker_thread(app):
            own = None
            if browser is None:
                from playwright.sync_api import sync_playwright

                own = sync_playwright().start()
                browser = own.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                context = browser.new_context(viewport={"width": 1360, "height": 860}, device_scale_factor=1)
                page = context.new_page()
                for name, path in PAGES.items():
                    page.goto(server.url + path)
                    page.wait_for_load_state("networkidle")
                    page.screenshot(path=str(out / name), full_page=name == "dashboard-job.png")
                    saved.append(out / name)
                page.goto(server.url + "/dead")
                page.click("text=Replay group…")
                page.wait_for_selector("#confirm-panel")
                page.evaluate("window.scrollTo(0, 0)")
                page.screenshot(path=str(out / "dashboard-replay-confirm.png"), full_page=False)
                saved.append(out / "dashboard-replay-confirm.png")
                context.close()
            finally:
                if own is not None:
                    browser.close()
                    own.stop()
        app.close()
    return saved


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/img")
    for p in take(target):
        print(p)
