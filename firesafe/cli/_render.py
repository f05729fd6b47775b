"""Human views of jobs: the timeline of one job, tables of many, counts. Secrets are always masked,
and every value that came from the store is shown through ``data``/``plain`` (never read as markup,
no control sequence reaches the terminal)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from firesafe.cli._common import data, plain
from firesafe.clock import to_datetime
from firesafe.masking import mask, mask_text
from firesafe.models import Attempt, Job, Waits
from firesafe.sanitize import safe_str
from firesafe.signals import SignalRecord
from firesafe.states import State

STATE_STYLE = {
    "queued": "cyan",
    "scheduled": "blue",
    "running": "yellow",
    "succeeded": "green",
    "dead": "bold red",
    "cancelled": "magenta",
}
OUTCOME_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "timed_out": "red",
    "lost": "red",
    "interrupted": "yellow",
    "deferred": "blue",
    "cancelled": "magenta",
    None: "yellow",
}
#: Lines of each stored traceback shown unless ``--traceback`` asks for all of them.
TRACEBACK_LINES = 12
#: Waits listed one by one in ``show`` (the newest); the count and the total cover them all.
WAITS_SHOWN = 20


def masked_job_dict(job: Job, *, with_trace: bool = True) -> dict[str, Any]:
    """``Job.as_dict()`` with free text (errors, tracebacks) and results masked as well."""
    d = job.as_dict(with_trace=with_trace)
    d["result"] = mask(d["result"])
    if d.get("error_message"):
        d["error_message"] = mask_text(d["error_message"])
    if d.get("last_error") and d["last_error"].get("message"):
        d["last_error"]["message"] = mask_text(d["last_error"]["message"])
    entries = [*d.get("trace", []), *d.get("attempts", []), *d.get("waits", {}).get("items", [])]
    for a in entries:
        for field in ("message", "traceback"):
            if a.get(field):
                a[field] = mask_text(a[field])
        a["detail"] = mask(a["detail"])
    for e in d.get("events", []):
        e["detail"] = mask(e["detail"])
    return d


def when(value: datetime | None, ms: bool = True) -> str:
    """A UTC time (to the millisecond unless ``ms`` is False), or '-'."""
    if value is None:
        return "-"
    if not ms:
        return value.strftime("%Y-%m-%d %H:%M:%SZ")
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def state_text(state: State | str) -> Text:
    return data(state, style=STATE_STYLE.get(str(state), ""))


def to_json(value: Any) -> str:
    """A value on one line, for a cell (then shown through ``data``)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=safe_str)


def duration_of(a: Attempt) -> str:
    seconds = a.detail.get("duration") if isinstance(a.detail, dict) else None
    if not isinstance(seconds, (int, float)) and a.started_at and a.ended_at:
        seconds = (a.ended_at - a.started_at).total_seconds()
    if not isinstance(seconds, (int, float)):
        return "-"
    return seconds_text(seconds)


def seconds_text(seconds: float) -> str:
    """A duration as people read it.

    >>> seconds_text(0.0004), seconds_text(0.25), seconds_text(12.345)
    ('400µs', '250.0ms', '12.35s')
    """
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f}µs"
    return f"{seconds * 1000:.1f}ms" if seconds < 1 else f"{seconds:.2f}s"


def last_error_text(job: Job, width: int | None = None) -> Text:
    """A job's last error as lists and ``show`` print it: the last failed attempt's error (red);
    for a job that recovered, ``succeeded after N failed attempts`` (green)."""
    if job.recovery:
        return Text(job.recovery, style="green")
    failure = job.last_failure
    return error_of(*failure, width=width) if failure else Text("")


def error_of(error_type: str | None, message: str | None, width: int | None = None) -> Text:
    if not error_type:
        return Text("")
    text = plain(f"{error_type}: {mask_text(message or '')}".rstrip(": "))
    if width and len(text) > width:
        text = text[: width - 1] + "…"
    return Text(text, style="red")


def bounded(tb: str, full: bool) -> tuple[str, int]:
    """The last lines of a traceback (all of them with ``full``) and how many were left out."""
    lines = tb.rstrip("\n").splitlines()
    if full or len(lines) <= TRACEBACK_LINES:
        return "\n".join(lines), 0
    return "\n".join(lines[-TRACEBACK_LINES:]), len(lines) - TRACEBACK_LINES


def steps_of(a: Any) -> str:
    """Which steps an attempt ran, restored or failed: ``charge restored, email ran``."""
    steps = a.detail.get("steps", []) if isinstance(a.detail, dict) else []
    return ", ".join(f"{s.get('name')} {s.get('status')}" for s in steps if isinstance(s, dict))


def render_pruned(out: Console, head: Table, job: Job) -> None:
    """What is left of a job whose history was pruned: the record that keeps its key reserved."""
    head.add_row("job", data(job.name))
    head.add_row("state", state_text(job.state))
    if job.result_digest is not None:
        head.add_row("result", Text(f"too long to keep; its SHA-256: {job.result_digest}", style="dim"))
    elif job.state == State.SUCCEEDED:
        head.add_row("result", data(to_json(mask(job.result))))
    head.add_row("finished", Text(when(job.finished_at)))
    head.add_row("history", Text("pruned: its arguments, attempts and events are gone; the key stays reserved "
                                 "(Retention.keys) and a duplicate enqueue returns this outcome", style="dim"))
    out.print(Panel(head, title=data(f"job {job.key}"), title_align="left", expand=False))


