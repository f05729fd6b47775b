"""``firesafe serve``, ``firesafe consume`` and ``firesafe events``: the event inbox from the shell."""

from __future__ import annotations

import time
from typing import Any

import click
from rich.table import Table

from firesafe.cli._common import (
    Duration,
    check_port,
    console,
    data,
    dumps,
    echo_json,
    fail,
    iso_time,
    json_option,
    open_app,
    safe_url,
    store_option,
)
from firesafe.cli._dashboard import alerts_note, alerts_option, behind, forwarded_allow_ips_option, public_url_option
from firesafe.cli._loader import load_app
from firesafe.cli._render import when
from firesafe.clock import to_datetime
from firesafe.errors import InvalidInput
from firesafe.inbox.events import event_key
from firesafe.masking import mask, mask_text


@click.command()
@click.argument("target", metavar="MODULE:APP")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. With the dashboard, anything but loopback needs a token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8643, show_default=True,
              help="Port to bind; not the dashboard's 8642, so both can run on one host.")
@click.option("--token", metavar="[NAME:]SECRET", default=None,
              help="The dashboard's token (else $FIRESAFE_DASHBOARD_TOKEN); /events/ paths do not use it.")
@click.option("--no-dashboard", is_flag=True, help="Serve only POST /events/{source}.")
@public_url_option
@forwarded_allow_ips_option
@alerts_option
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              default="info", show_default=True)
@click.option("--header-timeout", type=Duration(), default="10s", show_default=True, metavar="SECONDS",
              help="Close a connection whose request line and headers have not all arrived this long after "
                   "it opened (or after the first byte of a later request); answered 408.")
@click.option("--body-timeout", type=Duration(), default="30s", show_default=True, metavar="SECONDS",
              help="Close a connection whose request body has not all arrived this long after its headers; "
                   "answered 408.")
@click.option("--max-connections", type=click.IntRange(1), default=1000, show_default=True,
              help="Connections open at once; one more is answered 503 (Retry-After: 1) and closed at once.")
def serve(target: str, host: str, port: int, token: str | None, no_dashboard: bool, public_url: str | None,
          forwarded_allow_ips: str | None, dispatch_alerts: bool, log_level: str, header_timeout: float,
          body_timeout: float, max_connections: int) -> None:
    """Receive webhooks for MODULE:APP at POST /events/{source}, beside the dashboard.

    Each source is configured in the app with app.event_source(NAME, ...) (how to read the event id
    and type, how to verify the request). A request is answered 2xx only after its event is durably
    stored; the handler runs later in the workers. Unverified or malformed requests get a 4xx and
    store nothing; a store fault gets 503 so the sender delivers again. The same server answers the
    dashboard's pages (firesafe dashboard), unless --no-dashboard; behind a TLS reverse proxy, give
    --public-url (and --forwarded-allow-ips), as for firesafe dashboard. Slow clients are cut off
    (--header-timeout, --body-timeout) and open connections are bounded (--max-connections).
    It also dispatches the app's alerts, as workers do, unless --no-alerts.

    \b
    Examples:
      firesafe serve myapp:app
      firesafe serve myapp:app --no-dashboard --host 0.0.0.0 --port 8080
      FIRESAFE_DASHBOARD_TOKEN=ops:$(cat /run/secrets/dash) firesafe serve myapp:app --host 0.0.0.0
      FIRESAFE_DASHBOARD_TOKEN=ops:$(cat /run/secrets/dash) firesafe serve myapp:app \\
          --public-url https://ops.example.com --forwarded-allow-ips 127.0.0.1
    """
    import uvicorn

    from firesafe.dashboard.inbox import create_server_app, server_config
    from firesafe.dashboard.security import check_public, parse_forwarded_allow_ips
    from firesafe.dashboard.server import dispatching
    from firesafe.inbox.http import create_app
    from firesafe.inbox.serving import Limits

    for flag, seconds in (("--header-timeout", header_timeout), ("--body-timeout", body_timeout)):
        if not 0 < seconds <= 3600:
            raise click.BadParameter(f"{seconds:g}s: give more than 0 and at most 3600 seconds", param_hint=flag)
    limits = Limits(header_timeout, body_timeout, max_connections)
    tok = origin = None
    if no_dashboard and public_url:
        raise fail("--public-url is the dashboard's address: it has no use with --no-dashboard")
    if not no_dashboard:
        from firesafe.dashboard.server import check_bind, resolve_token

        tok = resolve_token(token)
        check_bind(host, tok)
        origin = check_public(public_url, tok)
    proxies = parse_forwarded_allow_ips(forwarded_allow_ips)
    check_port(host, port)
    app = load_app(target)
    if not app.inbox.sources:
        raise fail(f"{target} declares no event source: add app.event_source(\"NAME\", ...) first")
    app.store.migrate()
    asgi = create_app(app) if no_dashboard else create_server_app(app, tok, public_url=public_url)
    click.echo(f"firesafe serve for {target} on http://{host}:{port}/ (events at /events/"
               f"{{{','.join(app.inbox.sources)}}}{behind(origin, proxies)}); store {safe_url(app.store_url)}"
               f"{alerts_note(app, dispatch_alerts)}", err=True)
    with dispatching(app, "serve", dispatch_alerts):
        uvicorn.Server(server_config(asgi, host, port, log_level.lower(), True, proxies, limits)).run()


