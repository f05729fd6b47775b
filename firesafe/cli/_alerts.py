"""``firesafe alerts``: the alert history with delivery status, and a test alert to every sink."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from firesafe.alerts.grouping import KINDS
from firesafe.alerts.manager import undelivered_note
from firesafe.alerts.store import AlertRecord, Delivery
from firesafe.cli._common import console, data, echo_json, fail, iso_time, json_option, open_app, plain, store_option
from firesafe.masking import mask_text

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
DELIVERY_STYLE = {"delivered": "green", "pending": "yellow", "failed": "bold red"}


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def delivery_dict(d: Delivery) -> dict[str, Any]:
    return {"sink": d.sink, "state": d.state, "attempts": d.attempts, "in_flight": d.leased,
            "next_at": iso_time(d.next_at) if d.state == "pending" else None,
            "delivered_at": iso_time(d.delivered_at) if d.delivered_at else None,
            "last_error": mask_text(d.last_error) if d.last_error else None}


def alert_dict(a: AlertRecord, with_document: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"id": a.id, "created_at": iso_time(a.created_at), "kind": a.kind, "status": a.status,
                           "severity": a.severity, "job_name": a.job_name, "count": a.count, "title": a.title,
                           "keys": a.document.get("keys", []),
                           "deliveries": [delivery_dict(d) for d in a.deliveries]}
    if with_document:
        out["document"] = a.document
    return out


def delivery_text(d: Delivery) -> Text:
    t = data(f"{d.sink}: ")
    state = "sending" if d.leased and d.state == "pending" else d.state
    t.append(state, style=DELIVERY_STYLE.get(d.state, ""))
    if d.attempts:
        t.append(f" ({d.attempts} attempt{'s' if d.attempts != 1 else ''})", style="dim")
    if d.state == "pending" and not d.leased and d.attempts:
        t.append(f" next {_when(d.next_at)}", style="dim")
    if d.last_error and d.state != "delivered":
        t.append(f"\n  {plain(mask_text(d.last_error)[:200])}", style="red")
    return t


@click.group()
def alerts() -> None:
    """Alerts: what was raised, grouped and sent, and whether each sink got it.

    \b
    Examples:
      firesafe alerts ls
      firesafe alerts ls --kind dead_letter --json
      firesafe alerts test myapp:app
    """


@alerts.command("ls")
@click.option("--kind", type=click.Choice(sorted(KINDS)), help="Only alerts of this kind.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--full", is_flag=True, help="With --json: include each alert's whole document (the trace).")
@json_option
@store_option
def ls(kind: str | None, limit: int, full: bool, as_json: bool, store_url: str | None) -> None:
    """List alerts, newest first, with their delivery status per sink.

    \b
    Examples:
      firesafe alerts ls
      firesafe alerts ls --kind failure_rate --limit 10
      firesafe alerts ls --json --full
    """
    app = open_app(store_url)
    found = app.alerts.list(limit=limit, kind=kind)
    waiting = app.store.alert_waiting()
    if as_json:
        echo_json({"alerts": [alert_dict(a, full) for a in found], "waiting_events": waiting})
        return
    out = console()
    if found:
        table = Table(show_lines=False)
        for name in ("id", "created", "severity", "kind", "job", "count"):
            table.add_column(name, no_wrap=True)
        table.add_column("title", overflow="fold")
        table.add_column("delivery", overflow="fold")
        for a in found:
            severity = "resolved" if a.status == "resolved" else a.severity
            deliveries = Text("\n").join(delivery_text(d) for d in a.deliveries) if a.deliveries else Text(
                undelivered_note(a, bool(app.alerts.sinks) or None), style="dim")
            table.add_row(str(a.id), _when(a.created_at), data(severity, style=SEVERITY_STYLE.get(severity, "green")),
                          data(a.kind), data(a.job_name or "-"), f"{a.count:,}", data(a.title), deliveries)
        out.print(table)
        failed = sum(1 for a in found for d in a.deliveries if d.state == "failed")
        pending = sum(1 for a in found for d in a.deliveries if d.state == "pending")
        note = f"{len(found)} alert(s)"
        if pending or failed:
            note += f"; deliveries pending: {pending}, failed for good: {failed}"
        out.print(note + "; `firesafe show KEY` for a job's trace", style="dim")
    else:
        out.print("no alerts yet", style="dim")
    if waiting:
        out.print(f"{waiting:,} alert event(s) wait to be grouped and sent by a worker whose app has alerts "
                  "configured", style="yellow")


@alerts.command("test", short_help="Send a test alert to every sink of MODULE:APP.")
@click.argument("target", metavar="MODULE:APP")
@json_option
def test(target: str, as_json: bool) -> None:
    """Send a test alert to every sink of the app MODULE:APP now, and say which got it.

    The alert goes through the outbox like any other and shows in `firesafe alerts ls`.
    Exits with 1 if a sink failed.

    \b
    Example:
      firesafe alerts test myapp:app
    """
    from firesafe.cli._loader import load_app

    app = load_app(target)
    if not app.alerts.sinks:
        raise fail(f"{target} has no alert sinks: declare them with App(..., alerts=[Log(), Webhook(...), ...])")
    results = app.alerts.test()
    if as_json:
        echo_json({name: {"delivered": error is None, "error": error} for name, error in results.items()})
    else:
        out = console()
        for name, error in results.items():
            if error is None:
                out.print(Text.assemble((f"{plain(name)}: ", ""), ("delivered", "green")))
            else:
                out.print(Text.assemble((f"{plain(name)}: ", ""), ("failed", "bold red"), (f"  {plain(error)}", "red")))
    if any(error is not None for error in results.values()):
        raise SystemExit(1)
