"""What every command shares: errors, consoles, option types and opening the store."""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.text import Text

from firesafe.alerts.render import iso
from firesafe.app import App
from firesafe.errors import MAX_DELAY
from firesafe.masking import redact_url
from firesafe.sanitize import for_terminal, safe_str
from firesafe.store import resolve_url
from firesafe.store.queries import latest_version
from firesafe.stores import open_store

F = TypeVar("F", bound=Callable[..., Any])


class CLIError(click.ClickException):
    """A user mistake or an unusable store: one red line on stderr, exit code 1, no traceback."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(click.style(f"error: {plain(self.format_message())}", fg="red"), err=True)


def fail(message: str) -> CLIError:
    return CLIError(message)


# -- output ------------------------------------------------------------------------------------
# What a command prints that came from the store, the user's code or the outside (keys, names, errors,
# tracebacks, results, arguments, event ids and bodies, actors, reasons) is data: it is printed through
# `plain` (for click.echo) or `data` (for rich: a Text, since rich reads a str, even with markup=False,
# for emoji codes such as `:100:` in `job:100:x`), so it can neither apply markup nor send a control
# sequence to the terminal. --json output goes through `dumps`.
def plain(value: object) -> str:
    """Data as the CLI prints it with click.echo: any value as text (never raising), its control
    characters (ESC, OSC, carriage return...), lone surrogates and bidirectional overrides as
    visible escapes.

    >>> plain("done\\x1b]0;owned\\x07\\r[bold]"), plain(None)
    ('done\\\\x1b]0;owned\\\\x07\\\\r[bold]', 'None')
    """
    return for_terminal(value if type(value) is str else safe_str(value), markup=False)


def data(value: object, style: str = "") -> Text:
    """Data as rich prints it, in a cell or a line: :func:`plain` text in a ``Text``, which rich
    shows as it is (no markup, no emoji codes)."""
    return Text(plain(value), style=style)


#: What JSON text may hold raw but a terminal or a log line must not get (lone surrogates cannot even
#: be encoded): DEL and the C1 controls, lone surrogates, line and paragraph separators, bidi overrides.
_JSON_RAW = re.compile("[\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def dumps(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON that any terminal or log line can hold and every JSON reader reads back as
    ``value``: readable non-ASCII text, but control characters, lone surrogates and bidi overrides
    as ``\\u`` escapes; a value JSON has no form for (a datetime, say) as its text.

    >>> dumps({"msg": "caf\\udce9 \\x1b \\u202e é"})
    '{"msg": "caf\\\\udce9 \\\\u001b \\\\u202e é"}'
    """
    text = json.dumps(value, indent=indent, default=safe_str, ensure_ascii=False)
    if text.isascii() and "\x7f" not in text:  # the usual output: nothing to look for
        return text
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def console(stderr: bool = False) -> Console:
    """A rich console; wide when writing to a pipe, so piped tables do not cut keys."""
    c = Console(stderr=stderr, highlight=False)
    if not c.is_terminal and not os.environ.get("COLUMNS"):
        c = Console(stderr=stderr, highlight=False, width=200)
    return c


def echo_json(value: Any) -> None:
    click.echo(dumps(value, indent=2))


#: Seconds since the epoch as ISO 8601 in UTC, as every ``--json`` output writes times.
iso_time = iso


def a_or_an(word: str) -> str:
    """``word`` with its indefinite article.

    >>> a_or_an("int"), a_or_an("dict")
    ('an int', 'a dict')
    """
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def safe_url(url: str) -> str:
    """A store URL with its password hidden (in the user part or the query), for messages.

    >>> safe_url("postgresql://app:s3cret@db.internal:5432/jobs?password=s4")
    'postgresql://app:********@db.internal:5432/jobs?password=********'
    >>> safe_url("sqlite:///firesafe.db")
    'sqlite:///firesafe.db'
    """
    return redact_url(url)


