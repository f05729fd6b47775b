"""``firesafe dlq``: review the dead letters; list, show, replay, discard, purge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from firesafe.app import App
from firesafe.cli._common import (
    Duration,
    PointInTime,
    actor_options,
    confirm_bulk,
    console,
    data,
    echo_json,
    human_duration,
    json_option,
    open_app,
    store_option,
)
from firesafe.cli._render import dead_table, masked_job_dict, render_job
from firesafe.deadletters.audit import actor_of, reason_of
from firesafe.states import State

F = Callable[..., Any]


def filter_options(f: F) -> F:
    for option in reversed([
        click.option("--job", metavar="NAME", help="Only this job name."),
        click.option("--error", metavar="TYPE", help="Only this error type (e.g. TimeoutError)."),
        click.option("--queue", metavar="QUEUE", help="Only this queue."),
        click.option("--since", type=PointInTime(), metavar="TIME",
                     help="Died at or after TIME: ISO datetime (UTC if no zone) or a time ago like 2h, 3d."),
        click.option("--until", type=PointInTime(), metavar="TIME", help="Died before TIME (same forms as --since)."),
    ]):
        f = option(f)
    return f


def _dead_reason(*names: str) -> Callable[[F], F]:
    return click.option(*names, "dead_reason", metavar="REASON",
                        help="Only jobs that died for this reason: exhausted, permanent, worker_lost, limiter, ...")


@click.group(short_help="Review dead letters: ls, show, replay, discard, purge.")
def dlq() -> None:
    """The dead-letter queue: dead jobs keep their arguments, reason and every attempt.

    \b
    Examples:
      firesafe dlq ls --job refund --since 1d
      firesafe dlq ls --reason exhausted --limit 20 --json
      firesafe dlq show refund:o-9
      firesafe dlq replay --job refund --error TimeoutError --dry-run
      firesafe dlq replay refund:o-9 --reason "provider fixed"
      firesafe dlq discard --until 7d --yes --reason "obsolete orders"
      firesafe dlq purge --older-than 30d
    """


@dlq.command("ls")
@filter_options
@_dead_reason("--reason", "--dead-reason")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True, help="Jobs per page.")
@click.option("--offset", type=click.IntRange(0, None), default=0, show_default=True,
              help="Skip this many jobs (the page at offset N).")
@click.option("--after", "after", metavar="CURSOR", default=None,
              help="The page after CURSOR: the \"next\" that the previous page printed.")
@json_option
@store_option
def ls(job: str | None, error: str | None, queue: str | None, since: float | None, until: float | None,
       dead_reason: str | None, limit: int, offset: int, after: str | None, as_json: bool,
       store_url: str | None) -> None:
    """List dead jobs, the last to die first, a page at a time.

    A page ends with the cursor of the next one: `--after CURSOR` gets it, and stays right while
    more jobs die (an `--offset` would shift). With --json it prints {"total", "items", "next"}:
    how many dead jobs match the filters, this page's jobs, and the next page's cursor (null on
    the last page).

    \b
    Examples:
      firesafe dlq ls
      firesafe dlq ls --reason exhausted --job refund --since 2h --json
      firesafe dlq ls --limit 100 --after 1714521600.25:42
    """
    app = open_app(store_url)
    page = app.dlq.page(job=job, error=error, queue=queue, since=since, until=until, reason=dead_reason,
                        limit=limit, offset=offset, after=after)
    if as_json:
        echo_json({"total": page.total, "items": [masked_job_dict(j, with_trace=False) for j in page.items],
                   "next": page.next})
        return
    out = console()
    if not page.items:
        out.print("no dead jobs match" + (" past this cursor" if after or offset else ""), style="dim")
        return
    out.print(dead_table(page.items))
    more = f"; next page: --after {page.next}" if page.next else ""
    out.print(data(f"{len(page.items)} of {page.total} dead job(s), the last to die first{more}; "
                   "`firesafe show KEY` for a job's trace", style="dim"))


@dlq.command("show", short_help="Show a dead job with every attempt.")
@click.argument("key")
@click.option("--traceback", "full_tracebacks", is_flag=True, help="Show whole stored tracebacks.")
@json_option
@store_option
def show(key: str, full_tracebacks: bool, as_json: bool, store_url: str | None) -> None:
    """Show a dead job with every attempt (the same view as `firesafe show`).

    \b
    Example:
      firesafe dlq show refund:o-9
    """
    app = open_app(store_url)
    job = app.get(key)
    if as_json:
        echo_json(masked_job_dict(job))
        return
    out = console()
    if job.state != State.DEAD:
        out.print(data(f"note: {key} is not in the dead letters (state {job.state})", style="yellow"))
    render_job(out, job, full_tracebacks=full_tracebacks)


def _review(action: str, keys: tuple[str, ...], filters: dict[str, Any], dry_run: bool, yes: bool,
            as_json: bool, store_url: str | None, actor: str | None = None, reason: str | None = None) -> None:
    """Replay or discard: preview, confirm when bulk, then act on exactly the previewed jobs."""
    if keys and any(v is not None for v in filters.values()):
        raise click.UsageError("give job keys or filters (--job, --error, --queue, --since, --until, "
                               "--dead-reason), not both")
    app: App = open_app(store_url)
    method = app.dlq.replay if action == "replay" else app.dlq.discard
    done = "replayed" if action == "replay" else "discarded"
    preview = method(list(keys) if keys else None, dry_run=True, **filters)
    out = console()
    if preview.skipped:
        allowed = "dead or cancelled" if action == "replay" else "dead"
        why = ", ".join(f"{k} ({preview.reasons[k]})" for k in preview.skipped[:10])
        more = f" and {len(preview.skipped) - 10} more" if len(preview.skipped) > 10 else ""
        console(stderr=True).print(data(f"skipping {len(preview.skipped)} job(s) that are not {allowed}: {why}{more}",
                                        style="yellow"))
    if dry_run:
        if as_json:
            echo_json({"action": action, "dry_run": True, "count": preview.count, "keys": preview.keys,
                       "skipped": preview.skipped, "reasons": preview.reasons})
            return
        out.print(f"dry run: {preview.count} job(s) would be {done}; nothing changed")
        for key in preview.keys[:50]:
            out.print(data(f"  {key}"))
        if preview.count > 50:
            out.print(f"  ... and {preview.count - 50} more (--json lists them all)")
        return
    if preview.count == 0:
        if as_json:
            echo_json({"action": action, "dry_run": False, "count": 0, "keys": [], "skipped": preview.skipped,
                       "reasons": preview.reasons})
        else:
            out.print(f"nothing to {action}: no job matches")
        return
    bulk = not keys or len(keys) > 1
    if bulk and not yes:
        confirm_bulk(action, preview.count)
    with Progress(TextColumn(f"{action}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console(stderr=True), transient=False, disable=not bulk or as_json) as progress:
        task = progress.add_task(action, total=preview.count)

        def advance(n: int, total: int) -> None:
            progress.update(task, completed=n, total=total)

        result = method(preview.keys, progress=advance, actor=actor_of(actor), reason=reason_of(reason))
    if as_json:
        skipped = preview.skipped + result.skipped
        echo_json({"action": action, "dry_run": False, "count": result.count, "keys": result.keys,
                   "skipped": skipped, "reasons": {**preview.reasons, **result.reasons}, "actor": result.actor,
                   "reason": result.reason})
        return
    out.print(data(f"{done} {result.count} job(s) as {result.actor}"
                   + (f" (reason: {result.reason})" if result.reason else "")))
    if result.skipped:
        why = ", ".join(f"{k} (now {result.reasons[k]})" for k in result.skipped[:10])
        out.print(data(f"{len(result.skipped)} job(s) skipped: they had changed state meanwhile: {why}",
                       style="yellow"))


def _review_command(action: str, short_help: str, doc: str) -> click.Command:
    @click.argument("keys", nargs=-1, metavar="[KEY]...")
    @filter_options
    @_dead_reason("--dead-reason")
    @click.option("--dry-run", is_flag=True, help="Show what would change; change nothing.")
    @click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation of a bulk action.")
    @actor_options
    @json_option
    @store_option
    def command(keys: tuple[str, ...], job: str | None, error: str | None, queue: str | None, since: float | None,
                until: float | None, dead_reason: str | None, dry_run: bool, yes: bool, actor: str | None,
                reason: str | None, as_json: bool, store_url: str | None) -> None:
        _review(action, keys, {"job": job, "error": error, "queue": queue, "since": since, "until": until,
                               "dead_reason": dead_reason}, dry_run, yes, as_json, store_url, actor, reason)

    command.__doc__ = doc
    return dlq.command(action, short_help=short_help)(command)


_review_command("replay", "Requeue dead jobs (all of them if no key or filter), same key, fresh budget.",
                """Put dead jobs back in their queue: same key, fresh attempt budget, history kept.

    Give keys, or filters to replay every dead job that matches; with neither keys nor filters it
    replays every dead job. A bulk action (filters, none, or more than one key) states how many
    jobs it will touch and asks first, unless --yes; without a terminal it refuses unless --yes.
    Each replay is recorded in the job's events: when, who (--actor, else $FIRESAFE_ACTOR, else
    user@host) and why (--reason). --dead-reason filters by why the jobs died.

    \b
    Examples:
      firesafe dlq replay refund:o-9 --reason "provider fixed"
      firesafe dlq replay --job refund --error TimeoutError --since 1d --dry-run
      firesafe dlq replay --job refund --dead-reason exhausted --since 1d --yes --reason "PSP outage over"
    """)

_review_command("discard", "Take dead jobs (all of them if no key or filter) out of the dead letters.",
                """Take dead jobs out of the dead letters (they become cancelled, reason discarded).

    Keys or filters, like replay; with neither it discards every dead job. Bulk discards (filters,
    none, or more than one key) ask for confirmation unless --yes. Each discard is recorded in the
    job's events with who (--actor) and why (--reason).

    \b
    Examples:
      firesafe dlq discard refund:o-9 --reason "refunded by hand"
      firesafe dlq discard --job legacy_sync --until 7d --dry-run
    """)


@dlq.command("purge", short_help="Delete old dead jobs; their keys become free.")
@click.option("--older-than", type=Duration(), required=True, metavar="AGE",
              help="Delete dead jobs that died longer ago than AGE (30d, 12h, ...).")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@actor_options
@json_option
@store_option
def purge(older_than: float, dry_run: bool, yes: bool, actor: str | None, reason: str | None, as_json: bool,
          store_url: str | None) -> None:
    """Delete dead jobs older than --older-than, with their trace; their keys become free again.

    The jobs' events go with them, so the purge itself (who: --actor, why: --reason, how many) is
    recorded in the audit log (`firesafe audit`). With --json it prints {"dry_run", "older_than"
    (seconds), "count", "actor", "reason"}: the jobs deleted (or, in a dry run, that would be).

    \b
    Examples:
      firesafe dlq purge --older-than 30d --dry-run
      firesafe dlq purge --older-than 30d --yes --json --reason "retention: 30 days"
    """
    app = open_app(store_url)
    count = app.dlq.count(until=app.store.now() - older_than)
    out = console()
    age = human_duration(older_than)
    who, why = actor_of(actor), reason_of(reason)

    def report(n: int, dry: bool) -> None:
        echo_json({"dry_run": dry, "older_than": older_than, "count": n, "actor": who, "reason": why})

    if dry_run:
        if as_json:
            report(count, True)
            return
        out.print(f"dry run: {count} dead job(s) older than {age} would be deleted; nothing changed")
        return
    if count == 0:
        if as_json:
            report(0, False)
            return
        out.print(f"nothing to purge: no dead job is older than {age}")
        return
    if not yes:
        confirm_bulk("permanently delete", count, "dead job(s)")
    with console(stderr=True).status(f"deleting {count} dead job(s)..."):
        removed = app.dlq.purge(older_than=older_than, actor=who, reason=why)
    if as_json:
        report(removed, False)
        return
    out.print(f"purged {removed} dead job(s) older than {age}; their keys can be used again")
