"""``firesafe schedules`` and ``firesafe backfill``: review schedules, pause them, backfill ranges.

Both take the app as MODULE:APP (like ``firesafe worker``): the schedule definitions live in its code.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from firesafe.app import App
from firesafe.cli._common import actor_options, confirm_bulk, console, data, echo_json, json_option, plain
from firesafe.cli._loader import load_app
from firesafe.cli._render import state_text
from firesafe.schedules.backfill import RERUN_POLICIES, BackfillResult
from firesafe.schedules.status import ScheduleStatus, get, missed, pause, status
from firesafe.schedules.windows import Window, at


def _local(value: datetime | None) -> str:
    """A window bound as people read it: local time with its offset, to the minute (seconds if any)."""
    if value is None:
        return "-"
    fmt = "%Y-%m-%d %H:%M:%S" if value.second else "%Y-%m-%d %H:%M"
    offset = value.strftime("%z")
    return f"{value.strftime(fmt)}{offset[:3]}:{offset[3:]}" if offset else value.strftime(fmt)


def _window(w: Window | None) -> str:
    return "-" if w is None else f"{_local(w.start)} → {_local(w.end)}"


class _ListByDefault(click.Group):
    """``firesafe schedules MODULE:APP`` means ``firesafe schedules ls MODULE:APP``; any other word
    must name a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help") and (
                ":" in args[0] or args[0].startswith("-")):
            args = ["ls", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_ListByDefault)
def schedules() -> None:
    """The app's schedules: each window runs once, missed ones are recorded.

    `firesafe schedules MODULE:APP` lists them (the same as `ls`).

    \b
    Examples:
      firesafe schedules myapp:app
      firesafe schedules missed myapp:app nightly_sync
      firesafe schedules pause myapp:app nightly_sync
      firesafe schedules resume myapp:app nightly_sync
    """


def _zones(rows: list[ScheduleStatus]) -> str:
    """Which clock the table's times read, e.g. ``times in UTC`` or ``times in each schedule's time
    zone, with its UTC offset: Europe/Berlin (nightly), UTC (five)``."""
    zones = sorted({r.tz for r in rows})
    if zones == ["UTC"]:
        return "times in UTC (every schedule's time zone is UTC)"
    by = ", ".join(f"{r.tz} ({r.name})" for r in rows)
    return f"times in each schedule's own time zone, with its UTC offset: {by}"


def _status_table(rows: list[ScheduleStatus]) -> Table:
    table = Table(title="schedules", title_justify="left", header_style="bold", caption=data(_zones(rows)),
                  caption_justify="left")
    for col in ("schedule", "expression", "time zone", "queue", "catch-up", "last window", "next window"):
        table.add_column(col, overflow="fold")
    for col in ("succeeded", "failed", "missed"):
        table.add_column(col, justify="right")
    for r in rows:
        last = Text(_window(r.last_window))
        if r.last_state:
            last.append(" ")
            last.append_text(state_text(r.last_state))
        name = data(r.name)
        if r.paused:
            name.append(" (paused)", style="yellow")
        nxt = "-" if r.paused else (f"{_local(r.next_window.start)}, due {_local(r.next_window.end)}"
                                    if r.next_window else "-")
        table.add_row(name, data(r.expression), data(r.tz), data(r.queue), data(r.catchup), last, nxt,
                      str(r.counts["succeeded"]),
                      Text(str(r.counts["failed"]), style="red" if r.counts["failed"] else ""),
                      Text(str(r.counts["missed"]), style="yellow" if r.counts["missed"] else ""))
    return table


@schedules.command("ls")
@click.argument("target", metavar="MODULE:APP")
@json_option
def ls(target: str, as_json: bool) -> None:
    """List each schedule: expression, time zone, queue, last and next window, counts of its windows.

    Window times are in the schedule's own time zone (the "time zone" column), shown with their UTC
    offset. The last window is the latest one enqueued, by the scheduler or by a backfill. Counts
    are of the windows still in the store (finished jobs are pruned after their retention); failed
    counts dead windows, missed those recorded missed and not backfilled since.

    \b
    Example:
      firesafe schedules ls myapp:app --json
    """
    app = _app(target)
    rows = status(app)
    if as_json:
        echo_json([r.as_dict() for r in rows])
        return
    out = console()
    if not rows:
        out.print(data(f"{target} declares no schedules", style="dim"))
        return
    out.print(_status_table(rows))


