"""Worker logs, as text or as one JSON object per line, with secrets masked.

Log records carry data (job keys, error messages, results), and neither format lets data break the
stream. A text record is one line: its message goes through :func:`~firesafe.sanitize.for_log`, so
a newline or a control character in an error shows as ``\\n`` or ``\\x1b`` and cannot start a
forged record. A traceback (``log.exception``) is several lines by nature: they follow their record,
each escaped the same way and starting with ``"  | "``, so every line that starts with a timestamp is
a record. A JSON record is one object per line. Neither formatter raises: a message whose arguments
cannot be formatted (an ``__str__`` that raises, ``%d`` given a string) is written with what can be
read of it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from firesafe.cli._common import dumps
from firesafe.masking import MASK, is_secret_name, mask, mask_text
from firesafe.sanitize import for_log, safe_str

_STANDARD = set(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None).__dict__) | {
    "message", "asctime", "taskName",
}
#: What starts each line of a traceback under its record in the text format.
TRACEBACK_PREFIX = "  | "


def _iso(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")


def _fit(value: object) -> object:
    """A ``%`` argument that cannot raise: numbers as they are (for ``%d``), anything else as text."""
    return value if type(value) in (int, float, bool) else safe_str(value)


def message_of(record: logging.LogRecord) -> str:
    """The record's message, never raising: ``record.getMessage()``, else its format string filled
    with its arguments as text, else the format string followed by them.

    >>> class Bad:
    ...     def __str__(self):
    ...         raise RuntimeError("no")
    ...     def __repr__(self):
    ...         return "Bad()"
    >>> message_of(logging.LogRecord("x", logging.INFO, "x", 0, "got %s", (Bad(),), None))
    'got Bad()'
    >>> message_of(logging.LogRecord("x", logging.INFO, "x", 0, "n=%d", ("many",), None))
    'n=%d (log arguments that do not fit it: many)'
    """
    try:
        return record.getMessage()
    except Exception:
        pass
    msg, args = safe_str(record.msg), record.args
    values = list(args.values()) if isinstance(args, Mapping) else list(args or ())
    try:
        if isinstance(args, Mapping):
            return msg % {k: _fit(v) for k, v in args.items()}
        return msg % tuple(_fit(v) for v in values)
    except Exception:
        return f"{msg} (log arguments that do not fit it: {', '.join(safe_str(v) for v in values)})"


def _jsonable(value: object, depth: int = 0) -> object:
    """An extra field as JSON values only, so masking sees all of its text: lists, dicts (keys as
    text), numbers, booleans and None as they are; anything else (an object whose ``__str__``
    might print a secret, a datetime, bytes) as its text, never raising; past 32 levels, text."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if depth < 32 and isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if depth < 32 and isinstance(value, dict):
        return {k if isinstance(k, str) else safe_str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    return safe_str(value)


class TextFormatter(logging.Formatter):
    """``2024-05-01T12:00:00.123+00:00 INFO    [pid] firesafe.worker: message``: one line per record
    whatever its message holds, then its traceback, if any, on lines starting with ``"  | "``."""

    def format(self, record: logging.LogRecord) -> str:
        head = f"{_iso(record.created)} {record.levelname:<7} [{record.process}] {for_log(record.name)}: "
        try:
            line = head + for_log(mask_text(message_of(record)))
            blocks = [self.formatException(record.exc_info)] if record.exc_info else []
            if record.stack_info:
                blocks.append(self.formatStack(record.stack_info))
            for block in blocks:
                line += "".join(f"\n{TRACEBACK_PREFIX}{for_log(part)}" for part in mask_text(block).split("\n"))
            return line
        except Exception as exc:  # the record still leaves, as one line, whatever failed
            return head + for_log(f"<log record not formatted: {type(exc).__name__}: {safe_str(exc)}>")


class JSONFormatter(logging.Formatter):
    """One JSON object per line: timestamp, level, logger, message, pid and the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "timestamp": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": "",
            "pid": record.process,
        }
        try:
            out["message"] = mask_text(message_of(record))
            for key, value in record.__dict__.items():
                if key in _STANDARD or key.startswith("_") or key in out:
                    continue
                out[key] = MASK if is_secret_name(key) else mask(_jsonable(value))
            if record.exc_info:
                out["exc_info"] = mask_text(self.formatException(record.exc_info))
            return dumps(out)
        except Exception as exc:  # the record still leaves, as one object, whatever failed
            return dumps({k: out[k] for k in ("timestamp", "level", "logger", "pid")}
                         | {"message": f"<log record not formatted: {type(exc).__name__}: {safe_str(exc)}>"})


class _Handler(logging.StreamHandler):
    """Marks the handler firesafe installed, so configuring twice replaces it."""


def configure(log_format: str = "text", level: str = "INFO") -> None:
    """Send every log record at ``level`` or above to stderr in ``log_format`` ("text" or "json")."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if isinstance(h, _Handler):
            root.removeHandler(h)
    handler = _Handler(sys.stderr)
    handler.setFormatter(JSONFormatter() if log_format == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())
