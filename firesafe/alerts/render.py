"""What an alert says: the document every sink receives, and its text and Slack forms.

Pure functions of the grouped events and the jobs they concern (loaded by the caller). The
document carries the trace: for each job shown, every attempt with its times, outcome, error type,
message and a bounded traceback, the steps it completed, and the exact ``firesafe show KEY``
command. Arguments, messages and tracebacks go through :mod:`firesafe.masking` (invariant 9).
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from firesafe.alerts.grouping import KINDS, fmt_count, title
from firesafe.alerts.store import OutboxEvent
from firesafe.masking import mask, mask_text
from firesafe.models import Job

VERSION = 1
#: Jobs whose whole trace an alert carries at least (the others are counted and their keys listed),
#: when the alert counts so many...
MAX_JOBS = 3
#: ... and at most: one sample job per error group the alert counts, up to this many.
MAX_SAMPLES = 10
#: Keys listed by one alert.
MAX_KEYS = 50
#: Attempts shown per job: the first and the last ones when a job has more.
MAX_ATTEMPTS = 50
#: Characters of traceback kept: for the last attempt of a job, and for each earlier one (the end
#: of a traceback is kept: it names the error).
TRACEBACK_LAST = 4000
TRACEBACK_EARLIER = 1500
#: Other events' details listed by one alert (stuck queues, missed windows, ...).
MAX_DETAILS = 20


def iso(ts: float | None) -> str | None:
    """Seconds since the epoch as ISO 8601 in UTC.

    >>> iso(0.0)
    '1970-01-01T00:00:00+00:00'
    """
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def show_command(key: str) -> str:
    """The command that shows a job's whole timeline, quoted for a shell.

    >>> show_command("refund:o-1"), show_command("a key")
    ('firesafe show refund:o-1', "firesafe show 'a key'")
    """
    return f"firesafe show {shlex.quote(key)}"


def bound(text: str | None, limit: int) -> str | None:
    """Keep the end of a long text (where a traceback names the error).

    >>> bound("x" * 10, 4)
    '...(cut 6 chars)...\\nxxxx'
    """
    if text is None or len(text) <= limit:
        return text
    return f"...(cut {len(text) - limit} chars)...\n{text[-limit:]}"


def attempt_view(a: Any, last: bool) -> dict[str, Any]:
    started = a.started_at.timestamp() if a.started_at else None
    ended = a.ended_at.timestamp() if a.ended_at else None
    return {
        "seq": a.seq,
        "attempt": a.attempt,
        "worker": a.worker,
        "started_at": iso(started),
        "ended_at": iso(ended),
        "duration": round(ended - started, 6) if started is not None and ended is not None else None,
        "outcome": a.outcome,
        "error_type": a.error_type,
        "message": mask_text(a.message) if a.message else a.message,
        "traceback": bound(mask_text(a.traceback), TRACEBACK_LAST if last else TRACEBACK_EARLIER)
        if a.traceback else None,
    }


def tally(attempts: int, waits: Mapping[str, Any] | None) -> str:
    """A job's attempts and waits in one phrase.

    >>> tally(6, {"count": 7, "seconds": 12.4}), tally(1, {"count": 0, "seconds": 0.0})
    ('6 attempts, 7 waits (12.4 s)', '1 attempt')
    """
    text = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    w = waits or {}
    n = int(w.get("count") or 0)
    if n:
        text += f", {n} wait{'s' if n != 1 else ''} ({float(w['seconds']):.3g} s)"
    return text


def job_view(job: Job, steps: Sequence[Any] = (), dashboard: str | None = None) -> dict[str, Any]:
    """One job of an alert: its state, masked arguments, every attempt (waits apart: how many, how
    long) and the steps it completed."""
    trace = job.attempts  # waits apart: Job.waits(), the one reckoning `firesafe show` and the dashboard use
    attempts = len(trace)
    waits = job.waits()
    omitted = 0
    if len(trace) > MAX_ATTEMPTS:
        head = MAX_ATTEMPTS // 5
        omitted = len(trace) - MAX_ATTEMPTS
        trace = trace[:head] + trace[-(MAX_ATTEMPTS - head):]
    view = {
        "key": job.key,
        "name": job.name,
        "queue": job.queue,
        "state": str(job.state),
        "reason": job.reason,
        "error": mask_text(job.last_error) if job.last_error else None,
        "arguments": job.masked_arguments(),
        "attempts": [attempt_view(a, i == len(trace) - 1) for i, a in enumerate(trace)],
        "attempt_count": attempts,
        "waits": {"count": waits.count, "seconds": round(waits.seconds, 3)},
        "steps": [{"name": s.name, "position": s.position, "recorded_at": iso(s.recorded_at)} for s in steps],
        "show": show_command(job.key),
    }
    if dashboard:
        view["dashboard"] = f"{dashboard}/job?key={quote(job.key, safe='')}"
    if omitted:
        view["attempts_omitted"] = omitted
    return view


def sample_keys(events: Sequence[OutboxEvent]) -> list[str]:
    """The keys of the jobs an alert carries the trace of: at least one per error group it counts
    (the error type of each event's job), most common group first, then taken in turn from each
    group; :data:`MAX_JOBS` of them, or one per group up to :data:`MAX_SAMPLES`.

    >>> def ev(i, error):
    ...     return OutboxEvent(i, "dead_letter", "critical", "sync", i, [f"k{i}"], {"error_type": error}, float(i))
    >>> sample_keys([ev(1, "KeyError"), ev(2, "OSError"), ev(3, "KeyError")] + [ev(i, "HTTPStatusError")
    ...                                                                          for i in range(4, 11)])
    ['k4', 'k1', 'k2']
    >>> sample_keys([ev(i, "KeyError") for i in range(5)])
    ['k0', 'k1', 'k2']
    """
    groups: dict[str, list[str]] = {}
    seen: set[str] = set()
    for e in events:
        group = groups.setdefault(str(e.payload.get("error_type") or "-"), [])
        for k in e.keys:
            if k not in seen:
                seen.add(k)
                group.append(k)
    ordered = sorted(groups.values(), key=len, reverse=True)  # stable: first seen first among equals
    limit = min(MAX_SAMPLES, max(MAX_JOBS, len(ordered)))
    keys: list[str] = []
    for depth in range(limit):
        for group in ordered:
            if depth < len(group) and len(keys) < limit:
                keys.append(group[depth])
        if len(keys) >= limit:
            break
    return keys


def stuck_why(events: Sequence[OutboxEvent]) -> str:
    """Why the queues of a stuck-queue alert are stuck, for its title.

    >>> def ev(reason, age):
    ...     return OutboxEvent(1, "queue_stuck", "critical", None, None, [], {"reason": reason,
    ...                        "oldest_waiting_seconds": age}, 0.0)
    >>> stuck_why([ev("no_worker", 95.0)]), stuck_why([ev("too_old", 960.0), ev("too_old", 1200.0)])
    ('no live worker', 'oldest job waiting 20 min')
    """
    reasons = {e.payload.get("reason") for e in events}
    if reasons == {"no_worker"}:
        return "no live worker"
    age = max((float(e.payload.get("oldest_waiting_seconds") or 0.0) for e in events), default=0.0)
    waited = f"{age / 60:.0f} min" if age >= 120 else f"{age:.0f} s"
    if reasons == {"too_old"}:
        return f"oldest job waiting {waited}"
    return f"no live worker, or jobs waiting up to {waited}" if reasons else ""


def build(kind: str, job_name: str | None, severity: str, events: Sequence[OutboxEvent], jobs: Sequence[Job],
          steps: Mapping[str, Sequence[Any]] | None = None, dashboard: str | None = None) -> dict[str, Any]:
    """The document of one alert grouped from ``events``; ``jobs`` are the jobs whose trace it
    carries (at most :data:`MAX_JOBS`, loaded with their trace), ``steps`` their steps by key,
    ``dashboard`` the dashboard's base URL (each job then links to its page)."""
    count = len(events)
    keys: list[str] = []
    seen: set[str] = set()
    for e in events:
        for k in e.keys:
            if k not in seen:
                seen.add(k)
                keys.append(k)
    spec = KINDS.get(kind)
    queues = [str(e.payload["queue"]) for e in events if e.payload.get("queue")] if kind.startswith("queue_") else []
    why = stuck_why(events) if kind == "queue_stuck" else ""
    doc: dict[str, Any] = {
        "version": VERSION,
        "kind": kind,
        "status": spec.status if spec else "firing",
        "severity": severity,
        "title": title(kind, job_name, count, queues, why),
        "job_name": job_name,
        "count": count,
        "count_text": fmt_count(count),
        "first_at": iso(min((e.created_at for e in events), default=None)),
        "last_at": iso(max((e.created_at for e in events), default=None)),
        "keys": keys[:MAX_KEYS],
        "keys_omitted": max(0, len(keys) - MAX_KEYS),
    }
    if kind == "dead_letter":
        doc["summary"] = {
            "errors": dict(Counter(e.payload.get("error_type") or "-" for e in events).most_common()),
            "reasons": dict(Counter(e.payload.get("reason") or "-" for e in events).most_common()),
        }
    else:
        doc["details"] = [mask(e.payload) for e in events[:MAX_DETAILS]]
    if queues:
        doc["queues"] = list(dict.fromkeys(queues))
    shown = [job_view(j, (steps or {}).get(j.key, ()), dashboard) for j in jobs[:MAX_SAMPLES]]
    doc["jobs"] = shown
    doc["jobs_omitted"] = max(0, len(keys) - len(shown))
    commands = [j["show"] for j in shown]
    if kind == "dead_letter" and job_name:
        commands += [f"firesafe dlq ls --job {shlex.quote(job_name)}",
                     f"firesafe dlq replay --job {shlex.quote(job_name)} --dry-run"]
    doc["commands"] = commands
    if dashboard:
        doc["dashboard"] = f"{dashboard}/alerts"
    return doc


# -- forms ---------------------------------------------------------------------------------------
def subject(doc: Mapping[str, Any]) -> str:
    """A one-line subject: ``[firesafe] CRITICAL dead_letter: 1,000 job(s) of refund dead-lettered``."""
    status = doc.get("status")
    label = "RESOLVED" if status == "resolved" else str(doc.get("severity", "info")).upper()
    return f"[firesafe] {label} {doc.get('kind')}: {doc.get('title')}"


def to_text(doc: Mapping[str, Any], *, tracebacks: bool = True) -> str:
    """The alert as plain text (logs, email)."""
    lines = [subject(doc), ""]
    lines.append(f"count: {doc.get('count_text', doc.get('count'))}   job: {doc.get('job_name') or '-'}   "
                 f"between {doc.get('first_at')} and {doc.get('last_at')}")
    summary = doc.get("summary") or {}
    for label, counts in (("errors", summary.get("errors")), ("reasons", summary.get("reasons"))):
        if counts:
            lines.append(f"{label}: " + ", ".join(f"{k} x{fmt_count(v)}" for k, v in counts.items()))
    for d in doc.get("details") or []:
        lines.append("detail: " + ", ".join(f"{k}={v}" for k, v in d.items()))
    keys = doc.get("keys") or []
    if keys:
        more = f" (and {fmt_count(doc['keys_omitted'])} more)" if doc.get("keys_omitted") else ""
        lines.append("keys: " + ", ".join(keys) + more)
    for job in doc.get("jobs") or []:
        lines += ["", f"{job['key']} ({job['state']}{', ' + job['reason'] if job.get('reason') else ''})   "
                      f"{job['show']}",
                  f"  arguments: {job['arguments']}"]
        if job.get("dashboard"):
            lines.append(f"  {job['dashboard']}")
        lines.append(f"  {tally(job.get('attempt_count', len(job['attempts'])), job.get('waits'))}")
        if job.get("attempts_omitted"):
            lines.append(f"  ({job['attempts_omitted']} attempts in the middle not shown)")
        for a in job["attempts"]:
            error = f"  {a['error_type']}: {a['message']}" if a.get("error_type") else ""
            took = f" ({a['duration']:.3f}s)" if a.get("duration") is not None else ""
            lines.append(f"  #{a['seq']} attempt {a['attempt']}  {a['started_at']} -> {a['ended_at']}{took}  "
                         f"{a['outcome']}{error}")
            if tracebacks and a.get("traceback"):
                lines += ["      " + t for t in a["traceback"].rstrip().splitlines()]
        if job.get("steps"):
            lines.append("  steps done: " + ", ".join(s["name"] for s in job["steps"]))
    if doc.get("jobs_omitted"):
        lines.append(f"\n... and {fmt_count(doc['jobs_omitted'])} more job(s): firesafe jobs --job "
                     f"{shlex.quote(str(doc.get('job_name') or ''))}")
    if doc.get("commands"):
        lines += ["", "commands:"] + [f"  {c}" for c in doc["commands"]]
    return "\n".join(lines)


#: Slack's limit on one section's text.
SLACK_SECTION = 2900
#: What :func:`slack_escape` replaces: Slack's three control characters, and the backtick.
_SLACK_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "`": "\u02cb"})


