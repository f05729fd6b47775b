"""Import the user's app from ``module:attribute``, the way uvicorn finds an ASGI app.

The commands that need the user's code (through :mod:`firesafe.cli._loader`, which turns an
:class:`AppNotFound` into the command's one-line error) and the drill's worker processes call this;
commands that read the store never import user code.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

from firesafe.app import App
from firesafe.errors import ConfigError, FiresafeError
from firesafe.masking import mask_text
from firesafe.sanitize import safe_str


class AppNotFound(ConfigError):
    """``module:attribute`` does not name a :class:`~firesafe.App`: the message says why."""


def fail(message: str) -> AppNotFound:
    return AppNotFound(message)


def _where(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")]
    if not frames:
        return ""
    last = frames[-1]
    return f" ({os.path.relpath(last.filename) if os.path.isabs(last.filename) else last.filename}, line {last.lineno})"


def load_app(target: str) -> App:
    """The :class:`~firesafe.App` named by ``module:attribute`` (the current directory is importable)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise fail(f"expected the app as module:attribute (like myapp:app), got {target!r}")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise fail(f"cannot import {module_name!r}: no module named {exc.name!r} in the current "
                       "directory or on PYTHONPATH") from None
        raise fail(f"importing {module_name!r} failed: {mask_text(safe_str(exc))}{_where(exc)}") from None
    except FiresafeError as exc:
        raise fail(f"importing {module_name!r} failed: {exc}{_where(exc)}") from None
    except SyntaxError as exc:
        raise fail(f"importing {module_name!r} failed: SyntaxError: {exc}") from None
    except Exception as exc:
        raise fail(f"importing {module_name!r} failed: {type(exc).__name__}: {mask_text(safe_str(exc))}"
                   f"{_where(exc)}") from None
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise fail(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, App):
        kind = type(obj).__name__
        raise fail(f"{target} is {'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}, not a firesafe.App")
    return obj
