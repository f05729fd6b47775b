"""The pages of the optional parts: limiters on the overview, schedules (grid and backfill) and
alerts (history and delivery), with each part configured for real, on SQLite and PostgreSQL; and
"not configured" when an app has none of them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from firesafe import App, FakeClock, Permanent
from firesafe.alerts import Log
from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer

NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp()


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert m
    return m.group(1)


@pytest.fixture
def ops(store_url: str) -> Iterator[tuple[App, FakeClock]]:
    clock = FakeClock(NOON)
    app = App(store_url, clock=clock, alerts=[Log()])
    app.limiter("stripe", rate=100, per=1.0, burst=20, concurrency=10)

    @app.job(limiter="stripe")
    def refund(ctx: Any, order_id: str) -> str:
        return order_id

    @app.schedule("*/5 * * * *", catchup="skip", max_attempts=1, queue="sync")
    def sync(ctx: Any, window: Any) -> None:
        if window.start.minute == 0:
            raise Permanent(f"the export for {window.start:%H:%M} is missing")

    for i in range(3):
        refund.enqueue(f"o-{i}")
    app.work(burst=True)
    yield app, clock
    app.close()


def test_parts_not_configured(served: tuple[Any, Any, str]) -> None:
    _, _, url = served
    with httpx.Client(base_url=url, timeout=10) as c:
        for path in ("/schedules", "/alerts"):
            page = c.get(path)
            assert page.status_code == 200 and "Not configured." in page.text, path
        assert re.search(r"<h2>Limiters</h2>\s*<p class=\"muted\">Not configured.</p>", c.get("/").text)
        assert "firesafe_limiter" not in c.get("/metrics").text


def test_schedules_backfill_limiters_and_alerts(ops: tuple[App, FakeClock]) -> None:
    app, _ = ops
    with BackgroundServer(create_app(app)) as server, httpx.Client(base_url=server.url, timeout=30) as c:
        page = c.get("/schedules").text
        token = csrf_of(page)
        assert "sync" in page and "*/5 * * * *" in page and "queue <bdi>sync</bdi>" in page
        assert page.count('listitem" class="cell c-none"') == 48  # nothing has run yet: 48 windows, none run

        form = {"csrf": token, "schedule": "sync", "from": "2026-11-30", "to": "2026-11-30", "rerun": "none"}
        preview = c.post("/schedules/backfill", data={**form, "mode": "preview"})
        assert preview.status_code == 200 and "Dry run: nothing has changed yet" in preview.text
        assert "144 windows to run?" in preview.text  # 00:00 to 12:00, every 5 minutes
        assert app.store.job_count(_by_name("sync")) == 0
        done = c.post("/schedules/backfill", data={**form, "mode": "run"})
        assert "144 enqueued" in done.text
        bad = c.post("/schedules/backfill", data={**form, "from": "2026-12-01", "mode": "preview"})
        assert bad.status_code == 400
        assert c.post("/schedules/backfill", data={**form, "schedule": "nope"}).status_code == 400
        app.work(burst=True)
        app.alerts.flush()

        grid = c.get("/schedules").text
        assert grid.count('listitem" class="cell c-succeeded"') == 44
        assert grid.count('listitem" class="cell c-failed"') == 4  # 08:00, 09:00, 10:00 and 11:00
        events = app.store.schedule_event_list(name="sync")
        assert any(e.kind == "backfill_started" and e.detail.get("actor") == "dashboard@127.0.0.1" for e in events)

        overview = c.get("/").text
        assert re.search(r'<td>(<bdi>)?stripe(</bdi>)?</td>\s*<td class="num">100 <span class="muted">burst 20</span>',
                         overview)
        assert '<span class="breaker b-closed">closed</span>' in overview

        alerts = c.get("/alerts").text
        assert "Not configured" not in alerts and re.search(r"<td>(<bdi>)?[a-z_]*dead[a-z_]*(</bdi>)?</td>", alerts)
        assert re.search(r'<div class="delivery d-delivered"><b>(<bdi>)?log(</bdi>)?</b>: delivered', alerts)

        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(c.get("/metrics").text) for s in f.samples}
    assert samples[("firesafe_limiter_in_flight", (("limiter", "stripe"),))] == 0
    assert samples[("firesafe_limiter_breaker_open", (("limiter", "stripe"),))] == 0
    assert samples[("firesafe_limiter_waiting", (("limiter", "stripe"),))] == 0
    assert ("firesafe_limiter_tokens", (("limiter", "stripe"),)) in samples
    delivered = [v for (name, labels), v in samples.items()
                 if name == "firesafe_alert_deliveries" and dict(labels) == {"sink": "log", "state": "delivered"}]
    assert delivered and delivered[0] >= 1


def _by_name(name: str) -> Any:
    from firesafe.store.base import JobFilter

    return JobFilter(name=name)
