"""The schedules part of the sqlite store: its methods are written once, on both dialects, in
:class:`firesafe.schedules.store.SchedulesPart`; SQLite's queries are in store/sql/sqlite/schedules.sql."""

from __future__ import annotations

from firesafe.schedules.store import SchedulesPart
from firesafe.store.driver import SQLitePart


class SchedulesSQLite(SchedulesPart, SQLitePart):
    """The schedules part, mixed into the sqlite store class: nothing of it differs on SQLite but its queries."""


__all__ = ["SchedulesSQLite"]
