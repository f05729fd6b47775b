"""The PostgreSQL store: the dialect's core (:mod:`firesafe.store.postgres`) with each part's storage mixed in."""

from __future__ import annotations

from firesafe.alerts.store_postgres import AlertsPostgres
from firesafe.deadletters.audit import AuditPostgres
from firesafe.inbox.store_postgres import InboxPostgres
from firesafe.limits.store_postgres import LimitsPostgres
from firesafe.schedules.store_postgres import SchedulesPostgres
from firesafe.signals.store_postgres import SignalsPostgres
from firesafe.steps.store_postgres import StepsPostgres
from firesafe.store.postgres import PostgresCore


class PostgresStore(PostgresCore, InboxPostgres, StepsPostgres, SignalsPostgres, LimitsPostgres, SchedulesPostgres,
                    AlertsPostgres, AuditPostgres):
    """The :class:`~firesafe.store.contract.Store` (and :class:`~firesafe.store.contract.ListenStore`)
    in a PostgreSQL schema."""
