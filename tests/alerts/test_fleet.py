"""A dead fleet is reported: with no worker running, `firesafe dashboard` and `firesafe serve` still
deliver alerts (the stuck-queue rule names the queue nobody serves), and `/healthz` tells a monitor
outside the fleet that no worker beats.

Real processes (`firesafe dashboard` / `firesafe serve` as users start them), a real HTTP receiver on
127.0.0.1, both stores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from firesafe import App
from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer
from tests.alerts.receiver import Receiver
from tests.dashboard.procs import dashboard

APP = '''
from firesafe import App
from firesafe.alerts import Webhook

app = App({url!r}, lease=5, alerts=[Webhook({hook!r}, secret="test-secret", allow_private=True)])
app.alert_rules(failure_rate=None, stuck_after=1, evaluate_every=0.2, group_wait=0, poll=0.05)
app.event_source("shop")


@app.job(queue="payments")
def settle(ctx, order: str) -> None:
    pass


@app.job(max_attempts=1)
def refund(ctx, order: str) -> None:
    raise ConnectionError(f"refund of {{order}} refused")
'''


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().up()
    yield r
    r.close()


def fleet_app(directory: Path, url: str, receiver: Receiver) -> str:
    (directory / "fleetapp.py").write_text(APP.format(url=url, hook=receiver.url))
    return "fleetapp:app"


@pytest.mark.parametrize("command", ["dashboard", "serve"])
def test_with_no_worker_running_the_dashboard_or_serve_delivers_the_alerts(
        store_url: str, tmp_path: Path, receiver: Receiver, command: str) -> None:
    target = fleet_app(tmp_path, store_url, receiver)
    # A worker ran once, killed a job (its dead-letter event waits in the outbox: that app has no
    # sinks, so it dispatched nothing), and is gone; a payment waits in a queue nobody serves.
    app = App(store_url)

    @app.job(max_attempts=1)
    def refund(ctx, order: str) -> None:
        raise ConnectionError(f"refund of {order} refused")

    @app.job(queue="payments")
    def settle(ctx, order: str) -> None:
        pass

    try:
        refund.enqueue("o-1", key="refund:o-1")
        app.work(["default"], burst=True)
        settle.enqueue("o-2", key="settle:o-2")
        assert app.store.alert_waiting() == 1  # type: ignore[attr-defined]
        with dashboard([target], tmp_path, command=command) as d:
            assert "alerts dispatched here too" in d.log.read_text()
            receiver.wait_for(lambda got: {g.json["kind"] for g in got} >= {"dead_letter", "queue_stuck"}, 30,
                              "the dead letter and the stuck queue")
        docs = {g.json["kind"]: g.json for g in receiver.got}
        assert all(g.valid for g in receiver.got)
        assert docs["dead_letter"]["keys"] == ["refund:o-1"]
        assert docs["queue_stuck"]["title"] == "queue payments stuck: no live worker"
        assert docs["queue_stuck"]["queues"] == ["payments"]
        assert sum(1 for g in receiver.got if g.json["kind"] == "dead_letter") == 1
    finally:
        app.close()


def test_no_alerts_leaves_dispatching_to_the_workers(sqlite_url: str, tmp_path: Path, receiver: Receiver) -> None:
    target = fleet_app(tmp_path, sqlite_url, receiver)
    App(sqlite_url).close()
    with dashboard([target, "--no-alerts"], tmp_path) as d:
        assert "alerts left to the workers (--no-alerts)" in d.log.read_text()


def test_healthz_says_when_no_worker_beats(store_url: str) -> None:
    app = App(store_url)

    @app.job
    def noop(ctx) -> None:
        pass

    try:
        app.store.migrate()
        with BackgroundServer(create_app(app)) as server, httpx.Client(base_url=server.url, timeout=10) as http:
            plain = http.get("/healthz")
            assert plain.status_code == 200, "without ?workers= the fleet is reported, not required"
            assert plain.json()["workers"]["alive"] == 0 and plain.json()["workers"]["last_beat_seconds_ago"] is None
            down = http.get("/healthz", params={"workers": 1})
            assert down.status_code == 503 and down.json()["status"] == "no_workers"
            assert "0 worker(s) heartbeated" in down.json()["error"]
            bad = http.get("/healthz", params={"workers": "many"})
            assert bad.status_code == 400 and "workers must be a whole number" in bad.json()["error"]
            worker = app.worker(poll_interval=0.05)
            thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
            thread.start()
            try:
                wait_for(lambda: http.get("/healthz", params={"workers": 1}).status_code == 200, 20,
                         "the worker's first heartbeat")
                up = http.get("/healthz", params={"workers": 1}).json()
                assert up["status"] == "ok" and up["workers"]["alive"] == 1
                assert up["workers"]["last_beat_seconds_ago"] < up["workers"]["within_seconds"]
                assert http.get("/healthz", params={"workers": 2}).status_code == 503
            finally:
                worker.stop()
                thread.join(20)
            # The worker left cleanly (it forgets its row): none beats again.
            assert http.get("/healthz", params={"workers": 1}).status_code == 503
    finally:
        app.close()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g}s waiting for {what}")
        time.sleep(0.05)