def slack_escape(value: object) -> str:
    """A data value as Slack mrkdwn shows it, and nothing more: ``&``, ``<`` and ``>`` written as
    the entities Slack decodes (so no ``<!channel>``, ``<@U123>`` or ``<http://...|text>`` comes
    from data), and each backtick as U+02CB (modifier letter grave accent, which looks like one), so
    data can neither end the code span or block it is shown in nor open one. Every value a Slack
    message shows passes through here.

    >>> print(ascii(slack_escape("x`<!channel>` & <http://evil.example|docs>")))
    'x\\u02cb&lt;!channel&gt;\\u02cb &amp; &lt;http://evil.example|docs&gt;'
    """
    return str(value).translate(_SLACK_ESCAPES)


def _slack_tail(text: str, limit: int) -> str:
    """The end of escaped text, as :func:`bound` keeps it, never starting inside an entity.

    >>> _slack_tail("a&amp;b", 5)
    '...(cut 6 chars)...\\nb'
    """
    if len(text) <= limit:
        return text
    start = len(text) - limit
    amp = text.rfind("&", max(0, start - 4), start)
    if amp != -1 and ";" not in text[amp:start]:
        start = text.index(";", start) + 1
    return f"...(cut {start} chars)...\n{text[start:]}"


def to_slack(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The alert in Slack's incoming-webhook format (``text`` plus Block Kit ``blocks``). Every
    value from the alert goes through :func:`slack_escape`; the header block is ``plain_text``,
    which Slack does not parse."""
    e = slack_escape
    head = subject(doc)
    fields = [f"*Kind:* {e(doc.get('kind'))}", f"*Severity:* {e(doc.get('severity'))}",
              f"*Job:* {e(doc.get('job_name') or '-')}", f"*Count:* {e(doc.get('count_text', doc.get('count')))}"]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": head[:150]}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in fields]},
    ]
    summary = doc.get("summary") or {}
    if summary.get("errors"):
        errors = ", ".join(f"`{e(k)}` x{fmt_count(v)}" for k, v in summary["errors"].items())
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"*Errors:* {errors}"[:SLACK_SECTION]}})
    for job in (doc.get("jobs") or [])[:MAX_SAMPLES]:
        lines = [f"{e(job['key'])} ({e(job['state'])}): "
                 f"{e(tally(job.get('attempt_count', len(job['attempts'])), job.get('waits')))}"]
        for a in job["attempts"]:
            error = f" {e(a['error_type'])}: {e(a['message'])}" if a.get("error_type") else ""
            lines.append(f"#{e(a['seq'])} {e(a['started_at'])} {e(a['outcome'])}{error}")
        last = next((a["traceback"] for a in reversed(job["attempts"]) if a.get("traceback")), None)
        if last:
            lines += ["", e(last)]
        body = _slack_tail("\n".join(lines), SLACK_SECTION - 40)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{body}```"}})
        link = f"  <{e(job['dashboard'])}|open in the dashboard>" if job.get("dashboard") else ""
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"`{e(job['show'])}`{link}"}]})
    if doc.get("jobs_omitted"):
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": f"and {fmt_count(doc['jobs_omitted'])} more job(s)"}]})
    return {"text": e(head), "blocks": blocks}
