"""What every command shares: errors, consoles, option types and opening the store."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import click
from rich.console import Console

from firesafe.app import App
from firesafe.store import open_store, resolve_url

F = TypeVar("F", bound=Callable[..., Any])


class CLIError(click.ClickException):
    """A user mistake or an unusable store: one red line on stderr, exit code 1, no traceback."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(click.style(f"error: {self.format_message()}", fg="red"), err=True)


def fail(message: str) -> CLIError:
    return CLIError(message)


# -- output ------------------------------------------------------------------------------------
def console(stderr: bool = False) -> Console:
    """A rich console; wide when writing to a pipe, so piped tables do not cut keys."""
    c = Console(stderr=stderr, highlight=False)
    if not c.is_terminal and not os.environ.get("COLUMNS"):
        c = Console(stderr=stderr, highlight=False, width=200)
    return c


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=str, ensure_ascii=False))


def safe_url(url: str) -> str:
    """A store URL with its password hidden, for messages.

    >>> safe_url("postgresql://app:s3cret@db.internal:5432/jobs")
    'postgresql://app:****@db.internal:5432/jobs'
    >>> safe_url("sqlite:///firesafe.db")
    'sqlite:///firesafe.db'
    """
    try:
        parts = urlsplit(url)
        if not parts.password:
            return url
        host = parts.netloc.rsplit("@", 1)[1]
        return urlunsplit(parts._replace(netloc=f"{parts.username}:****@{host}"))
    except ValueError:
        return url


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
    return seconds


def human_duration(seconds: float) -> str:
    """The largest whole unit that states ``seconds`` exactly.

    >>> human_duration(30 * 86400), human_duration(5400), human_duration(2.5)
    ('30d', '90m', '2.5s')
    """
    for unit in ("w", "d", "h", "m"):
        n = seconds / _UNITS[unit]
        if n >= 1 and n == int(n):
            return f"{int(n)}{unit}"
    return f"{seconds:g}s"


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
    except ValueError:
        pass
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an ISO datetime (2024-05-01T12:00:00Z) nor a time ago (30m, 2h, 3d)"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


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
    """A JSON text that must decode to a list or to an object."""

    def __init__(self, kind: type) -> None:
        self.kind = kind
        self.name = "json-list" if kind is list else "json-object"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, self.kind):
            return value
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError as exc:
            self.fail(f"not valid JSON ({exc.msg} at character {exc.pos}): {value!r}", param, ctx)
        if not isinstance(decoded, self.kind):
            want = "a list, like '[\"o-1\", 100]'" if self.kind is list else "an object, like '{\"amount\": 100}'"
            self.fail(f"must be a JSON {want}, not {type(decoded).__name__}", param, ctx)
        return decoded


# -- the store -------------------------------------------------------------------------------------
def store_option(f: F) -> F:
    return click.option(
        "--store", "store_url", metavar="URL", default=None,
        help="Store URL (else $FIRESAFE_STORE, else sqlite:///firesafe.db), "
             "e.g. sqlite:///jobs.db or postgresql://user@host:5432/db.",
    )(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(f)


def open_app(store_url: str | None) -> App:
    """An App on an existing, migrated store; it imports no user code and creates nothing.

    Raises a clear error when the store does not exist yet, rather than creating an empty one.
    """
    url = resolve_url(store_url)
    shown = safe_url(url)
    store = open_store(url)
    path = getattr(store, "path", None)
    if store.dialect == "sqlite" and path and not os.path.exists(path):
        raise fail(f"no firesafe store at {shown}: {path} does not exist (run firesafe migrate to create it)")
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


def latest_version(dialect: str) -> int:
    from firesafe.store import queries

    try:
        return max((v for v, _ in queries.migrations(dialect)), default=0)
    except (OSError, ValueError):
        return 0


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
    "confirm_bulk",
    "console",
    "echo_json",
    "fail",
    "human_duration",
    "json_option",
    "open_app",
    "parse_duration",
    "parse_time",
    "safe_url",
    "store_option",
]