def _amqp_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from firesafe.inbox.amqp import parameters

    try:
        parameters(value)
    except InvalidInput as exc:
        raise click.BadParameter(f"{safe_url(value)!r} is {exc}", ctx, param) from None
    return value


def broker_reason(exc: BaseException) -> str:
    """Why a broker call failed, in words: pika often wraps the cause (a refused connection, say) in
    an exception whose own text is empty.

    >>> wrapped = ConnectionError()
    >>> wrapped.__cause__ = ConnectionRefusedError(111, "Connection refused")
    >>> broker_reason(wrapped)
    'ConnectionError: [Errno 111] Connection refused'
    """
    seen: set[int] = set()
    inner: BaseException | None = exc
    while inner is not None and id(inner) not in seen:
        seen.add(id(inner))
        text = str(inner).strip()
        if text:
            return text if inner is exc else f"{type(exc).__name__}: {text}"
        nested = [a for a in inner.args if isinstance(a, BaseException)]
        nested += [e for e in (getattr(inner, "exception", None), inner.__cause__, inner.__context__)
                   if isinstance(e, BaseException)]
        texts = [n for n in nested if str(n).strip()]
        inner = next(iter(texts or nested), None)
    return f"{type(exc).__name__} (no reason given)"


@click.command()
@click.argument("target", metavar="MODULE:APP")
@click.option("--from", "url", required=True, metavar="AMQP_URL", callback=_amqp_url,
              help="The broker, e.g. amqp://guest:guest@127.0.0.1:5672/.")
@click.option("--queue", required=True, help="The queue to consume (declared durable if missing).")
@click.option("--source", default=None, help="The event source name (default: the queue name).")
@click.option("--batch", type=click.IntRange(1, 5000), default=200, show_default=True,
              help="Store up to this many messages per transaction before acknowledging them.")
@click.option("--idle-exit", type=Duration(), default=None, metavar="SECONDS",
              help="Exit after this long without a message (for scripts).")
def consume(target: str, url: str, queue: str, source: str | None, batch: int, idle_exit: float | None) -> None:
    """Consume a RabbitMQ queue into the event inbox of MODULE:APP.

    A message is acknowledged only after its event is durably stored, so a crash in between makes
    RabbitMQ redeliver it, and the inbox absorbs the redelivery (one event, one handler job). The
    event id is the message_id property (else the body's "id"), the type the type property (else the
    body's "type"). Messages without an id or with a body that is not JSON are kept as rejects with
    the reason (firesafe events ls --rejected), never silently dropped.

    \b
    Example:
      firesafe consume myapp:app --from amqp://guest:guest@127.0.0.1:5672/ --queue orders
    """
    from firesafe.inbox.amqp import consume as run

    app = load_app(target)
    app.store.migrate()
    try:
        stats = run(app, url, queue, source=source, batch=batch, idle_timeout=idle_exit)
    except ImportError as exc:  # pragma: no cover - pika is a dependency
        raise fail(f"the consumer needs pika: {exc}") from None
    except OSError as exc:
        raise fail(f"cannot reach the broker at {safe_url(url)}: {mask_text(str(exc))}") from None
    except Exception as exc:
        if type(exc).__module__.startswith("pika"):
            raise fail(f"broker error at {safe_url(url)}: {mask_text(broker_reason(exc))}") from None
        raise
    click.echo(f"stored {stats.stored}, duplicates absorbed {stats.duplicates}, rejected {stats.rejected}",
               err=True)


@click.group()
def events() -> None:
    """Stored events: list them, the unhandled ones, the rejects; replay unhandled ones."""


