"""The schedules part of the sqlite store: a mixin of the store class (queries in store/sql/sqlite/schedules.sql)."""

from __future__ import annotations


class SchedulesSQLite:
    """Store methods of the schedules part; mixed into the sqlite store class."""
