"""The signals part of the SQLite store: a mixin (queries in sql/sqlite/signals.sql). What is the same on
both dialects is written once in :class:`firesafe.signals.store.SignalsPart`."""

from __future__ import annotations

from firesafe.signals.store import SignalsPart
from firesafe.store.driver import SQLitePart


class SignalsSQLite(SignalsPart, SQLitePart):
    """Store methods of the signals part on SQLite (nothing differs); mixed into the sqlite store class."""
