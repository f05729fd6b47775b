"""examples/fastapi_service, the FastAPI guide's app, on both stores: a refund enqueued from a handler
is one job per refund id; the inbox's endpoint takes a shop's webhook inside the FastAPI app; the
dashboard under ``/ops`` answers only past the service's own login; and a handler awaiting
``enqueue_async`` does not stop the app from serving another request meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():  # this starlette asks for httpx2 (not installed here) when its TestClient is imported
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

NAME = "examples.fastapi_service.service"
TOKEN = "whsec-test"


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def service(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The example's module, imported afresh on this test's store with its settings."""
    monkeypatch.setenv("FIRESAFE_STORE", store_url)
    monkeypatch.setenv("OPS_USERS", "alice:s3cret")
    monkeypatch.setenv("SHOP_WEBHOOK_TOKEN", TOKEN)
    sys.modules.pop(NAME, None)
    module = importlib.import_module(NAME)
    yield module
    module.jobs.close()
    sys.modules.pop(NAME, None)


def test_a_refund_requested_twice_is_one_job(service: ModuleType) -> None:
    with TestClient(service.api) as client:
        first = client.post("/refunds", json={"refund_id": "r-1", "amount_cents": 500})
        again = client.post("/refunds", json={"refund_id": "r-1", "amount_cents": 500})
        other = client.post("/refunds", json={"refund_id": "r-1", "amount_cents": 900})
        status = client.get("/refunds/r-1")
        missing = client.get("/refunds/r-404")
    assert (first.status_code, again.status_code) == (202, 202)
    assert first.json() == {"job": "refund:r-1", "created": True, "state": "queued"}
    assert again.json() == {"job": "refund:r-1", "created": False, "state": "queued"}
    assert other.status_code == 409
    assert status.json() == {"job": "refund:r-1", "state": "queued", "attempts": 0}
    assert missing.status_code == 404
    stored = service.jobs.jobs_list(job="refund")
    assert [(j.key, j.args) for j in stored] == [("refund:r-1", ["r-1", 500])]


def test_the_inbox_takes_a_webhook_through_the_fastapi_app(service: ModuleType) -> None:
    event = {"id": "evt-1", "type": "order.cancelled", "order": "o-9"}
    with TestClient(service.api) as client:
        unsigned = client.post("/inbox/events/shop", json=event)
        first = client.post("/inbox/events/shop", json=event, headers={"Authorization": f"Bearer {TOKEN}"})
        again = client.post("/inbox/events/shop", json=event, headers={"Authorization": f"Bearer {TOKEN}"})
    assert unsigned.status_code == 401
    assert first.status_code == 200 and first.json()["created"] is True
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert [j.name for j in service.jobs.jobs_list()] == ["order_cancelled"]


def test_the_dashboard_under_ops_needs_the_service_login(service: ModuleType) -> None:
    with TestClient(service.api) as client:
        anonymous = client.get("/ops/")
        wrong = client.get("/ops/", headers=basic("alice", "guess"))
        stranger = client.get("/ops/", headers=basic("mallory", "s3cret"))
        # The dashboard's own token scheme does not open it: only the service's login does.
        bearer = client.get("/ops/", headers={"Authorization": "Bearer s3cret"})
        page = client.get("/ops/", headers=basic("alice", "s3cret"))
        css = client.get("/ops/static/dashboard.css", headers=basic("alice", "s3cret"))
    assert [r.status_code for r in (anonymous, wrong, stranger, bearer)] == [401, 401, 401, 401]
    assert anonymous.headers["www-authenticate"].startswith("Basic")
    assert page.status_code == 200 and "/ops/static/dashboard.css" in page.text
    assert css.status_code == 200


def test_a_handler_awaiting_enqueue_async_lets_another_request_be_served(service: ModuleType,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The refund's insert is held until the app has answered another request: were the handler to block
    the event loop, that request could not be answered and the insert would give up waiting."""
    started, served = threading.Event(), threading.Event()
    waited: list[bool] = []
    store = service.jobs.store
    insert = store.job_insert_many

    def gated(*args: Any, **kwargs: Any) -> Any:
        started.set()
        waited.append(served.wait(10))
        return insert(*args, **kwargs)

    monkeypatch.setattr(store, "job_insert_many", gated)

    @service.api.get("/ping")
    async def ping() -> dict[str, bool]:
        served.set()
        return {"ok": True}

    async def scenario() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=service.api)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            post = asyncio.create_task(client.post("/refunds", json={"refund_id": "r-2", "amount_cents": 100}))
            while not started.is_set():  # the refund's insert is under way in its thread
                await asyncio.sleep(0.001)
            pong = await client.get("/ping")
            return await post, pong

    refund, pong = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert pong.json() == {"ok": True}
    assert waited == [True]
    assert refund.status_code == 202 and refund.json()["created"] is True


def test_the_guide_shows_the_example_as_it_is() -> None:
    """docs/guides/fastapi.md quotes the example's code (its blocks that do not run); each quote must be
    in the example word for word, so the guide cannot drift from what is tested here."""
    from tests.docs.blocks import blocks

    root = Path(__file__).resolve().parents[2]
    source = (root / "examples" / "fastapi_service" / "service.py").read_text()
    quoted = [b for b in blocks((root / "docs" / "guides" / "fastapi.md").read_text())
              if b.lang == "python" and not b.run and "# error:" not in b.code]
    assert len(quoted) >= 4
    for block in quoted:
        assert block.code.strip() in source, f"docs/guides/fastapi.md:{block.line} is not in the example"
