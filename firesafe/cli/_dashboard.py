"""``firesafe dashboard``: serve the web dashboard and ``/metrics`` for an app."""

from __future__ import annotations

import click

from firesafe.cli._common import check_port, fail, safe_url
from firesafe.cli._loader import load_app

#: ``--public-url`` and ``--forwarded-allow-ips``: for the dashboard, and for ``firesafe serve`` beside it.
public_url_option = click.option(
    "--public-url", metavar="URL", default=None,
    help="The address browsers use when a reverse proxy publishes the dashboard "
         "(https://ops.example.com): replays, discards and backfills must come from that origin, "
         "and the CSRF cookie is Secure when it is https. Anything but a loopback host needs a token.")
forwarded_allow_ips_option = click.option(
    "--forwarded-allow-ips", metavar="IPS", default=None,
    help="Comma-separated addresses or networks of the reverse proxies whose X-Forwarded-Proto "
         "(the scheme) and X-Forwarded-For (the client, recorded as the actor) are believed. "
         "Default: none, and those headers are ignored.")


def behind(origin: str | None, proxies: list[str] | None) -> str:
    """How the start-up line describes the proxy settings (empty without them)."""
    return "".join([f"; published at {origin}" if origin else "",
                    f"; proxy headers from {', '.join(proxies)}" if proxies else ""])


@click.command()
@click.argument("target", metavar="MODULE:APP")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but a loopback address needs a token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8642, show_default=True)
@click.option("--token", metavar="[NAME:]SECRET", default=None,
              help="Require this token from every client (bearer token, or the password of basic auth); "
                   "else $FIRESAFE_DASHBOARD_TOKEN. NAME is recorded as the actor of replays and discards. "
                   "Prefer the variable: a --token value shows in the process list.")
@public_url_option
@forwarded_allow_ips_option
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              default="info", show_default=True)
def dashboard(target: str, host: str, port: int, token: str | None, public_url: str | None,
              forwarded_allow_ips: str | None, log_level: str) -> None:
    """Serve the dashboard of MODULE:APP: overview, jobs, job traces, dead letters (replay and
    discard), schedules, alerts, plus /metrics (Prometheus) and /healthz.

    It binds 127.0.0.1 by default. To serve other addresses give a token; it refuses to start
    without one. Replays and discards are recorded in each job's events with the dashboard user.
    Behind a TLS reverse proxy, give --public-url (and --forwarded-allow-ips to believe the
    proxy's X-Forwarded-Proto and X-Forwarded-For).

    \b
    Examples:
      firesafe dashboard myapp:app
      firesafe dashboard myapp:app --port 9000
      FIRESAFE_DASHBOARD_TOKEN=ops:$(cat /run/secrets/dash) firesafe dashboard myapp:app --host 0.0.0.0
      FIRESAFE_DASHBOARD_TOKEN=ops:$(cat /run/secrets/dash) firesafe dashboard myapp:app \\
          --public-url https://ops.example.com --forwarded-allow-ips 127.0.0.1
    """
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:  # pragma: no cover - both are dependencies
        raise fail(f"the dashboard needs starlette and uvicorn: {exc}") from None
    from firesafe.dashboard.security import check_public, parse_forwarded_allow_ips
    from firesafe.dashboard.server import check_bind, resolve_token, serve

    tok = resolve_token(token)
    check_bind(host, tok)  # before importing anything of the user's
    origin = check_public(public_url, tok)
    proxies = parse_forwarded_allow_ips(forwarded_allow_ips)
    check_port(host, port)
    app = load_app(target)
    version = app.store.schema_version()  # a clear error now if the store cannot be opened
    if version == 0:
        raise fail(f"no firesafe store at {safe_url(app.store_url)} (run firesafe migrate)")
    shown = f"[{host}]" if ":" in host else host
    auth = f"token required{f' (actor {tok.name})' if tok and tok.name else ''}" if tok else "no token: loopback only"
    click.echo(f"firesafe dashboard for {target} on http://{shown}:{port}/ ({auth}{behind(origin, proxies)}); "
               f"store {safe_url(app.store_url)}", err=True)
    serve(app, host=host, port=port, token=tok, log_level=log_level.lower(), public_url=public_url,
          forwarded_allow_ips=proxies)
