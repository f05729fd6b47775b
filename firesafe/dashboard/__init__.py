"""The dashboard: the review path in a browser, and the numbers for Prometheus.

``create_app(app)`` returns a Starlette (ASGI) application; ``firesafe dashboard myapp:app`` serves
it with uvicorn. This module stays light: the web stack is imported only when a dashboard is made,
since the stores import this package's query mixins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from starlette.applications import Starlette

    from firesafe.app import App
    from firesafe.dashboard.security import Token


def create_app(app: App, token: str | Token | Sequence[Token] | None = None, **options: Any) -> Starlette:
    """The dashboard of ``app`` as an ASGI application (add routes to it, or mount it elsewhere).

    With ``token`` (``SECRET`` or ``NAME:SECRET``) every request must carry it, as a bearer token or
    as the password of HTTP basic auth; without one only loopback ``Host`` names are served.
    See :func:`firesafe.dashboard.web.create_app` for the options.
    """
    from firesafe.dashboard.web import create_app as make

    return make(app, token, **options)


__all__ = ["create_app"]
