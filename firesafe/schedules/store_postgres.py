"""The schedules part of the postgres store: its methods are written once, on both dialects, in
:class:`firesafe.schedules.store.SchedulesPart`; PostgreSQL's queries are in store/sql/postgres/schedules.sql."""

from __future__ import annotations

from firesafe.schedules.store import SchedulesPart
from firesafe.store.driver import PostgresPart


class SchedulesPostgres(SchedulesPart, PostgresPart):
    """The schedules part, mixed into the postgres store class: nothing of it differs on PostgreSQL but its
    queries."""


__all__ = ["SchedulesPostgres"]
