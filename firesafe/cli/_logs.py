"""Worker logs, as text or as one JSON object per line, with secrets masked."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from firesafe.masking import MASK, is_secret_name, mask, mask_text

_STANDARD = set(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None).__dict__) | {
    "message", "asctime", "taskName",
}


def _iso(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")


class TextFormatter(logging.Formatter):
    """``2024-05-01T12:00:00.123+00:00 INFO [pid] firesafe.worker: message``."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_iso(record.created)} {record.levelname:<7} [{record.process}] {record.name}: "
        line += mask_text(record.getMessage())
        if record.exc_info:
            line += "\n" + mask_text(self.formatException(record.exc_info))
        return line


class JSONFormatter(logging.Formatter):
    """One JSON object per line: timestamp, level, logger, message, pid and the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "timestamp": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": mask_text(record.getMessage()),
            "pid": record.process,
        }
        for key, value in record.__dict__.items():
            if key in _STANDARD or key.startswith("_") or key in out:
                continue
            out[key] = MASK if is_secret_name(key) else mask(value)
        if record.exc_info:
            out["exc_info"] = mask_text(self.formatException(record.exc_info))
        return json.dumps(out, default=str, ensure_ascii=False)


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
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