# -- option types --------------------------------------------------------------------------------
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``90``, ``45s``, ``10m``, ``2h``, ``3d``, ``1w`` or ``1h30m``.

    >>> parse_duration("1h30m"), parse_duration("3d"), parse_duration("2.5")
    (5400.0, 259200.0, 2.5)
    >>> parse_duration("soon")
    Traceback (most recent call last):
    ...
    ValueError: 'soon' is not a duration: write 30s, 10m, 2h, 3d or 1w (or plain seconds)
    >>> parse_duration("1e308")
    Traceback (most recent call last):
    ...
    ValueError: '1e308' is too long: a duration is at most 1,000 years (31536000000 seconds)
    """
    t = text.strip().lower().replace(" ", "")
    try:
        seconds = float(t)
    except ValueError:
        if not _DURATION.match(t):
            raise ValueError(f"{text!r} is not a duration: write 30s, 10m, 2h, 3d or 1w (or plain seconds)") from None
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(t))
    if seconds < 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"{text!r} is not a duration: it must be a finite number of seconds >= 0")
    if seconds > MAX_DELAY:
        raise ValueError(f"{text!r} is too long: a duration is at most 1,000 years ({MAX_DELAY:.0f} seconds)")
    return seconds


def human_duration(seconds: float) -> str:
    """A duration as people read it: its largest units, rounded to the minute from a day up (to the
    second below a day); under a minute, the seconds as given.

    >>> human_duration(30 * 86400), human_duration(5400), human_duration(2.5), human_duration(90)
    ('30d', '1h 30m', '2.5s', '1m 30s')
    >>> human_duration(2622244.4), human_duration(1000 * 365 * 86400.0)
    ('30d 8h 24m', '365000d')
    """
    if seconds < 60:
        return f"{seconds:.3g}s" if seconds != int(seconds) else f"{int(seconds)}s"
    step = 60 if seconds >= 86400 else 1
    left: float = round(seconds / step) * step
    parts = []
    for unit in ("d", "h", "m", "s"):
        n, left = divmod(left, _UNITS[unit])
        if n:
            parts.append(f"{int(n)}{unit}")
    return " ".join(parts)


def parse_time(text: str, now: float | None = None) -> float:
    """A point in time: an ISO datetime (UTC when it has no zone) or a duration ago (``2h``, ``3d``).

    >>> parse_time("2h", now=10_000.0)
    2800.0
    >>> parse_time("2024-05-01T00:00:00Z")
    1714521600.0
    >>> parse_time("2024-05-01")
    1714521600.0
    """
    try:
        return (time.time() if now is None else now) - parse_duration(text)
    except ValueError as exc:
        as_duration = exc
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        if _looks_like_duration(text):  # a time ago that is out of range: say that
            raise as_duration from None
        raise ValueError(
            f"{text!r} is neither an ISO datetime (2024-05-01T12:00:00Z) nor a time ago (30m, 2h, 3d)"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def _looks_like_duration(text: str) -> bool:
    t = text.strip().lower().replace(" ", "")
    try:
        float(t)
    except ValueError:
        return bool(_DURATION.match(t))
    return True


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class PointInTime(click.ParamType):
    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return parse_time(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class JSONValue(click.ParamType):
    """A JSON text that must decode to a list or to an object (``object``: any JSON value)."""

    def __init__(self, kind: type) -> None:
        self.kind = kind
        self.name = "json-list" if kind is list else "json-object" if kind is dict else "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, self.kind) and not isinstance(value, str):  # a default given decoded
            return value
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError as exc:
            self.fail(f"not valid JSON ({exc.msg} at character {exc.pos}): {value!r}", param, ctx)
        except ValueError:  # an integer past Python's digit limit (4300 digits by default)
            self.fail(f"holds an integer of more than {sys.get_int_max_str_digits()} digits, which cannot be read: "
                      "pass a number that long as a string", param, ctx)
        except RecursionError:
            self.fail("nests too deeply to be read as JSON", param, ctx)
        if not isinstance(decoded, self.kind):
            want = "list, like '[\"o-1\", 100]'" if self.kind is list else "object, like '{\"amount\": 100}'"
            self.fail(f"must be a JSON {want}, not {a_or_an(_json_kind(decoded))}", param, ctx)
        return decoded


def _json_kind(value: Any) -> str:
    """The JSON name of a decoded value's kind."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    return "null" if value is None else "number"


# -- the store -------------------------------------------------------------------------------------
def not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An option given as an empty string is a mistake, not a request for the default."""
    if value is not None and not value.strip():
        default = " (leave it out for $FIRESAFE_STORE, else sqlite:///firesafe.db)" if param.name == "store_url" else ""
        raise click.UsageError(f"{param.opts[0]} is empty{default}", ctx)
    return value


def _remember_app(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``--app`` names the store through the app: kept for :func:`store_url_of` (commands never see it)."""
    if value is not None and not value.strip():
        raise click.UsageError("--app is empty (leave it out for --store, $FIRESAFE_STORE or $FIRESAFE_APP)", ctx)
    if value is not None:
        ctx.meta["firesafe.app"] = value.strip()


