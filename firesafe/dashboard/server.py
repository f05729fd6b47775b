"""Serving the dashboard with uvicorn: in the foreground (the CLI) or on a background thread.

The bind rule: a loopback address needs nothing; any other address needs a token, and the
dashboard refuses to start without one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from firesafe.dashboard.security import Token, UserHeader, is_loopback, parse_forwarded_allow_ips, parse_token
from firesafe.errors import ConfigError

log = logging.getLogger("firesafe.dashboard")

TOKEN_ENV = "FIRESAFE_DASHBOARD_TOKEN"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8642


def resolve_token(given: str | None) -> Token | None:
    """The token given, else ``$FIRESAFE_DASHBOARD_TOKEN``, else none."""
    return parse_token(given if given else os.environ.get(TOKEN_ENV))


def check_bind(host: str, token: Token | Sequence[Token] | None) -> None:
    """Refuse a non-loopback bind without a token.

    >>> check_bind("127.0.0.1", None)
    >>> check_bind("0.0.0.0", None)
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: refusing to serve the dashboard on 0.0.0.0 without a token, ...
    """
    if not is_loopback(host) and token is None:
        raise ConfigError(
            f"refusing to serve the dashboard on {host} without a token, since anyone who can reach it "
            f"could replay or discard jobs. Pass --token (or set ${TOKEN_ENV}), or bind 127.0.0.1")


def uvicorn_config(asgi: Any, host: str, port: int, log_level: str, access_log: bool,
                   forwarded_allow_ips: str | list[str] | None = None) -> Any:
    """uvicorn's settings. Proxy headers are believed only from ``forwarded_allow_ips`` (none by
    default): from them, ``X-Forwarded-Proto`` sets the scheme and ``X-Forwarded-For`` the client."""
    import uvicorn

    trusted = parse_forwarded_allow_ips(forwarded_allow_ips if isinstance(forwarded_allow_ips, str | None)
                                        else ",".join(forwarded_allow_ips))
    return uvicorn.Config(asgi, host=host, port=port, log_level=log_level, access_log=access_log, lifespan="off",
                          ws="none", server_header=False, proxy_headers=trusted is not None,
                          forwarded_allow_ips=",".join(trusted) if trusted else None)


def serve(app: Any, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          token: str | Token | list[Token] | None = None, log_level: str = "info", access_log: bool = True, *,
          public_url: str | None = None, forwarded_allow_ips: str | list[str] | None = None, alerts: bool = True,
          user_header: UserHeader | None = None) -> None:
    """Serve the dashboard of ``app`` until interrupted (SIGINT/SIGTERM).

    Behind a reverse proxy, give ``public_url`` (the address browsers use) and/or
    ``forwarded_allow_ips`` (the proxies whose ``X-Forwarded-Proto``/``-For`` are believed).
    With ``alerts`` (the default) it also dispatches the app's alerts, as workers do, so that they
    leave while no worker runs (see :func:`dispatching`).
    """
    import uvicorn

    from firesafe.dashboard import create_app

    tok = parse_token(token) if isinstance(token, str) else token
    check_bind(host, tok)
    asgi = create_app(app, tok, public_url=public_url, user_header=user_header)
    with dispatching(app, "dashboard", alerts):
        uvicorn.Server(uvicorn_config(asgi, host, port, log_level, access_log, forwarded_allow_ips)).run()


@contextlib.contextmanager
def dispatching(app: Any, role: str, enabled: bool = True) -> Iterator[bool]:
    """Dispatch ``app``'s alerts while the block runs (the dashboard and ``firesafe serve`` do):
    grouping, the rules (the stuck-queue rule reports a fleet with no live worker) and delivery, under
    the same leader lease and delivery leases as the workers', so each alert still leaves once.
    Yields whether it runs (not when ``enabled`` is false, nor when the app has no sinks or rules)."""
    holder = f"{role}:{socket.gethostname()}:{os.getpid()}"
    with app.alerts.dispatching(holder, enabled) as running:
        if running:
            log.info("%s: dispatching alerts to %s", role, ", ".join(s.name for s in app.alerts.sinks) or "no sink")
        yield running


class BackgroundServer:
    """Serve an ASGI app on a thread (tests, benchmarks, screenshots); ``url`` once started.

    >>> # with BackgroundServer(create_app(app)) as server: httpx.get(server.url + "/healthz")
    """

    def __init__(self, asgi: Any, host: str = DEFAULT_HOST, port: int = 0, log_level: str = "warning",
                 forwarded_allow_ips: str | list[str] | None = None) -> None:
        import uvicorn

        self.host = host
        self.server = uvicorn.Server(uvicorn_config(asgi, host, port, log_level, access_log=False,
                                                    forwarded_allow_ips=forwarded_allow_ips))
        self.thread = threading.Thread(target=self.server.run, name="firesafe-dashboard", daemon=True)
        self.url = ""

    def start(self, timeout: float = 10.0) -> BackgroundServer:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the dashboard server did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        self.url = f"http://{shown}:{port}"
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