@schedules.command("missed")
@click.argument("target", metavar="MODULE:APP")
@click.argument("name", metavar="SCHEDULE")
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True)
@click.option("--open", "open_only", is_flag=True, help="Only windows not backfilled since.")
@json_option
def missed_cmd(target: str, name: str, limit: int, open_only: bool, as_json: bool) -> None:
    """List the missed windows of a schedule, newest first (backfill them to run them).

    \b
    Example:
      firesafe schedules missed myapp:app nightly_sync --open
    """
    app = _app(target)
    schedule = get(app, name)
    found = missed(app, name, limit, open_only)
    zone = schedule.cron.zone
    if as_json:
        echo_json([{"key": m.key, "start": at(m.start, zone).isoformat(), "end": at(m.end, zone).isoformat(),
                    "reason": m.reason, "recorded_at": at(m.recorded_at, UTC).isoformat(),
                    "backfilled_at": at(m.backfilled_at, UTC).isoformat() if m.backfilled_at else None}
                   for m in found])
        return
    out = console()
    if not found:
        out.print(data(f"no missed windows of {name}", style="dim"))
        return
    table = Table(title=data(f"missed windows of {name}"), title_justify="left", header_style="bold")
    for col in ("window", "reason", "backfilled"):
        table.add_column(col)
    for m in found:
        table.add_row(f"{_local(at(m.start, zone))} → {_local(at(m.end, zone))}", data(m.reason),
                      _local(at(m.backfilled_at, zone)) if m.backfilled_at else "-")
    out.print(table)
    out.print(data(f"`firesafe backfill {target} {name} --from ... --to ...` runs them", style="dim"))


def _pause_command(paused: bool) -> click.Command:
    verb = "pause" if paused else "resume"

    @click.argument("target", metavar="MODULE:APP")
    @click.argument("name", metavar="SCHEDULE")
    @actor_options
    @json_option
    def command(target: str, name: str, actor: str | None, reason: str | None, as_json: bool) -> None:
        from firesafe.deadletters.audit import actor_of, reason_of

        app = _app(target)
        schedule = get(app, name)
        before = next((s for s in app.store.schedule_state_list() if s.name == schedule.name), None)
        already = (before is not None and before.paused) if paused else not (before and before.paused)
        who, why = actor_of(actor), reason_of(reason)
        state = pause(app, name, paused, actor=who, reason=why)
        nxt = None if paused else schedule.cron.windows_ending(state.cursor, float("inf"), limit=1)
        due = at(nxt[0][1], schedule.cron.zone) if nxt else None
        if as_json:
            echo_json({"schedule": name, "paused": state.paused, "changed": not already,
                       "next_due": due.isoformat() if due else None, "actor": who, "reason": why})
            return
        if paused:
            click.echo(plain(f"{name} was already paused" if already else
                             f"paused {name}: its windows are not run until it is resumed"))
        else:
            when = f"; next window due {_local(due)}" if due else ""
            click.echo(plain(f"{name} was not paused{when}" if already else
                             f"resumed {name}{when} (windows that ended while paused are not run: backfill them)"))

    command.__doc__ = (f"{verb.capitalize()} a schedule.\n\n    Windows that end while a schedule is paused are "
                       "not run; resuming starts again from now. A schedule already paused (or not paused, "
                       "to resume) is left as it is, and the command says so. Who (--actor, else "
                       "$FIRESAFE_ACTOR, else user@host) and why (--reason) are recorded in the audit log "
                       "(`firesafe audit`).\n\n    \b\n    Example:\n"
                       f"      firesafe schedules {verb} myapp:app nightly_sync --reason \"maintenance\"\n    ")
    return schedules.command(verb)(command)


_pause_command(True)
_pause_command(False)


def _app(target: str) -> App:
    app = load_app(target)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(app.close)
    return app


# -- backfill ------------------------------------------------------------------------------------
@click.command()
@click.argument("target", metavar="MODULE:APP")
@click.argument("name", metavar="SCHEDULE")
@click.option("--from", "start", required=True, metavar="WHEN",
              help="First window start: a date (2026-11-01, local midnight in the schedule's time zone) or an "
                   "ISO datetime (no offset: the schedule's time zone).")
@click.option("--to", "end", required=True, metavar="WHEN",
              help="End of the range: a date covers that whole day; a datetime is excluded.")
@click.option("--dry-run", is_flag=True, help="List the windows that would be enqueued or re-run; change nothing.")
@click.option("--rerun", type=click.Choice(RERUN_POLICIES), default="none", show_default=True,
              help="Windows that already have a job: none (leave them), failed (re-run dead or cancelled "
                   "ones), all (re-run finished ones too).")
