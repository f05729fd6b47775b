"""``firesafe audit``: who did what and why, for the actions that no job's events hold."""

from __future__ import annotations

import click
from rich.table import Table

from firesafe.cli._common import console, data, echo_json, json_option, open_app, store_option
from firesafe.cli._render import to_json, when


@click.command(short_help="Who did what and why: purges, schedule pauses and resumes.")
@click.option("--action", metavar="ACTION", help="Only this action: dlq_purge, schedule_pause, schedule_resume.")
@click.option("--subject", metavar="NAME", help="Only actions on this subject (a schedule's name).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@json_option
@store_option
def audit(action: str | None, subject: str | None, limit: int, as_json: bool, store_url: str | None) -> None:
    """The audit log, newest first: when, what, on what, who and why.

    Actions on jobs (replay, discard, cancel, rerun) are in each job's events (`firesafe show KEY`);
    limiter pauses in `firesafe limiters events`. This log holds the rest: dead-letter purges (their
    jobs and events are gone) and schedule pauses and resumes.

    \b
    Examples:
      firesafe audit
      firesafe audit --action schedule_pause --subject nightly_sync --json
    """
    app = open_app(store_url)
    found = app.store.audit_list(limit, action=action, subject=subject)
    if as_json:
        echo_json([e.as_dict() for e in found])
        return
    out = console()
    if not found:
        out.print("nothing recorded", style="dim")
        return
    table = Table(title="audit", title_justify="left", header_style="bold")
    for col in ("at", "action", "subject", "by", "why", "detail"):
        table.add_column(col, overflow="fold")
    for e in found:
        table.add_row(when(e.at), data(e.action), data(e.subject or "-"), data(e.actor), data(e.reason or "-"),
                      data(to_json(e.detail) if e.detail else ""))
    out.print(table)
