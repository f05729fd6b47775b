"""A FastAPI service with firesafe inside it: a handler that enqueues a refund, the event inbox for a
shop's webhooks, and the dashboard under ``/ops`` behind the service's own login. One ASGI app, one
process; the jobs run in firesafe workers (``firesafe worker examples.fastapi_service.service:jobs``).

Settings come from the environment: ``FIRESAFE_STORE`` (the store URL), ``OPS_USERS``
(``name:password,...``, who may open the dashboard) and ``SHOP_WEBHOOK_TOKEN`` (the bearer token the
shop signs its webhooks with). Unset, nobody gets into ``/ops`` and no webhook is accepted.

    uvicorn examples.fastapi_service.service:api
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from firesafe import App, Context, IdempotencyConflict, InvalidInput, JobNotFound
from firesafe.dashboard import create_app as create_dashboard
from firesafe.dashboard.security import Token
from firesafe.inbox import Bearer, InboxEvent
from firesafe.inbox.http import create_app as create_inbox

jobs = App(os.environ.get("FIRESAFE_STORE", "sqlite:///fastapi_service.db"))


@jobs.job(queue="refunds", max_attempts=8)
def refund(ctx: Context, refund_id: str, amount_cents: int) -> None:
    """Pay the refund back; the provider call would carry ``Idempotency-Key: ctx.key``."""


jobs.event_source("shop", id_field="id", type_field="type",
                  verify=Bearer(os.environ.get("SHOP_WEBHOOK_TOKEN") or secrets.token_urlsafe(32)))


@jobs.on_event("shop", "order.cancelled")
def order_cancelled(ctx: Context, event: InboxEvent) -> None:
    """Runs once per event id, however often the shop delivers it."""


class RefundIn(BaseModel):
    refund_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    amount_cents: int = Field(gt=0)


def basic_auth(users: Mapping[str, str]) -> Callable[[Headers], str | None]:
    """The user that a request's HTTP basic credentials name, if the password is theirs."""

    def authenticate(headers: Headers) -> str | None:
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            name, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        known = users.get(name)
        return name if known is not None and hmac.compare_digest(known.encode(), password.encode()) else None

    return authenticate


class OpsAuth:
    """The service's login in front of the mounted dashboard: the place to plug your real auth
    (swap ``authenticate`` for your session, SSO or OAuth2 check; it returns the user or None).

    A user it lets in reaches the dashboard with that user's dashboard token, made here and known to
    no one else, so the dashboard's own check passes and records the user as the actor of replays.
    """

    def __init__(self, dashboard: Callable[[str | list[Token]], ASGIApp], users: Mapping[str, str],
                 authenticate: Callable[[Headers], str | None] | None = None) -> None:
        self.tokens = {name: secrets.token_urlsafe(32) for name in users}
        self.inner = dashboard([Token(secret, name) for name, secret in self.tokens.items()] or secrets.token_urlsafe())
        self.authenticate = authenticate or basic_auth(users)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        user = self.authenticate(Headers(scope=scope))
        if user is None or user not in self.tokens:
            refused = PlainTextResponse("login required", status_code=401,
                                        headers={"WWW-Authenticate": 'Basic realm="ops"'})
            await refused(scope, receive, send)
            return
        headers = [(k, v) for k, v in scope["headers"] if k != b"authorization"]
        headers.append((b"authorization", f"Bearer {self.tokens[user]}".encode()))
        await self.inner({**scope, "headers": headers}, receive, send)


def users_from(spec: str) -> dict[str, str]:
    """``alice:pw1,bob:pw2`` as a mapping of name to password."""
    pairs = (item.strip().partition(":") for item in spec.split(",") if item.strip())
    return {name: password for name, _, password in pairs if name and password}


api = FastAPI(title="refunds")


@api.post("/refunds", status_code=202)
async def create_refund(body: RefundIn) -> dict[str, Any]:
    """Accept a refund once per refund id: a retried request gets the same job back."""
    try:
        job = await refund.options(key=f"refund:{body.refund_id}").enqueue_async(body.refund_id, body.amount_cents)
    except IdempotencyConflict:
        raise HTTPException(409, f"refund {body.refund_id} was requested with another amount") from None
    return {"job": job.key, "created": job.created, "state": job.state.value}


@api.get("/refunds/{refund_id}")
async def refund_status(refund_id: str) -> dict[str, Any]:
    try:
        job = await jobs.get_async(f"refund:{refund_id}")
    except (JobNotFound, InvalidInput):
        raise HTTPException(404, f"no refund {refund_id}") from None
    return {"job": job.key, "state": job.state.value, "attempts": job.attempt}


# POST /inbox/events/shop: the inbox's endpoint, in this app. Each source verifies its own requests.
api.mount("/inbox", create_inbox(jobs))
# The dashboard under /ops, behind this service's login (OpsAuth).
api.mount("/ops", OpsAuth(lambda token: create_dashboard(jobs, token), users_from(os.environ.get("OPS_USERS", ""))))
