"""The app a command names as ``module:attribute`` (:mod:`firesafe.loader`), or the command's one-line error."""

from __future__ import annotations

from firesafe.app import App
from firesafe.cli._common import fail
from firesafe.loader import AppNotFound
from firesafe.loader import load_app as _load_app


def load_app(target: str) -> App:
    """The :class:`~firesafe.App` named by ``module:attribute`` (the current directory is importable)."""
    try:
        return _load_app(target)
    except AppNotFound as exc:
        raise fail(str(exc)) from None
