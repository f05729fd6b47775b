"""``firesafe limiters``: list, pause, resume and events, from the store alone (no user code)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from firesafe import App
from firesafe.cli.main import cli


def make_store(url: str) -> App:
    app = App(url)
    app.limiter("stripe", rate=100, burst=20, concurrency=10)

    @app.job(limiter="stripe")
    def refund(ctx) -> None:
        pass

    app.worker()  # a worker records its app's limiters when it starts
    return app


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_list_pause_resume_and_events(store_url: str) -> None:
    app = make_store(store_url)
    try:
        code, out = invoke("limiters", "--store", store_url)
        assert code == 0, out
        assert "stripe" in out and "100/s, burst 20" in out and "0/10" in out and "closed" in out

        code, out = invoke("limiters", "pause", "stripe", "--for", "10m", "--reason", "incident 42", "--store",
                           store_url)
        assert code == 0 and "paused until" in out and "10m from now" in out, out
        code, out = invoke("limiters", "--json", "--store", store_url)
        [row] = json.loads(out)
        assert row["name"] == "stripe" and row["paused_until"] and row["pause_reason"] == "incident 42"
        assert row["rate"] == 100 and row["in_flight"] == 0 and row["breaker"] == "closed"
        assert row["tokens"] == 0  # a pause empties the bucket: afterwards the rate, not a burst

        app.jobs["refund"].enqueue(key="r1")
        app.work(burst=True)
        assert app.get("r1").reason == "limiter:stripe"  # paused: it waits

        code, out = invoke("limiters", "resume", "stripe", "--store", store_url)
        assert code == 0 and "1 waiting job(s) released" in out, out
        code, out = invoke("limiters", "events", "--json", "--store", store_url)
        kinds = [(e["kind"], e["detail"].get("reason")) for e in json.loads(out)]
        assert kinds == [("paused", "incident 42"), ("resumed", None)]
        code, out = invoke("limiters", "events", "--store", store_url)
        assert code == 0 and "paused" in out and "resumed" in out
    finally:
        app.close()


def test_mistakes_are_one_line_errors(store_url: str) -> None:
    app = make_store(store_url)
    try:
        code, out = invoke("limiters", "pause", "strip", "--for", "1m", "--store", store_url)
        assert code == 1 and "no limiter named 'strip'" in out and "known: stripe" in out
        assert "Traceback" not in out
        code, out = invoke("limiters", "pause", "stripe", "--store", store_url)
        assert code == 1 and "--for DURATION or --until TIME" in out
        code, out = invoke("limiters", "pause", "stripe", "--for", "soon", "--store", store_url)
        assert code == 2 and "not a duration" in out
    finally:
        app.close()