@events.command("ls")
@click.option("--source", default=None, help="Only this source.")
@click.option("--unhandled", is_flag=True, help="Only events no handler took (yet).")
@click.option("--rejected", is_flag=True, help="The messages that could not be read as events (not with --unhandled).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@json_option
@store_option
def events_ls(source: str | None, unhandled: bool, rejected: bool, limit: int, as_json: bool,
              store_url: str | None) -> None:
    """List stored events, newest first (or, with --rejected, the messages kept as rejects).

    \b
    Examples:
      firesafe events ls --unhandled
      firesafe events ls --rejected --source orders --json
    """
    if unhandled and rejected:
        raise click.UsageError("give --unhandled or --rejected, not both: a reject is not an event, no handler "
                               "ever takes it")
    app = open_app(store_url)
    out = console()
    where = f" of source {source!r}" if source else ""
    if rejected:
        rows = app.store.inbox_reject_list(source, limit)
        if as_json:
            echo_json([{**r, "body": mask_text(r["body"] or ""), "received_at": iso_time(r["received_at"])}
                       for r in rows])
            return
        if not rows:
            out.print(data(f"no rejected messages{where}", style="dim"))
            return
        table = Table("id", "source", "received", "reason", "body")
        for r in rows:
            table.add_row(str(r["id"]), data(r["source"]), when(to_datetime(r["received_at"]), ms=False),
                          data(r["reason"]), data(mask_text((r["body"] or "")[:80])))
        out.print(table)
        return
    rows = app.inbox.list(source, unhandled, limit)
    if as_json:
        echo_json([_event_json(r) for r in rows])
        return
    if not rows:
        out.print(data(f"no {'unhandled ' if unhandled else ''}events{where} match", style="dim"))
        return
    table = Table("source", "event id", "type", "received", "handled", "again", "data")
    for r in rows:
        table.add_row(data(r["source"]), data(r["event_id"]), data(r["type"]),
                      when(to_datetime(r["received_at"]), ms=False), "yes" if r["handled"] else "no",
                      _again(r), data(dumps(mask(r["data"]))[:80]))
    out.print(table)


def _again(row: dict[str, Any]) -> str:
    """How often an event was delivered again, and how many of those brought other data."""
    if not row["redeliveries"]:
        return "-"
    return f"{row['redeliveries']}" + (f" ({row['changed']} changed)" if row["changed"] else "")


def _event_json(row: dict[str, Any]) -> dict[str, Any]:
    out = {**row, "data": mask(row["data"]), "received_at": iso_time(row["received_at"]),
           "changed_at": iso_time(row["changed_at"]) if row["changed_at"] is not None else None}
    if "changed_data" in row:
        out["changed_data"] = mask(row["changed_data"])
    return out


@events.command("show")
@click.argument("source")
@click.argument("event_id")
@json_option
@store_option
def events_show(source: str, event_id: str, as_json: bool, store_url: str | None) -> None:
    """Show one stored event: its data, whether a handler took it, and its redeliveries (how many,
    how many brought other data, and the last such data: the stored data stand).

    \b
    Example:
      firesafe events show stripe evt_1PxY2 --json
    """
    app = open_app(store_url)
    row = app.inbox.show(source, event_id)
    if row is None:
        raise fail(f"no event {event_id!r} of source {source!r} is stored (firesafe events ls --source {source} "
                   "lists them)")
    if as_json:
        echo_json(_event_json(row))
        return
    out = console()
    out.print(data(f"event {row['event_id']} of {row['source']}  type {row['type']}", style="bold"))
    out.print(data(f"received  {iso_time(row['received_at'])}"))
    out.print(data(f"handled   {'yes (job ' + event_key(source, event_id) + ')' if row['handled'] else 'no'}"))
    out.print(data(f"again     {row['redeliveries']} redelivery(ies), {row['changed']} with other data"))
    out.print(data(f"data      {dumps(mask(row['data']), indent=2)}"))
    if row["changed"]:
        out.print(data(f"last changed delivery at {iso_time(row['changed_at'])} (fingerprint "
                       f"{row['changed_fingerprint'][:16]}), data (not used: the stored data stand):"))
        out.print(data(dumps(mask(row["changed_data"]), indent=2)))


@events.command("replay")
@click.argument("target", metavar="MODULE:APP")
@click.option("--source", default=None, help="Only this source.")
def events_replay(target: str, source: str | None) -> None:
    """Enqueue the handler jobs of stored events that had no handler when they arrived.

    It needs the app (MODULE:APP) to know which handlers exist now.
    """
    app = load_app(target)
    t = time.monotonic()
    jobs = app.inbox.replay_unhandled(source)
    click.echo(f"enqueued {len(jobs)} handler job(s) in {time.monotonic() - t:.2f}s")
    if jobs:
        return
    warn = console(stderr=True)
    if source and not app.store.inbox_event_list(source, False, 1, 0):
        warn.print(data(f"warning: no event of source {source!r} is stored (is the name right?)", style="yellow"))
    elif app.store.inbox_event_list(source, True, 1, 0):
        warn.print(data(f"note: unhandled events{f' of source {source!r}' if source else ''} remain: {target} has "
                        "no handler for their type (app.on_event(SOURCE, TYPE))", style="yellow"))
