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
#: ``--alerts/--no-alerts``: whether the dashboard (or ``firesafe serve``) dispatches the app's alerts.
alerts_option = click.option(
    "--alerts/--no-alerts", "dispatch_alerts", default=True, show_default=True,
    help="Also dispatch the app's alerts (group, check the rules, deliver), as workers do, so that "
         "they leave while no worker runs. Each alert still leaves once, whoever sends it.")
forwarded_allow_ips_option = click.option(
    "--forwarded-allow-ips", metavar="IPS", default=None,
    help="Comma-separated addresses or networks of the reverse proxies whose X-Forwarded-Proto "
         "(the scheme) and X-Forwarded-For (the client, recorded as the actor) are believed. "
         "Default: none, and those headers are ignored.")


def alerts_note(app: object, enabled: bool) -> str:
    """How the start-up line says whether this process dispatches alerts (empty if there are none)."""
    alerts = getattr(app, "alerts", None)
    if alerts is None or not alerts.active:
        return ""
    return "; alerts dispatched here too" if enabled else "; alerts left to the workers (--no-alerts)"


def behind(origin: str | None, proxies: list[str] | None) -> str:
    """How the start-up line describes the proxy settings (empty without them)."""
    return "".join([f"; published at {origin}" if origin else "",
                    f"; proxy headers from {', '.join(proxies)}" if proxies else ""])


@click.command()
@click.argument("target", metavar="MODULE:APP")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but a loopback address needs a token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8642, show_default=True)
@click.option("--token", "token", metavar="[NAME=]SECRET", multiple=True,
              help="Require this token from every client (bearer token, or the password of basic auth); "
                   "repeat it for one token per person (NAME=SECRET each), else --tokens-file, else "
                   "$FIRESAFE_DASHBOARD_TOKENS (several, comma-separated), else $FIRESAFE_DASHBOARD_TOKEN. "
                   "NAME is recorded as the actor of that person's actions. Prefer a file or a variable: "
                   "a --token value shows in the process list.")
@click.option("--tokens-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A file of tokens, one NAME=SECRET per line (# comments).")
@click.option("--user-header", metavar="NAME", default=None,
              help="Record as the actor the user this header names (like X-Forwarded-User), set by a reverse "
                   "proxy that logs people in; believed only from --user-header-from. Off by default.")
@click.option("--user-header-from", metavar="IPS", default=None,
              help="Comma-separated addresses or networks of the proxy that sets --user-header.")
@public_url_option
@forwarded_allow_ips_option
@alerts_option
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              default="info", show_default=True)
def dashboard(target: str, host: str, port: int, token: tuple[str, ...], tokens_file: str | None,
              user_header: str | None, user_header_from: str | None, public_url: str | None,
              forwarded_allow_ips: str | None, dispatch_alerts: bool, log_level: str) -> None:
    """Serve the dashboard of MODULE:APP: overview, jobs, job traces, dead letters (replay and
    discard), schedules, alerts, plus /metrics (Prometheus) and /healthz.

    It binds 127.0.0.1 by default. To serve other addresses give a token; it refuses to start
    without one. Replays and discards are recorded in each job's events with the dashboard user.
    Behind a TLS reverse proxy, give --public-url (and --forwarded-allow-ips to believe the
    proxy's X-Forwarded-Proto and X-Forwarded-For). It also dispatches the app's alerts (unless
    --no-alerts), so they leave while no worker runs; /healthz?workers=1 answers 503 when no worker
    heartbeated recently, for a monitor outside the fleet.

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
    import os

    from firesafe.dashboard.security import (
        TOKENS_ENV,
        check_public,
        parse_forwarded_allow_ips,
        parse_user_header,
        resolve_tokens,
    )
    from firesafe.dashboard.server import TOKEN_ENV, check_bind, serve

    if tokens_file is not None:
        with open(tokens_file, encoding="utf-8") as f:
            file_text: str | None = f.read()
    else:
        file_text = None
    tok = resolve_tokens(token, file_text, os.environ.get(TOKEN_ENV), os.environ.get(TOKENS_ENV))
    people = parse_user_header(user_header, user_header_from)
    if people is not None and forwarded_allow_ips:
        raise fail("--user-header checks the proxy's own address on each request, which --forwarded-allow-ips "
                   "replaces with the client's: give one of them (--public-url sets the scheme)")
    check_bind(host, tok)  # before importing anything of the user's
    origin = check_public(public_url, tok)
    proxies = parse_forwarded_allow_ips(forwarded_allow_ips)
    check_port(host, port)
    app = load_app(target)
    version = app.store.schema_version()  # a clear error now if the store cannot be opened
    if version == 0:
        raise fail(f"no firesafe store at {safe_url(app.store_url)} (run firesafe migrate)")
    shown = f"[{host}]" if ":" in host else host
    if isinstance(tok, list):
        auth = f"{len(tok)} named tokens"
    elif tok:
        auth = f"token required{f' (actor {tok.name})' if tok.name else ''}"
    else:
        auth = "no token: loopback only"
    if people is not None:
        auth += f"; users named by {people.name} from {', '.join(people.trusted)}"
    click.echo(f"firesafe dashboard for {target} on http://{shown}:{port}/ ({auth}{behind(origin, proxies)}); "
               f"store {safe_url(app.store_url)}{alerts_note(app, dispatch_alerts)}", err=True)
    serve(app, host=host, port=port, token=tok, log_level=log_level.lower(), public_url=public_url,
          forwarded_allow_ips=proxies, alerts=dispatch_alerts, user_header=people)
