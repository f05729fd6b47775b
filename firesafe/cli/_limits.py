"""``firesafe limiters``: show the shared limiters; pause and resume them for every worker.

Only the store is needed (no user code): workers record the limiters their app declares when they start.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import click
from rich.table import Table
from rich.text import Text

from firesafe.cli._common import (
    Duration,
    actor_options,
    console,
    data,
    echo_json,
    fail,
    human_duration,
    json_option,
    open_app,
    plain,
    store_option,
)
from firesafe.deadletters.audit import actor_of, reason_of
from firesafe.errors import MAX_DELAY
from firesafe.limits.store import LimiterStatus

BREAKER_STYLE = {"closed": "green", "open": "bold red", "half_open": "yellow"}


class _ListByDefault(click.Group):
    """``firesafe limiters [--json] [--store URL]`` means ``firesafe limiters ls ...``; any other word
    must name a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0].startswith("-") and args[0] not in ("-h", "--help")):
            args = ["ls", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_ListByDefault)
def limiters() -> None:
    """Shared limiters: rate, tokens, jobs in flight and waiting, pause and breaker.

    `firesafe limiters` lists them (the same as `ls`). A pause holds back every worker at once;
    jobs that come up meanwhile wait without using an attempt and are released at the limiter's
    pace afterwards.

    \b
    Examples:
      firesafe limiters
      firesafe limiters --json
      firesafe limiters pause stripe --for 10m --reason "incident 42"
      firesafe limiters resume stripe
      firesafe limiters events --limiter stripe
    """


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else "-"


def _table(rows: list[LimiterStatus]) -> Table:
    table = Table(title="limiters", title_justify="left", header_style="bold")
    for col in ("limiter", "rate", "tokens", "in flight", "waiting", "paused until", "breaker"):
        table.add_column(col, overflow="fold", justify="right" if col in ("tokens", "in flight", "waiting") else "left")
    for r in rows:
        rate = f"{r.rate:g}/s, burst {r.burst:g}" if r.rate else "-"
        tokens = f"{r.tokens:g}" if r.tokens is not None else "-"
        flight = f"{r.in_flight}/{r.concurrency}" if r.concurrency else str(r.in_flight)
        paused = Text(_when(r.paused_until), style="yellow" if r.paused_until else "dim")
        if r.paused_until and r.pause_reason:
            paused.append(f" ({plain(r.pause_reason)})")
        breaker = data(r.breaker.replace("_", "-"), style=BREAKER_STYLE.get(r.breaker, ""))
        if r.breaker != "closed" and r.retry_at:
            breaker.append(f" (probe from {_when(r.retry_at)})")
        if r.failures:
            breaker.append(f", {r.failures} failure(s) in a row")
        if not r.breaker_after:
            breaker = Text("off", style="dim")
        table.add_row(data(r.name), rate, tokens, flight, str(r.waiting), paused, breaker)
    return table


@limiters.command("ls")
@json_option
@store_option
def ls(as_json: bool, store_url: str | None) -> None:
    """List the limiters recorded in the store."""
    app = open_app(store_url)
    rows = app.store.limiter_list()
    if as_json:
        echo_json([r.as_dict() for r in rows])
        return
    out = console()
    if not rows:
        out.print("no limiters recorded yet (a worker records its app's limiters when it starts)", style="dim")
        return
    out.print(_table(rows))


def _until(text: str) -> float:
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO datetime such as 2024-05-01T12:00:00Z",
                                 param_hint="--until") from None
    until = (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    if until - time.time() > MAX_DELAY:
        raise click.BadParameter(f"{text!r} is too far ahead: a pause lasts at most 1,000 years",
                                 param_hint="--until")
    return until


@limiters.command("pause")
@click.argument("name")
@click.option("--for", "seconds", type=Duration(), metavar="DURATION", help="How long: 30s, 10m, 2h ...")
@click.option("--until", "until", metavar="TIME", help="Until an ISO datetime (UTC when it has no zone).")
@actor_options
@json_option
@store_option
def pause_cmd(name: str, seconds: float | None, until: str | None, actor: str | None, reason: str | None,
              as_json: bool, store_url: str | None) -> None:
    """Pause limiter NAME for every worker (a pause only grows; `resume` ends it).

    The limiter's `paused` event records who (--actor, else $FIRESAFE_ACTOR, else user@host) and
    why (--reason, also shown with the pause); `firesafe limiters events` lists them.

    \b
    Examples:
      firesafe limiters pause stripe --for 10m --reason "provider incident"
      firesafe limiters pause stripe --until 2024-05-01T12:00:00Z
    """
    if (seconds is None) == (until is None):
        raise fail("give --for DURATION or --until TIME (one of them)")
    until_ts = _until(until) if until else None
    app = open_app(store_url)
    who, why = actor_of(actor), reason_of(reason)
    status = app.store.limiter_pause(name, seconds=seconds, until=until_ts,
                                     reason=why, actor=who)
    if as_json:
        echo_json({**status.as_dict(), "actor": who, "reason": why})
        return
    now = app.store.now()
    left = (status.paused_until.timestamp() - now) if status.paused_until else 0.0
    asked = until_ts if until_ts is not None else now + (seconds or 0.0)
    kept = " (a longer pause was already set: it stays, a pause only grows)" if left > asked - now + 1 else ""
    click.echo(f"limiter {plain(name)} paused until {_when(status.paused_until)}"
               + (f" ({human_duration(round(left))} from now)" if left >= 1 else "") + kept)


@limiters.command("resume")
@click.argument("name")
@actor_options
@json_option
@store_option
def resume_cmd(name: str, actor: str | None, reason: str | None, as_json: bool, store_url: str | None) -> None:
    """End limiter NAME's pause and close its breaker; waiting jobs are released at its pace.

    The `resumed` event records who (--actor) and why (--reason).

    \b
    Example:
      firesafe limiters resume stripe --reason "provider back"
    """
    app = open_app(store_url)
    who, why = actor_of(actor), reason_of(reason)
    status, released = app.store.limiter_resume(name, actor=who, reason=why)
    if as_json:
        echo_json({**status.as_dict(), "released": released, "actor": who, "reason": why})
        return
    click.echo(f"limiter {plain(name)} resumed; {released} waiting job(s) released at its pace")


@limiters.command("events")
@click.option("--limiter", "name", metavar="NAME", help="Only this limiter.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@json_option
@store_option
def events_cmd(name: str | None, limit: int, as_json: bool, store_url: str | None) -> None:
    """The latest limiter events: paused, resumed, breaker opened and closed (oldest first)."""
    app = open_app(store_url)
    store = app.store
    found = store.limiter_event_list(0, name, limit, newest=True)
    if as_json:
        echo_json([e.as_dict() for e in found])
        return
    out = console()
    if not found:
        out.print("no limiter events", style="dim")
        return
    table = Table(title="limiter events", title_justify="left", header_style="bold")
    for col in ("at", "limiter", "event", "actor", "detail"):
        table.add_column(col, overflow="fold")
    for e in found:
        detail = ", ".join(f"{k}={v}" for k, v in sorted(e.detail.items()))
        table.add_row(_when(e.at), data(e.limiter), data(e.kind), data(e.actor or "-"), data(detail))
    out.print(table)