def _family_rows(head: Table, family: dict[str, Any]) -> None:
    """The parent and children rows of a job's panel, each key one ``firesafe show KEY`` away."""
    parent = family.get("parent")
    if parent is not None:
        if parent.get("gone"):
            head.add_row("parent", Text(f"job #{parent['id']} (no longer stored)", style="dim"))
        else:
            line = data(parent["key"])
            line.append("  ")
            line.append_text(state_text(parent["state"]))
            head.add_row("parent", line)
    kids = family.get("children") or {}
    if kids.get("total"):
        counts = ", ".join(f"{n} {s}" for s, n in kids["by_state"].items())
        head.add_row("children", Text(f"{kids['total']}: {counts}  (not ended: {kids['pending']})"))
        for state, keys in kids["keys"].items():
            more = kids["by_state"][state] - len(keys)
            line = data(", ".join(keys))
            if more > 0:
                line.append(f" and {more} more", style="dim")
            head.add_row(f"  {state}", line)


def render_job(out: Console, job: Job, *, full_tracebacks: bool = False,
               family: dict[str, Any] | None = None) -> None:
    """The whole story of one job: what it is, its parent and children (``family``: see
    firesafe/steps/children.py), each attempt, and what was done to it."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column(overflow="fold")
    head.add_row("key", data(job.key))
    if job.pruned:
        render_pruned(out, head, job)
        return
    priority = f", priority {job.priority}" if job.priority else ""
    head.add_row("job", data(f"{job.name}  (queue {job.queue}{priority})"))
    state = state_text(job.state)
    if job.reason:
        state.append(f"  reason: {plain(job.reason)}", style="")
    if job.cancel_requested and job.state == State.RUNNING:
        state.append("  (cancel requested)", style="magenta")
    head.add_row("state", state)
    attempts, waits = job.attempts, job.waits()
    head.add_row("attempts", Text(f"{job.attempt}/{job.max_attempts} used  (runs {job.runs}, "
                                  f"waits {waits.count}, lost {job.lost})"))
    if waits.count:
        head.add_row("waits", Text(f"{waits.count}, {seconds_text(waits.seconds)} in all  (not attempts: "
                                   "a limiter held the job back, it waited for its children, or it asked to wait with "
                                   "RetryAfter)"))
    head.add_row("arguments", data(to_json(job.masked_arguments())))
    if job.state == State.SUCCEEDED:
        head.add_row("result", data(to_json(mask(job.result))))
    failure = job.last_failure
    if job.recovery:
        note = Text(job.recovery, style="green")
        if failure:
            note.append(f"  (the last: {plain(failure[0])})", style="dim")
        head.add_row("recovered", note)
    elif failure:
        head.add_row("last error", error_of(*failure))
    head.add_row("created", Text(when(job.created_at)))
    if job.state in (State.QUEUED, State.SCHEDULED):
        head.add_row("runs at", Text(when(job.run_at)))
    if job.state == State.RUNNING and job.worker:
        head.add_row("worker", data(job.worker))
    head.add_row("updated", Text(when(job.updated_at)))
    if job.finished_at:
        head.add_row("finished", Text(when(job.finished_at)))
    if family is not None:
        _family_rows(head, family)
    out.print(Panel(head, title=data(f"job {job.key}"), title_align="left", expand=False))

    if attempts:
        table = Table(title="attempts", title_justify="left", show_lines=False)
        for name in ("#", "attempt", "worker", "started", "ended", "duration", "outcome"):
            table.add_column(name, no_wrap=name in ("#", "attempt", "duration", "outcome"), overflow="fold")
        table.add_column("error", overflow="fold")
        with_steps = any(isinstance(a.detail, dict) and a.detail.get("steps") for a in attempts)
        if with_steps:
            table.add_column("steps", overflow="fold")
        for a in attempts:
            row: list[str | Text] = [
                str(a.seq), str(a.attempt), data(a.worker or "-"), when(a.started_at), when(a.ended_at),
                duration_of(a), data(a.outcome or "running", style=OUTCOME_STYLE.get(a.outcome, "")),
                error_of(a.error_type, a.message)]
            if with_steps:
                row.append(data(steps_of(a)))
            table.add_row(*row)
        out.print(table)
        shown: dict[str, int] = {}
        for a in attempts:
            if not a.traceback:
                continue
            if a.traceback in shown:
                out.print(Text(f"run #{a.seq}: the same traceback as run #{shown[a.traceback]}", style="dim"))
                continue
            shown[a.traceback] = a.seq
            text, cut = bounded(mask_text(a.traceback), full_tracebacks)
            body = data(text)
            if cut:
                body = Text.assemble((f"... {cut} earlier line(s); --traceback shows them\n", "dim"), body)
            out.print(Panel(body, title=Text(f"traceback of run #{a.seq} (attempt {a.attempt})"),
                            title_align="left", border_style="red", expand=False))
    else:
        out.print(Text("no attempts yet", style="dim"))
    if waits.count:
        out.print(waits_table(waits))

    if job.events:
        events = Table(title="events", title_justify="left")
        for name in ("at", "event", "by", "why", "detail"):
            events.add_column(name, overflow="fold")
        for e in job.events:
            why = e.detail.get("reason") if isinstance(e.detail, dict) else None
            rest = {k: v for k, v in e.detail.items() if k != "reason"} if isinstance(e.detail, dict) else e.detail
            events.add_row(when(e.at), data(e.kind), data(e.actor or "-"),
                           data(mask_text(why) if isinstance(why, str) else "-"),
                           data(to_json(mask(rest)) if rest else ""))
        out.print(events)


def signal_dict(s: SignalRecord) -> dict[str, Any]:
    """A signal sent to a job, for --json: its data masked as a job's result is."""
    return {"name": s.name, "data": mask(s.value()), "actor": s.actor, "reason": s.reason,
            "sent_at": to_datetime(s.sent_at).isoformat()}