@click.option("--max-active", type=click.IntRange(1, 1_000_000), default=None, metavar="N",
              help="At most N windows of the schedule waiting or running at once (the backfill waits).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@actor_options
@json_option
def backfill(target: str, name: str, start: str, end: str, dry_run: bool, rerun: str, max_active: int | None,
             yes: bool, actor: str | None, reason: str | None, as_json: bool) -> None:
    """Enqueue the windows of SCHEDULE that start in a range; safe to run again.

    Each window is enqueued at most once (its key is SCHEDULE@START), so windows that already ran
    are skipped unless --rerun asks; windows that have not ended yet are left to the scheduler.

    \b
    Examples:
      firesafe backfill myapp:app nightly_sync --from 2026-11-01 --to 2026-11-30 --dry-run
      firesafe backfill myapp:app nightly_sync --from 2026-11-01 --to 2026-11-30 --rerun failed --yes
      firesafe backfill myapp:app hourly --from 2026-11-01T00:00 --to 2026-11-02T00:00 --max-active 4
    """
    app = _app(target)
    # the library reads the bounds (dates, datetimes, their zone) and names them as given in its errors
    preview = app.backfill(name, start, end, dry_run=True, rerun=rerun)
    todo = preview.enqueued + preview.rerun_count
    if dry_run:
        _report(preview, as_json)
        return
    if todo == 0:
        if as_json:
            echo_json(preview.as_dict() | {"dry_run": False})
        else:
            console().print(data(f"nothing to backfill: {_skips(preview)}"))
        return
    if not yes:
        confirm_bulk(f"backfill {name}: enqueue or re-run", todo, "window(s)")
    err = console(stderr=True)
    with Progress(TextColumn("{task.description}", style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=not err.is_terminal) as bar:
        task = bar.add_task(plain(f"backfill {name}"), total=preview.windows)
        watch = _WaitNotice(app, name, max_active, bar.console)

        def advance(done: int, total: int) -> None:
            watch.moved()
            bar.update(task, completed=done, total=total)

        with watch:
            result = app.backfill(name, start, end, rerun=rerun, max_active=max_active, progress=advance,
                                  actor=actor, reason=reason)
    _report(result, as_json)


#: How long a backfill may make no progress before it says why it waits, and how often it says so again.
WAIT_NOTICE_AFTER = 2.0
WAIT_NOTICE_EVERY = 30.0


class _WaitNotice:
    """While a backfill with --max-active waits for windows to finish, say so on stderr (once it has
    waited WAIT_NOTICE_AFTER seconds, then every WAIT_NOTICE_EVERY): a wait is the option's purpose,
    a silent one looks like a hang."""

    def __init__(self, app: App, name: str, max_active: int | None, out: Console) -> None:
        self.app, self.name, self.max_active, self.out = app, name, max_active, out
        self.last_move = time.monotonic()
        self.last_notice: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="firesafe-backfill-wait", daemon=True)

    def moved(self) -> None:
        self.last_move = time.monotonic()

    def __enter__(self) -> _WaitNotice:
        if self.max_active is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def _run(self) -> None:
        while not self.stop.wait(min(WAIT_NOTICE_AFTER, 1.0)):
            now = time.monotonic()
            if now - self.last_move < WAIT_NOTICE_AFTER:
                continue
            if self.last_notice is not None and now - self.last_notice < WAIT_NOTICE_EVERY:
                continue
            try:
                counts = self.app.store.schedule_job_counts(self.name)
            except Exception:  # a notice is not worth failing the backfill for
                continue
            active = sum(counts.get(s, 0) for s in ("queued", "scheduled", "running"))
            if self.max_active is not None and active >= self.max_active:
                self.last_notice = now
                self.out.print(data(f"waiting: {active} window(s) of {self.name} waiting or running >= --max-active "
                                    f"{self.max_active} (is a worker running?)", style="yellow"))


def _skips(r: BackfillResult) -> str:
    parts = [f"{r.windows} window(s) in range"]
    if r.succeeded:
        parts.append(f"{r.succeeded} succeeded already")
    if r.failed:
        parts.append(f"{r.failed} dead or cancelled (--rerun failed re-runs them)")
    if r.active:
        parts.append(f"{r.active} waiting or running")
    if r.conflicts:
        parts.append(f"{r.conflicts} stored with other bounds (the expression changed; kept as stored)")
    if r.not_due:
        parts.append(f"{r.not_due} not ended yet (left to the scheduler)")
    return ", ".join(parts)


def _report(r: BackfillResult, as_json: bool) -> None:
    if as_json:
        echo_json(r.as_dict())
        return
    out = console()
    span = f"{r.start.isoformat()} to {r.end.isoformat()}"
    if r.dry_run:
        out.print(data(f"dry run: backfill {r.schedule} from {span}: {r.enqueued} window(s) would be enqueued, "
                       f"{r.rerun_count} re-run; nothing changed"))
        out.print(data(_skips(r), style="dim"))
        for key in r.keys[:50]:
            out.print(data(f"  {key}"))
        if len(r.keys) > 50:
            out.print(f"  ... and {len(r.keys) - 50} more (--json lists them all)")
        return
    out.print(data(f"backfill {r.schedule} from {span}: enqueued {r.enqueued} window(s), re-ran {r.rerun_count}"))
    out.print(data(_skips(r), style="dim"))
    if r.conflict_keys:
        rest = f" and {r.conflicts - 10} more" if r.conflicts > 10 else ""
        out.print(data(f"kept as stored, with other bounds: {', '.join(r.conflict_keys[:10])}{rest}", style="yellow"))
