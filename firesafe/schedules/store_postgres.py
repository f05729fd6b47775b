"""The schedules part of the postgres store: a mixin (queries in store/sql/postgres/schedules.sql)."""

from __future__ import annotations


class SchedulesPostgres:
    """Store methods of the schedules part; mixed into the postgres store class."""
