"""``firesafe serve``: the dashboard with the inbox's ``POST /events/{source}`` added
(:mod:`firesafe.inbox.http`), on the dashboard's uvicorn settings with the inbox's connection limits
(:mod:`firesafe.inbox.serving`). The inbox runs on the dashboard here, so the inbox never imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from firesafe.dashboard import create_app as dashboard
from firesafe.dashboard.server import uvicorn_config
from firesafe.inbox.http import event_routes
from firesafe.inbox.serving import Limits, guarded_protocol

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from firesafe.app import App
    from firesafe.dashboard.security import Token


def create_server_app(app: App, token: str | Token | Sequence[Token] | None = None, *,
                      public_url: str | None = None) -> Starlette:
    """The dashboard's ASGI app with ``POST /events/{source}`` added (what ``firesafe serve`` runs).

    The event paths skip the dashboard's token and CSRF checks: each source verifies its own
    requests (a signature or a bearer token). ``public_url`` is the dashboard's, as in
    :func:`firesafe.dashboard.create_app`.
    """
    web = dashboard(app, token, public_prefixes=["/events/"], public_url=public_url)
    web.router.routes[:0] = event_routes(app)
    return web


def server_config(asgi: Any, host: str, port: int, log_level: str = "info", access_log: bool = True,
                  forwarded_allow_ips: str | list[str] | None = None, limits: Limits | None = None) -> Any:
    """uvicorn's settings for ``firesafe serve``: the dashboard's (see
    :func:`~firesafe.dashboard.server.uvicorn_config`), on the protocol that keeps ``limits``."""
    config = uvicorn_config(asgi, host, port, log_level, access_log, forwarded_allow_ips)
    config.http = guarded_protocol(limits or Limits())
    return config
