"""Webhook redelivery over real HTTP (uvicorn on 127.0.0.1, port 0), on both stores: a provider that
delivers an event again with fields it updates between retries (Stripe's ``pending_webhooks`` and
``request``) gets 2xx and a duplicate, the change is recorded and shown by the CLI; a strict source
refuses it with 409."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from click.testing import CliRunner

from firesafe import App, State
from firesafe.cli.main import cli
from firesafe.inbox import StripeSignature
from firesafe.inbox.http import create_app
from firesafe.store.base import JobFilter

SECRET = "whsec_redelivery"


def stripe_event(pending: int, request_id: str | None) -> dict[str, Any]:
    """A Stripe event as Stripe sends it: the object under data.object, retry bookkeeping beside it."""
    return {"id": "evt_1", "object": "event", "type": "charge.succeeded", "api_version": "2024-06-20",
            "created": 1718000000, "livemode": False, "pending_webhooks": pending,
            "request": {"id": request_id, "idempotency_key": None},
            "data": {"object": {"id": "ch_1", "object": "charge", "amount": 2000, "currency": "eur"}}}


def stripe_post(base: str, source: str, event: dict[str, Any]) -> httpx.Response:
    body = json.dumps(event).encode()
    t = int(time.time())
    mac = hmac.new(SECRET.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return httpx.post(f"{base}/events/{source}", content=body, timeout=10,
                      headers={"Stripe-Signature": f"t={t},v1={mac}", "Content-Type": "application/json"})


@pytest.fixture
def served(store_url: str) -> Iterator[tuple[App, str, list[Any]]]:
    app = App(store_url)
    amounts: list[Any] = []
    app.event_source("stripe", verify=StripeSignature(SECRET))
    app.event_source("stripe_strict", verify=StripeSignature(SECRET), strict=True)

    @app.on_event("stripe", "charge.succeeded")
    def on_charge(ctx, event) -> None:
        amounts.append(event.data["data"]["object"]["amount"])

    @app.on_event("stripe_strict", "charge.succeeded")
    def on_strict_charge(ctx, event) -> None:
        amounts.append(event.data["data"]["object"]["amount"])

    server = uvicorn.Server(uvicorn.Config(create_app(app), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    port = server.servers[0].sockets[0].getsockname()[1]
    yield app, f"http://127.0.0.1:{port}", amounts
    server.should_exit = True
    thread.join(10)
    app.close()


def test_a_redelivery_with_updated_retry_fields_is_a_2xx_duplicate_recorded_and_shown(served, store_url: str) -> None:
    app, base, amounts = served
    first = stripe_post(base, "stripe", stripe_event(pending=2, request_id="req_1"))
    assert first.status_code == 200, first.text
    assert first.json()["created"] and not first.json()["duplicate"]
    assert "firesafe-duplicate" not in first.headers

    again = stripe_post(base, "stripe", stripe_event(pending=1, request_id=None))
    assert again.status_code == 200, again.text
    assert again.json() == {"stored": True, "event_id": "evt_1", "type": "charge.succeeded", "job": "stripe:evt_1",
                            "created": False, "duplicate": True, "changed": True}
    assert again.headers["firesafe-duplicate"] == "true"
    same = stripe_post(base, "stripe", stripe_event(pending=2, request_id="req_1"))  # the stored data again
    assert same.status_code == 200 and same.json()["duplicate"] and "changed" not in same.json()

    assert app.store.job_count(JobFilter(name="on_charge")) == 1
    app.work(burst=True)
    assert amounts == [2000] and app.get("stripe:evt_1").state == State.SUCCEEDED

    runner = CliRunner()
    listed = runner.invoke(cli, ["events", "ls", "--source", "stripe", "--json", "--store", store_url])
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.output)
    assert (row["redeliveries"], row["changed"]) == (2, 1)
    assert row["data"]["pending_webhooks"] == 2  # the first delivery's data stand
    assert row["changed_at"] and len(row["changed_fingerprint"]) == 64
    table = runner.invoke(cli, ["events", "ls", "--store", store_url])
    assert table.exit_code == 0 and "2 (1 changed)" in table.output, table.output

    shown = runner.invoke(cli, ["events", "show", "stripe", "evt_1", "--json", "--store", store_url])
    assert shown.exit_code == 0, shown.output
    detail = json.loads(shown.output)
    assert detail["changed_data"]["pending_webhooks"] == 1 and detail["changed_data"]["request"]["id"] is None
    text = runner.invoke(cli, ["events", "show", "stripe", "evt_1", "--store", store_url])
    assert text.exit_code == 0 and "2 redelivery(ies), 1 with other data" in text.output, text.output
    missing = runner.invoke(cli, ["events", "show", "stripe", "evt_404", "--store", store_url])
    assert missing.exit_code == 1 and "no event 'evt_404' of source 'stripe' is stored" in missing.output
    assert "Traceback" not in missing.output


def test_a_strict_source_refuses_a_changed_redelivery_with_409_and_counts_it(served) -> None:
    app, base, amounts = served
    assert stripe_post(base, "stripe_strict", stripe_event(pending=2, request_id="req_1")).status_code == 200
    same = stripe_post(base, "stripe_strict", stripe_event(pending=2, request_id="req_1"))
    assert same.status_code == 200 and same.json()["duplicate"]
    refused = stripe_post(base, "stripe_strict", stripe_event(pending=1, request_id=None))
    assert refused.status_code == 409, refused.text
    assert "strict" in refused.json()["error"]
    shown = app.inbox.show("stripe_strict", "evt_1")
    assert shown is not None and (shown["redeliveries"], shown["changed"]) == (2, 1)
    assert app.store.job_count(JobFilter(name="on_strict_charge")) == 1
    app.work(burst=True)
    assert amounts == [2000]


def test_a_redelivery_under_another_type_is_refused_with_409_even_when_not_strict(served) -> None:
    app, base, _ = served
    assert stripe_post(base, "stripe", stripe_event(pending=1, request_id="r")).status_code == 200
    retyped = {**stripe_event(pending=1, request_id="r"), "type": "charge.refunded"}
    r = stripe_post(base, "stripe", retyped)
    assert r.status_code == 409 and "type 'charge.succeeded', not 'charge.refunded'" in r.json()["error"]
    assert app.store.job_count(JobFilter()) == 1


def test_strict_must_be_a_bool(sqlite_url: str) -> None:
    from firesafe.errors import ConfigError

    with pytest.raises(ConfigError, match="strict must be True or False"):
        App(sqlite_url).event_source("s", strict="yes")