def store_option(f: F) -> F:
    """``--store URL`` and ``--app MODULE:APP`` (the store that app names), for a command that needs
    only the store; see :func:`store_url_of` for which one wins."""
    f = click.option(
        "--app", "app_target", metavar="MODULE:APP", default=None, expose_value=False, callback=_remember_app,
        help="Use the store this app names (else $FIRESAFE_APP when neither --store nor $FIRESAFE_STORE is "
             "set); imports the module, as `firesafe worker` does.",
    )(f)
    return click.option(
        "--store", "store_url", metavar="URL", default=None, callback=not_empty,
        help="Store URL (else the store of --app, else $FIRESAFE_STORE, else $FIRESAFE_APP's store, else "
             "sqlite:///firesafe.db), e.g. sqlite:///jobs.db or postgresql://user@host:5432/db.",
    )(f)


def store_url_of(store_url: str | None) -> str:
    """The store a command works on: ``--store``, else the store of ``--app``, else
    ``$FIRESAFE_STORE``, else the store of ``$FIRESAFE_APP``, else ``sqlite:///firesafe.db``. A flag
    beats a variable, and at each level the store's URL beats the app that names one."""
    ctx = click.get_current_context(silent=True)
    target = ctx.meta.get("firesafe.app") if ctx is not None else None
    if store_url is not None and target is not None:
        raise click.UsageError("give --store or --app, not both (--app uses the store the app names)")
    if store_url is not None:
        return store_url
    if target is None and not os.environ.get("FIRESAFE_STORE"):
        target = os.environ.get("FIRESAFE_APP", "").strip() or None
    if target is None:
        return resolve_url(None)
    from firesafe.cli._loader import load_app

    return load_app(target).store_url


def actor_options(f: F) -> F:
    """``--actor NAME`` and ``--reason TEXT``: who makes a change and why, recorded with it."""
    f = click.option("--reason", metavar="TEXT", default=None, callback=not_empty,
                     help="Why: recorded with the change (shown by `firesafe show`, the dashboard and --json).")(f)
    return click.option("--actor", metavar="NAME", default=None, callback=not_empty,
                        help="Who: recorded with the change (else $FIRESAFE_ACTOR, else user@host).")(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(f)


def open_app(store_url: str | None) -> App:
    """An App on an existing, migrated store; it imports no user code and creates nothing.

    Raises a clear error when the store does not exist yet, rather than creating an empty one.
    """
    url = store_url_of(store_url)
    shown = safe_url(url)
    store = open_store(url)
    path = store.path  # SQLite's file (None on PostgreSQL)
    if path and not os.path.exists(path):
        store.close()
        raise fail(f"no store at {path}: the file does not exist, and nothing was created. Check --store, --app, "
                   "$FIRESAFE_STORE or $FIRESAFE_APP (to start a new, empty store there instead: run `firesafe "
                   f"migrate --store {shown}`)")
    ctx = click.get_current_context(silent=True)
    try:
        version = store.schema_version()
    except BaseException:
        store.close()
        raise
    if version == 0:
        store.close()
        raise fail(f"no firesafe store at {shown} (run firesafe migrate)")
    needed = latest_version(store.dialect)
    if needed and version < needed:
        store.close()
        raise fail(f"the store at {shown} has schema version {version}; this firesafe needs {needed} "
                   "(run firesafe migrate)")
    app = App(store, auto_migrate=False)
    if ctx is not None:
        ctx.call_on_close(app.close)
    return app


def check_port(host: str, port: int) -> None:
    """Fail now, with one line, if ``host:port`` cannot be listened on (a port already in use, say),
    rather than after the server has started."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise fail(f"cannot listen on {host}: {exc}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does: TIME_WAIT is no conflict
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise fail(f"port {port} on {host} is already in use (pick another with --port)") from None
            raise fail(f"cannot listen on port {port} of {host}: {exc.strerror or exc}") from None


def is_interactive() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def confirm_bulk(action: str, count: int, what: str = "job(s)") -> None:
    """Ask before a bulk change; without a terminal, refuse unless ``--yes`` was given."""
    if not is_interactive():
        raise fail(f"refusing to {action} {count} {what} without confirmation: stdin is not a terminal. "
                   "Pass --yes to confirm (or --dry-run to preview)")
    if not click.confirm(f"{action.capitalize()} {count} {what}?", default=False, err=True):
        raise fail("not confirmed; nothing changed")


__all__ = [
    "CLIError",
    "Duration",
    "JSONValue",
    "PointInTime",
    "a_or_an",
    "actor_options",
    "check_port",
    "confirm_bulk",
    "console",
    "data",
    "dumps",
    "echo_json",
    "fail",
    "human_duration",
    "iso_time",
    "json_option",
    "not_empty",
    "open_app",
    "parse_duration",
    "parse_time",
    "plain",
    "safe_url",
    "store_option",
    "store_url_of",
]
