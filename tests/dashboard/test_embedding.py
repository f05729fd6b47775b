"""The dashboard inside another ASGI app: mounted under a prefix, and sharing its server with
endpoints that bring their own authentication (the event inbox's webhooks)."""

from __future__ import annotations

import re
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Mount, Route

from firesafe import App, Permanent
from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer
from firesafe.states import State
from tests.dashboard.conftest import TOKEN, form_of


def dead_app(url: str) -> App:
    app = App(url)

    @app.job()
    def fails(ctx: Any) -> None:
        raise Permanent("no")

    fails.enqueue(key="k1")
    app.work(burst=True)
    return app


def test_mounted_under_a_prefix(sqlite_url: str) -> None:
    app = dead_app(sqlite_url)
    outer = Starlette(routes=[Route("/", lambda r: PlainTextResponse("the host app")),
                              Mount("/ops/firesafe", create_app(app))])
    with BackgroundServer(outer) as server, httpx.Client(base_url=server.url, timeout=10) as c:
        page = c.get("/ops/firesafe/dead")
        assert page.status_code == 200
        links = re.findall(r'(?:href|action|src|hx-post)="(/[^"]*)"', page.text)
        assert links and all(link.startswith("/ops/firesafe/") for link in links), links
        assert "Path=/ops/firesafe" in page.headers["set-cookie"]
        token = re.search(r'name="csrf" value="(\w+)"', page.text).group(1)  # type: ignore[union-attr]
        preview = c.post("/ops/firesafe/dead/preview", data={"csrf": token, "action": "replay", "scope": "keys",
                                                              "key": "k1"})
        done = c.post("/ops/firesafe/dead/apply", data=form_of(preview.text))
        assert done.status_code == 200 and "Replayed 1 job" in done.text
        assert c.get("/").text == "the host app"  # the host's own routes are not guarded
    assert app.get("k1").state == State.QUEUED
    app.close()


def test_public_prefixes_skip_the_dashboards_guard_and_nothing_else(sqlite_url: str) -> None:
    app = dead_app(sqlite_url)
    web = create_app(app, token=TOKEN, public_prefixes=["/events/"])
    seen: list[bytes] = []

    async def webhook(request: Request) -> JSONResponse:  # verifies its own signature in real life
        seen.append(await request.body())
        return JSONResponse({"stored": True})

    web.router.routes.append(Route("/events/{source}", webhook, methods=["POST"]))
    web.state.public_prefixes.append("/hooks/")  # added after creation: honoured too
    web.router.routes.append(Route("/hooks/ping", lambda r: PlainTextResponse("pong")))
    with BackgroundServer(web) as server, httpx.Client(base_url=server.url, timeout=10) as c:
        r = c.post("/events/stripe", content=b'{"id": "evt_1"}', headers={"content-type": "application/json"})
        assert r.status_code == 200 and r.json() == {"stored": True} and seen == [b'{"id": "evt_1"}']
        assert "content-security-policy" in r.headers  # still gets the security headers
        assert c.get("/hooks/ping").text == "pong"
        assert c.get("/dead").status_code == 401
        assert c.post("/dead/apply", data={"action": "replay", "scope": "keys", "key": "k1"}).status_code == 401
        assert c.get("/eventsX").status_code == 401
    assert app.get("k1").state == State.DEAD
    app.close()
