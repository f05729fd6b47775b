"""The dashboard as a Starlette application: pages, actions, ``/metrics`` and ``/healthz``.

Guarantees: every request to a guarded path passes :class:`Guard` (token, loopback ``Host``, same
origin and a CSRF token for anything but GET/HEAD); every response carries a Content-Security-Policy
that allows scripts only from this server's static files; every user-controlled value is escaped by
the templates (autoescape, nothing marked safe); replays and discards go through ``app.dlq`` with the
dashboard user as the actor, so each is recorded in the job's events.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qs, quote

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from firesafe.clock import to_datetime
from firesafe.dashboard import charts, parts
from firesafe.dashboard.params import MAX_SELECTION, PAGE_SIZES, STATES, JobQuery
from firesafe.dashboard.security import (
    Token,
    UserHeader,
    actor_for,
    check_public,
    csrf_token,
    csrf_valid,
    host_name,
    is_loopback,
    match_token,
    new_session,
    parse_token,
    same_origin,
)
from firesafe.errors import FiresafeError, InvalidInput, JobNotFound, StoreError
from firesafe.idempotency.keys import check_key, check_name
from firesafe.masking import mask, mask_text, redact_url
from firesafe.sanitize import for_log
from firesafe.signals.signals import WAIT_PREFIX
from firesafe.states import State
from firesafe.steps.children import family
from firesafe.store import check_schema
from firesafe.store.base import DeadFilter, JobFilter
from firesafe.store.queries import latest_version

log = logging.getLogger("firesafe.dashboard")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
COOKIE = "firesafe_csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Largest form body accepted (a selection of MAX_SELECTION keys fits).
MAX_BODY = 1024 * 1024
#: The longest note an approve / reject form sends with its signal, in characters.
MAX_NOTE = 2000
#: Minutes shown by the throughput and failure-rate charts, one bucket per minute.
CHART_MINUTES = 60
TRACE_LIMIT = 200  # attempts shown on a job page (the newest)
WAITS_SHOWN = 50  # waits listed on a job page (the newest); their count and total cover them all


# -- the guard ---------------------------------------------------------------------------------
class Guard:
    """ASGI middleware in front of every dashboard path (paths under ``public_prefixes`` excepted).

    In order: loopback ``Host`` when there is no token (no DNS rebinding); the token when there is
    one (401 otherwise); for POST and other unsafe methods, a same-origin request (``Sec-Fetch-Site``
    and ``Origin``, which must be ``public_origin`` when the operator stated one) with a form body
    whose ``csrf`` field matches the browser's cookie (403 otherwise, and the request never reaches
    a handler). Every response gets the security headers; the CSRF cookie is ``Secure`` when the
    request came over https or the public origin is https.
    """

    def __init__(self, inner: Any, token: Token | Sequence[Token] | None, key: bytes, public_prefixes: list[str],
                 public_origin: str | None = None, user_header: UserHeader | None = None) -> None:
        self.inner = inner
        self.token = token or None  # one token, several (one per person), or none
        self.user_header = user_header
        self.key = key
        self.public_prefixes = public_prefixes
        self.public_origin = public_origin

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        path, root = scope.get("path", ""), scope.get("root_path", "")
        if root and path.startswith(root):  # mounted under a prefix: prefixes are relative to it
            path = path[len(root):]
        if any(path.startswith(p) for p in self.public_prefixes):
            await self.inner(scope, receive, self._headers(send, None, scope))
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if self.token is None and not is_loopback(host_name(host)):
            await _plain(403, "this dashboard has no token, so it answers only to loopback names "
                              "(127.0.0.1, localhost); start it with --token to serve other names")(
                scope, receive, self._headers(send, None, scope))
            return
        matched = match_token(headers.get("authorization"), self.token) if self.token is not None else None
        if self.token is not None and matched is None:
            response = _plain(401, "authentication required: the dashboard token as a bearer token, "
                                   "or as the password of basic auth")
            response.headers["www-authenticate"] = 'Basic realm="firesafe dashboard", charset="UTF-8"'
            await response(scope, receive, self._headers(send, None, scope))
            return
        session = _cookie(headers.get("cookie"), COOKIE)
        new = None
        if not session:
            session = new = new_session()
        state = scope.setdefault("state", {})
        state["token"] = matched  # who the token names (several tokens: one per person)
        client = scope.get("client")
        state["user"] = (self.user_header.user(headers.get(self.user_header.name), client[0] if client else None)
                         if self.user_header is not None else None)  # named by a trusted proxy
        state["session"] = session
        state["csrf"] = csrf_token(self.key, session)
        if scope["method"] not in SAFE_METHODS:
            problem, body = await self._check_unsafe(scope, receive, headers, session if not new else None)
            if problem:
                await _plain(403, problem)(scope, receive, self._headers(send, new, scope))
                return
            state["form"] = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
            receive = _replay(body)
        await self.inner(scope, receive, self._headers(send, new, scope))

    async def _check_unsafe(self, scope: Scope, receive: Receive, headers: Headers,
                            session: str | None) -> tuple[str | None, bytes]:
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return f"cross-site request refused (Sec-Fetch-Site: {site}); nothing changed", b""
        scheme = scope.get("scheme", "http")
        if not same_origin(headers.get("origin"), scheme, headers.get("host", ""), self.public_origin):
            return "cross-origin request refused (Origin does not match); nothing changed", b""
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/x-www-form-urlencoded":
            return "actions take an HTML form (application/x-www-form-urlencoded); nothing changed", b""
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > MAX_BODY:
                return "the form is too large; nothing changed", b""
            if not message.get("more_body"):
                break
        given = parse_qs(body.decode("utf-8", "replace")).get("csrf", [None])[0]
        if not csrf_valid(self.key, session, given):
            return ("missing or invalid CSRF token (reload the page and try again); nothing changed", b"")
        return None, body

    def _headers(self, send: Send, new_session_value: str | None, scope: Scope) -> Send:
        secure = scope.get("scheme") == "https" or (self.public_origin or "").startswith("https://")

        async def wrapped(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                hdrs = list(message.get("headers", []))
                names = {k.lower() for k, _ in hdrs}
                hdrs += [(k, v) for k, v in SECURITY_HEADERS if k not in names]
                if b"cache-control" not in names:
                    hdrs.append((b"cache-control", b"no-store"))
                if new_session_value:
                    path = (scope.get("root_path") or "") or "/"
                    hdrs.append((b"set-cookie", f"{COOKIE}={new_session_value}; Path={path}; HttpOnly; "
                                                f"SameSite=Strict{'; Secure' if secure else ''}".encode()))
                message["headers"] = hdrs
            await send(message)

        return wrapped


def _plain(status: int, text: str) -> Response:
    return PlainTextResponse(text + "\n", status_code=status)


def _cookie(header: str | None, name: str) -> str | None:
    if not header:
        return None
    for part in header.split(";"):
        k, _, v = part.strip().partition("=")
        if k == name and v and v.replace("-", "").replace("_", "").isalnum() and len(v) <= 64:
            return v
    return None


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> MutableMapping[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


# -- formatting helpers (template filters) -------------------------------------------------------
def fmt_time(value: Any) -> str:
    """A UTC time to the second, or '-'."""
    if value is None:
        return "-"
    if isinstance(value, (int, float)):
        value = to_datetime(float(value))
    return value.strftime("%Y-%m-%d %H:%M:%S") + "Z"


def fmt_ago(seconds: float | None) -> str:
    """How long ago, briefly: '12s', '5m', '3h', '2d'.

    >>> fmt_ago(5), fmt_ago(125), fmt_ago(7300), fmt_ago(200000), fmt_ago(None)
    ('5s', '2m', '2h', '2d', '-')
    """
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{int(s // size)}{unit}"
    return f"{int(s)}s"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or not isinstance(seconds, (int, float)) or math.isnan(seconds):
        return "-"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def pretty(value: Any) -> str:
    """JSON for people (a plain string: the template escapes it)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def num(value: Any) -> str:
    """A number for people: '-' for none, three significant digits for fractions.

    >>> num(None), num(3), num(19.99999), num(0.125), num(1234567.0)
    ('-', '3', '20', '0.125', '1234567')
    """
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.3g}"


