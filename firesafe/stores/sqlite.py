"""The SQLite store: the dialect's core (:mod:`firesafe.store.sqlite`) with each part's storage mixed in."""

from __future__ import annotations

from firesafe.alerts.store_sqlite import AlertsSQLite
from firesafe.deadletters.audit import AuditSQLite
from firesafe.inbox.store_sqlite import InboxSQLite
from firesafe.limits.store_sqlite import LimitsSQLite
from firesafe.schedules.store_sqlite import SchedulesSQLite
from firesafe.signals.store_sqlite import SignalsSQLite
from firesafe.steps.store_sqlite import StepsSQLite
from firesafe.store.sqlite import SQLiteCore


class SQLiteStore(SQLiteCore, InboxSQLite, StepsSQLite, SignalsSQLite, LimitsSQLite, SchedulesSQLite, AlertsSQLite,
                  AuditSQLite):
    """The :class:`~firesafe.store.contract.Store` in one SQLite file."""