def signals_table(signals: Sequence[SignalRecord]) -> Table:
    """The signals sent to a job (``firesafe signal``, ``app.signal``, the dashboard)."""
    table = Table(title="signals", title_justify="left")
    for name in ("sent at", "signal", "by", "why", "data"):
        table.add_column(name, overflow="fold")
    for s in signals:
        table.add_row(when(to_datetime(s.sent_at)), data(s.name), data(s.actor),
                      data(mask_text(s.reason) if s.reason else "-"), data(to_json(mask(s.value()))))
    return table


def waits_table(waits: Waits) -> Table:
    """A job's waits (the newest :data:`WAITS_SHOWN`), apart from its attempts."""
    title = f"waits: {waits.count}, {seconds_text(waits.seconds)} in all"
    if waits.count > WAITS_SHOWN:
        title += f"  (the last {WAITS_SHOWN} shown)"
    table = Table(title=title, title_justify="left")
    for name in ("#", "at", "waited", "held back by"):
        table.add_column(name, no_wrap=True)
    table.add_column("message", overflow="fold")
    for w in waits.items[-WAITS_SHOWN:]:
        a = w.entry
        message = plain(mask_text(a.message or "")) if a.message else ""
        if a.error_type and a.error_type not in ("RetryAfter",):
            message = f"{plain(a.error_type)}: {message}".rstrip(": ")
        table.add_row(str(a.seq), when(a.ended_at), seconds_text(w.seconds),
                      Text(plain(w.describe()), style=OUTCOME_STYLE["deferred"]), Text(message, style="dim"))
    return table


def jobs_table(jobs: Sequence[Job], title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("key", overflow="fold")
    table.add_column("job")
    table.add_column("queue")
    table.add_column("state")
    table.add_column("attempts", justify="right", no_wrap=True)
    table.add_column("updated")
    table.add_column("last error", overflow="fold")
    for j in jobs:
        table.add_row(data(j.key), data(j.name), data(j.queue), state_text(j.state), f"{j.attempt}/{j.max_attempts}",
                      when(j.updated_at, ms=False), last_error_text(j, width=80))
    return table


def dead_table(jobs: Sequence[Job], title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("key", overflow="fold")
    table.add_column("job")
    table.add_column("queue")
    table.add_column("reason")
    table.add_column("attempts", justify="right", no_wrap=True)
    table.add_column("died")
    table.add_column("error", overflow="fold")
    for j in jobs:
        table.add_row(data(j.key), data(j.name), data(j.queue), data(j.reason or "-"), f"{j.attempt}/{j.max_attempts}",
                      when(j.finished_at or j.updated_at, ms=False), last_error_text(j, width=80))
    return table


def stats_data(rows: Iterable[tuple[str, str, int]]) -> dict[str, Any]:
    """``{"queues": {queue: {state: n}}, "totals": {state: n}, "total": n}`` with every state present."""
    queues: dict[str, dict[str, int]] = {}
    totals = {str(s): 0 for s in State}
    for queue, state, n in rows:
        queues.setdefault(queue, {str(s): 0 for s in State})[state] = n
        totals[state] = totals.get(state, 0) + n
    return {"queues": queues, "totals": totals, "total": sum(totals.values())}


def stats_table(stats: dict[str, Any]) -> Group | Text:
    if not stats["queues"]:
        return Text("no jobs in the store", style="dim")
    table = Table(show_footer=True)
    table.add_column("queue", footer="total")
    for s in State:
        table.add_column(Text(str(s), style=STATE_STYLE[str(s)]), justify="right",
                         footer=str(stats["totals"][str(s)]))
    table.add_column("total", justify="right", footer=str(stats["total"]))
    for queue, counts in sorted(stats["queues"].items()):
        table.add_row(data(queue), *(str(counts[str(s)]) for s in State), str(sum(counts.values())))
    return Group(table)