def shorten(text: str | None, width: int = 120) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


#: The bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069).
_BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")


def isolate(text: object) -> str:
    """Data for a page's <title>, which holds text, not a <bdi>: its own bidi controls dropped and
    the rest isolated (FSI ... PDI), so it cannot reorder the title around it. In page content,
    templates put data in <bdi> instead.

    >>> isolate("k\u202eexe.txt") == "\u2068kexe.txt\u2069"
    True
    """
    return f"\u2068{_BIDI_CONTROLS.sub('', str(text))}\u2069"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("firesafe.dashboard", "templates"),
        autoescape=True,  # every page is HTML: escape everything, always
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(time=fmt_time, ago=fmt_ago, duration=fmt_duration, pretty=pretty, shorten=shorten,
                       mask_text=mask_text, mask=mask, num=num, isolate=isolate)
    return env


# -- the dashboard ------------------------------------------------------------------------------
@dataclass
class Dashboard:
    app: Any
    token: Token | Sequence[Token] | None
    title: str = "firesafe"
    refresh: float = 5.0
    env: jinja2.Environment = field(default_factory=_env)

    # -- plumbing --------------------------------------------------------------------------------
    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        base = request.scope.get("root_path", "").rstrip("/")
        ctx = {"base": base, "title": self.title, "csrf": request.state.csrf, "request_path": request.url.path,
               "refresh": self.refresh, "store": _store_label(self.app), "states": STATES,
               "page": "", "partial": _is_partial(request), **context}
        return HTMLResponse(self.env.get_template(name).render(ctx), status_code=status)

    def error(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self.render(request, "error.html", status=status, status_code=status, message=mask_text(message))

    def actor(self, request: Request) -> str:
        """Who an action is recorded as: the user a trusted proxy named, else the name of the token
        the request carried, else its client address."""
        from firesafe.deadletters.audit import actor_of

        token = request.state.token if hasattr(request.state, "token") else None
        user = request.state.user if hasattr(request.state, "user") else None
        return actor_of(actor_for(token, request.client.host if request.client else None, user))

    @staticmethod
    def reason(form: Mapping[str, list[str]]) -> str | None:
        """Why, from an action's form (its ``reason`` field), as the store keeps it."""
        from firesafe.deadletters.audit import reason_of

        values = form.get("reason") or []
        return reason_of(values[0]) if values else None

    def guarded(self, handler: Callable[..., Response]) -> Callable[[Request], Awaitable[Response]]:
        """Run a page handler in a thread (the store is synchronous); user mistakes become 400/404."""

        async def endpoint(request: Request) -> Response:
            try:
                return await run_in_threadpool(handler, request)
            except JobNotFound as exc:
                return self.error(request, 404, str(exc))
            except InvalidInput as exc:
                return self.error(request, 400, str(exc))
            except StoreError as exc:
                return self.error(request, 503, f"the store is not available: {exc}")
            except FiresafeError as exc:
                return self.error(request, 400, str(exc))

        return endpoint

    # -- pages -----------------------------------------------------------------------------------
    def overview(self, request: Request) -> Response:
        store = self.app.store
        now = store.now()
        stats = store.job_stats()
        queues = sorted({q for q, _, _ in stats})
        by_queue = {q: dict.fromkeys(STATES, 0) for q in queues}
        totals = dict.fromkeys(STATES, 0)
        for q, st, n in stats:
            by_queue[q][st] += n
            totals[st] += n
        since = (math.floor(now / 60) + 1) * 60 - CHART_MINUTES * 60  # whole minutes, the last one running
        ok, bad = charts.series(store.attempt_buckets(since, since + CHART_MINUTES * 60, 60.0), CHART_MINUTES)
        rates = charts.failure_rates(ok, bad)
        workers = []
        stale_after = max(3 * self.app.lease, 30.0)
        for w in store.worker_list():
            age = now - float(w["last_seen"])
            workers.append({**w, "age": age, "alive": age <= stale_after})
        hour_ok, hour_bad = sum(ok), sum(bad)
        return self.render(
            request, "overview.html", now=now, totals=totals, by_queue=by_queue, queues=queues,
            throughput=charts.throughput_chart(ok, bad), rate=charts.rate_chart(rates),
            hour_ok=hour_ok, hour_bad=hour_bad,
            hour_rate=(hour_bad / (hour_ok + hour_bad)) if hour_ok + hour_bad else None,
            lag_by={lag.queue: lag for lag in store.queue_lags()}, workers=workers, stale_after=stale_after,
            groups=store.dead_groups(limit=5), limiters=parts.limiters(self.app), page="overview")

    def jobs(self, request: Request) -> Response:
        q = JobQuery.parse(request.query_params)
        return self.render(request, "jobs.html", page="jobs", **self._listing(q))

    def _listing(self, q: JobQuery, rows: list[Any] | None = None, total: int | None = None) -> dict[str, Any]:
        store = self.app.store
        now = store.now()
        if rows is None or total is None:
            since, until = q.times(now)
            filt = JobFilter(state=q.state, name=q.job, queue=q.queue, error_type=q.error, since=since, until=until,
                             limit=q.size, offset=q.offset)
            rows = store.job_list(filt)
            total = store.job_count(filt)
        pages = max(1, math.ceil(total / q.size))
        return {"q": q, "rows": rows, "total": total, "pages": pages, "now": now, "page_sizes": PAGE_SIZES,
                "job_names": sorted(self.app.jobs), "queue_names": sorted({j.queue for j in self.app.jobs.values()}),
                "first": q.offset + 1 if rows else 0, "last": q.offset + len(rows)}

    def job(self, request: Request) -> Response:
        key = request.query_params.get("key")
        if key is None:
            raise InvalidInput("which job? give ?key=KEY")
        job = self.app.get(check_key(key))
        attempts = job.attempts  # waits are shown apart (how many, how long), not as attempts
        trace = attempts[-TRACE_LIMIT:]
        waits = job.waits()
        failure = job.last_failure
        steps, steps_note = self._steps(job)
        signals, awaited = self._signals(job)
        d = job.as_dict(with_trace=False)
        return self.render(
            request, "job.html", page="jobs", job=job, now=self.app.store.now(), signals=signals, awaited=awaited,
            family=family(self.app.store, job),
            arguments=job.masked_arguments(), result=mask(job.result), trace=list(reversed(trace)),
            hidden_attempts=len(attempts) - len(trace), steps=steps, steps_note=steps_note,
            events=list(reversed(job.events)), created=d["created_at"],
            waits=waits, shown_waits=list(reversed(waits.items[-WAITS_SHOWN:])),
            last_error=(failure[0], mask_text(failure[1])) if failure else None)

    def _signals(self, job: Any) -> tuple[list[dict[str, Any]], list[str]]:
        """The signals sent to the job (masked), and the names of those it waits for and has not got:
        a wait recorded (the step ``signal:NAME``) whose deadline has not passed, in a job not finished."""
        store = self.app.store
        sent = store.signal_list(job.id)
        signals = [{"name": x.name, "data": mask(x.value()), "actor": x.actor, "reason": x.reason,
                    "sent_at": x.sent_at} for x in sent]
        if job.state not in (State.QUEUED, State.SCHEDULED, State.RUNNING):
            return signals, []
        now, got = store.now(), {x.name for x in sent}
        awaited = []
        for step in store.step_list(job.id):
            if not step.name.startswith(WAIT_PREFIX) or step.name[len(WAIT_PREFIX):] in got:
                continue
            try:
                until = json.loads(step.result or "{}").get("until")
            except ValueError:
                continue
            if isinstance(until, (int, float)) and until > now:
                awaited.append(step.name[len(WAIT_PREFIX):])
        return signals, awaited

    def signal(self, request: Request) -> Response:
        """The approve / reject form of a job waiting for a signal: sends the signal with data
        ``{"approved": true|false, "note": ...}``, recorded as the dashboard's user, then shows the job."""
        form = request.state.form

        def one(name: str) -> str:
            values = form.get(name) or [""]
            return values[0].strip()

        key, name, decision, note = check_key(one("key")), one("signal"), one("decision"), one("note")
        if decision not in ("approve", "reject"):
            raise InvalidInput("decision must be approve or reject")
        if len(note) > MAX_NOTE:
            raise InvalidInput(f"the note is {len(note)} characters; at most {MAX_NOTE}")
        actor = self.actor(request)
        sent = self.app.signal(key, name, {"approved": decision == "approve", "note": note}, actor=actor,
                               reason=note or None)
        log.info("dashboard: signal %s to %s (%s) by %s%s", for_log(name), for_log(key), decision, for_log(actor),
                 "" if sent.sent else ", sent already")
        base = request.scope.get("root_path", "").rstrip("/")
        return RedirectResponse(f"{base}/job?key={quote(key, safe='')}", status_code=303)

    def _steps(self, job: Any) -> tuple[list[dict[str, Any]], str | None]:
        """Recorded steps with their status, plus steps the last attempt saw fail or restore."""
        if job.pruned:
            return [], "pruned with the job's history"
        try:
            recorded = self.app.steps(job.key)
        except (NotImplementedError, StoreError) as exc:
            return [], f"steps are not available on this store ({type(exc).__name__})"
        seen: dict[str, dict[str, Any]] = {}
        for s in recorded:
            seen[s["name"]] = {"name": s["name"], "position": s["position"], "status": "done",
                               "run": s["run"], "result": mask(s["result"]), "error": None}
        last = next((a for a in reversed(job.trace) if a.detail.get("steps")), None)
        if last is not None:
            for entry in last.detail.get("steps", []):
                if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                    continue
                name = entry["name"]
                if name in seen:
                    if entry.get("status") == "restored":
                        seen[name]["last"] = "restored"
                    elif entry.get("status") in ("ran", "sleep"):
                        seen[name]["last"] = "ran"
                elif entry.get("status") == "failed":
                    seen[name] = {"name": name, "position": None, "status": "failed", "run": last.seq,
                                  "result": None, "error": entry.get("error")}
        return list(seen.values()), None

    def dead(self, request: Request) -> Response:
        """The dead letters, the last to die first (as ``firesafe dlq ls``), a page at a time."""
        q = JobQuery.parse(request.query_params, state=str(State.DEAD))
        groups = self.app.store.dead_groups(limit=200)
        store = self.app.store
        now = store.now()
        since, until = q.times(now)
        filt = DeadFilter(name=q.job, queue=q.queue, error_type=q.error, reason=q.dead_reason, since=since,
                          until=until, limit=q.size, offset=q.offset)
        rows = store.dead_list(filt).jobs
        total = store.dead_count(filt)
        listing = {**self._listing(q, rows=rows, total=total), "now": now}
        return self.render(request, "dead.html", page="dead", groups=groups,
                           error_types=sorted({g.error_type for g in groups if g.error_type}), **listing)

    def schedules(self, request: Request) -> Response:
        return self.render(request, "schedules.html", page="schedules", view=parts.schedules(self.app),
                           now=self.app.store.now())

    def backfill(self, request: Request) -> Response:
        form = request.state.form

        def one(name: str, default: str = "") -> str:
            values = form.get(name) or [default]
            value = values[0].strip()
            if len(value) > 64:
                raise InvalidInput(f"{name} is too long")
            return value

        name = check_name(one("schedule"), "schedule name")
        if name not in getattr(self.app, "schedules", {}):
            raise InvalidInput(f"no schedule named {name!r} is declared")
        start, end, rerun = one("from"), one("to"), one("rerun", "none")
        if not start or not end:
            raise InvalidInput("give the range: from and to (dates like 2026-11-01, or ISO datetimes)")
        if rerun not in ("none", "failed", "all"):
            raise InvalidInput("rerun must be none, failed or all")
        run = one("mode") == "run"
        result = parts.backfill(self.app, name, start, end, rerun=rerun, dry_run=not run, actor=self.actor(request),
                                reason=self.reason(form))
        if run:
            self.app.wake_workers()
            log.info("dashboard: backfill of %s from %s to %s (rerun %s) by %s: %d enqueued, %d re-run", name,
                     start, end, rerun, self.actor(request), result.enqueued, result.rerun_count)
        return self.render(request, "backfill.html", page="schedules", result=result, schedule=name,
                           start=start, end=end, rerun=rerun, actor=self.actor(request))

    def alerts(self, request: Request) -> Response:
        return self.render(request, "alerts.html", page="alerts", view=parts.alerts(self.app),
                           now=self.app.store.now())

    # -- actions ---------------------------------------------------------------------------------
    def _action(self, form: Mapping[str, list[str]]) -> tuple[str, list[str] | None, dict[str, Any], JobQuery]:
        def one(name: str) -> str | None:
            values = form.get(name) or []
            value = values[0].strip() if values else ""
            return value or None

        action = one("action")
        if action not in ("replay", "discard"):
            raise InvalidInput("action must be replay or discard")
        scope = one("scope") or "keys"
        q = JobQuery.parse({k: v[0] for k, v in form.items()
                            if k in ("job", "queue", "error", "since", "until", "dead_reason") and v},
                           state=str(State.DEAD))
        if scope == "keys":
            keys = [check_key(k) for k in dict.fromkeys(form.get("key", [])) if k]
            if not keys:
                raise InvalidInput("no job selected: tick at least one job, or act on the whole filter")
            if len(keys) > MAX_SELECTION:
                raise InvalidInput(f"at most {MAX_SELECTION} jobs per selection; act on a filter for more")
            return action, keys, {}, q
        if scope != "filter":
            raise InvalidInput("scope must be keys or filter")
        since, until = q.times(self.app.store.now())
        filters = {"job": q.job, "error": q.error, "queue": q.queue, "since": since, "until": until,
                   "dead_reason": q.dead_reason}
        return action, None, filters, q

    def _dry_run(self, action: str, keys: list[str] | None, filters: dict[str, Any]) -> Any:
        act = self.app.dlq.replay if action == "replay" else self.app.dlq.discard
        return act(keys=keys, dry_run=True, **filters)

    def preview(self, request: Request) -> Response:
        form = request.state.form
        action, keys, filters, q = self._action(form)
        dry = self._dry_run(action, keys, filters)
        return self._confirm(request, action, keys, q, dry.keys, changed_from=None)

    def _confirm(self, request: Request, action: str, keys: list[str] | None, q: JobQuery, targets: list[str],
                 changed_from: int | None) -> Response:
        missed = [] if keys is None else [k for k in keys if k not in set(targets)]
        return self.render(request, "confirm.html", page="dead", action=action, scope="filter" if keys is None
                           else "keys", keys=keys or [], q=q, targets=targets, count=len(targets),
                           digest=keys_digest(targets), sample=targets[:20], missed=missed,
                           changed_from=changed_from)

    def apply(self, request: Request) -> Response:
        form = request.state.form
        action, keys, filters, q = self._action(form)
        try:
            expect = int((form.get("expect") or ["-1"])[0])
        except ValueError:
            raise InvalidInput("expect must be a whole number") from None
        digest = (form.get("digest") or [""])[0]
        dry = self._dry_run(action, keys, filters)
        if not hmac.compare_digest(keys_digest(dry.keys), digest):  # not the jobs previewed: ask again
            return self._confirm(request, action, keys, q, dry.keys, changed_from=expect)
        actor, reason = self.actor(request), self.reason(form)
        act = self.app.dlq.replay if action == "replay" else self.app.dlq.discard
        result = act(keys=dry.keys, actor=actor, reason=reason) if dry.keys else dry
        log.info("dashboard: %s of %d job(s) by %s (%d skipped)", action, result.count, for_log(actor),
                 len(result.skipped))
        back = (form.get("back") or [""])[0]
        return self.render(request, "result.html", page="dead", action=action, result=result, actor=actor,
                           reason=reason, back_key=back if back and back in dry.keys else None)

    # -- machines --------------------------------------------------------------------------------
    def healthz(self, request: Request) -> Response:
        """200 only when the store answers and holds the schema this code needs (the pages need it):
        not an older one, nor one that a newer firesafe migrated while this process ran. ``workers``
        says how many workers heartbeated recently; ``?workers=N`` (``&within=SECONDS``) answers 503
        with fewer than N of them, for a monitor outside the fleet (docs/alerts.md)."""
        from firesafe.alerts.fleet import health_query, worker_health

        try:
            need, within = health_query(request.query_params, max(3 * self.app.lease, 30.0))
        except InvalidInput as exc:
            return JSONResponse({"status": "error", "error": str(exc)}, status_code=400)
        try:
            store = self.app.store
            version = check_schema(store)
            now = store.now()
            needed = latest_version(store.dialect)
        except FiresafeError as exc:
            return JSONResponse({"status": "unavailable", "error": mask_text(str(exc))}, status_code=503)
        body: dict[str, Any] = {"store": store.dialect, "schema_version": version, "time": now}
        if version < needed:
            why = ("the store has no firesafe tables" if version == 0 else
                   f"the store's schema (version {version}) is older than this firesafe needs (version {needed})")
            return JSONResponse({"status": "unavailable", **body, "schema_needed": needed,
                                 "error": f"{why}: run `firesafe migrate`"}, status_code=503)
        try:
            body["workers"] = fleet = worker_health(store.worker_list(), now, within)
        except FiresafeError as exc:
            return JSONResponse({"status": "unavailable", **body, "error": mask_text(str(exc))}, status_code=503)
        if fleet["alive"] < need:
            return JSONResponse({"status": "no_workers", **body, "error": (
                f"{fleet['alive']} worker(s) heartbeated in the last {within:g}s; {need} needed")}, status_code=503)
        return JSONResponse({"status": "ok", **body})


def keys_digest(keys: Sequence[str]) -> str:
    """A fingerprint of a set of job keys (order and repeats aside): what a confirmation shows is
    what it acts on.

    >>> keys_digest(["b", "a"]) == keys_digest(["a", "b", "a"]) != keys_digest(["a", "c"])
    True
    """
    return hashlib.sha256(json.dumps(sorted(set(keys))).encode()).hexdigest()


def _is_partial(request: Request) -> bool:
    """An htmx request for a fragment (boosted navigation gets the whole page)."""
    h = request.headers
    return (h.get("hx-request") == "true" and h.get("hx-boosted") != "true"
            and h.get("hx-history-restore-request") != "true")


def _store_label(app: Any) -> str:
    try:
        return redact_url(app.store_url)
    except Exception:  # pragma: no cover - only a label
        return "store"


def create_app(app: Any, token: str | Token | Sequence[Token] | None = None, *, title: str = "firesafe",
               refresh: float = 5.0, public_prefixes: Sequence[str] = (), public_url: str | None = None,
               user_header: UserHeader | None = None) -> Starlette:
    """The dashboard of ``app`` as a Starlette application.

    ``token`` (``SECRET`` or ``NAME:SECRET``) is required from every client when given; without
    it, only loopback Host names are answered, so serve it on 127.0.0.1 (the CLI refuses other
    binds without a token). Paths under ``public_prefixes`` skip the dashboard's auth and CSRF
    checks (for endpoints with their own, such as signed webhooks); add their routes to the app.
    Every replay and discard is recorded with the dashboard user as its actor.

    ``public_url`` is the address browsers use when a reverse proxy publishes the dashboard
    (``https://ops.example.com``): actions must come from that origin, and the CSRF cookie is
    ``Secure`` when it is https. Any host but a loopback one needs a token.

    ``token`` may be several tokens, one per person (see :func:`~firesafe.dashboard.security.parse_tokens`):
    each action is recorded under the name of the token its request carried. ``user_header`` (off
    by default) names the user from a header that a trusted reverse proxy sets; the action is then
    recorded under that name.
    """
    import os

    tok: Token | Sequence[Token] | None = (token if isinstance(token, Token) or token is None
                                           else parse_token(token) if isinstance(token, str) else (list(token) or None))
    origin = check_public(public_url, tok)
    dash = Dashboard(app, tok, title=title, refresh=refresh)
    from firesafe.dashboard.metrics import metrics_endpoint

    g = dash.guarded
    routes = [
        Route("/", g(dash.overview), methods=["GET"], name="overview"),
        Route("/jobs", g(dash.jobs), methods=["GET"], name="jobs"),
        Route("/job", g(dash.job), methods=["GET"], name="job"),
        Route("/job/signal", g(dash.signal), methods=["POST"], name="signal"),
        Route("/dead", g(dash.dead), methods=["GET"], name="dead"),
        Route("/dead/preview", g(dash.preview), methods=["POST"], name="preview"),
        Route("/dead/apply", g(dash.apply), methods=["POST"], name="apply"),
        Route("/schedules", g(dash.schedules), methods=["GET"], name="schedules"),
        Route("/schedules/backfill", g(dash.backfill), methods=["POST"], name="backfill"),
        Route("/alerts", g(dash.alerts), methods=["GET"], name="alerts"),
        Route("/healthz", g(dash.healthz), methods=["GET"], name="healthz"),
        Route("/metrics", metrics_endpoint(app), methods=["GET"], name="metrics"),
        Mount("/static", StaticFiles(directory=str(files("firesafe.dashboard") / "static")), name="static"),
    ]
    prefixes = list(public_prefixes)
    web = Starlette(routes=routes)
    web.state.firesafe = dash
    web.state.public_prefixes = prefixes  # the inbox part appends "/events/" here, then adds its route
    key = os.urandom(32)
    web.add_middleware(Guard, token=tok, key=key, public_prefixes=prefixes, public_origin=origin,
                       user_header=user_header)
    return web
