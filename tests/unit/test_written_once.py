"""Each part's storage is written once: a method the two dialects would write alike lives on the part's
shared class (``store.py``, over the driver), and a dialect mixin defines only what really differs.

Given each part's SQLite and PostgreSQL mixins, when we list the methods both define themselves,
then they are exactly the differences named below (each with its reason); a new pair is either a
real difference (add it here, with why) or code to move to the shared class.
"""

from __future__ import annotations

import pytest

from firesafe.alerts.store_postgres import AlertsPostgres
from firesafe.alerts.store_sqlite import AlertsSQLite
from firesafe.inbox.store_postgres import InboxPostgres
from firesafe.inbox.store_sqlite import InboxSQLite
from firesafe.limits.store_postgres import LimitsPostgres
from firesafe.limits.store_sqlite import LimitsSQLite
from firesafe.schedules.store_postgres import SchedulesPostgres
from firesafe.schedules.store_sqlite import SchedulesSQLite
from firesafe.steps.store_postgres import StepsPostgres
from firesafe.steps.store_sqlite import StepsSQLite
from firesafe.store.postgres import PostgresCore
from firesafe.store.sqlite import SQLiteCore

DIFFERENCES: list[tuple[type, type, set[str]]] = [
    (AlertsSQLite, AlertsPostgres, {
        "alert_record",  # each checks that the caller's connection is its own kind, in a transaction
        "alert_create",  # PostgreSQL's alert_insert returns the database clock's created_at
        "alert_delivery_claim",  # one statement on PostgreSQL; SQLite reads first (no write lock when idle)
        "alert_prune",  # SQLite's queries take the cut-off; PostgreSQL's read the database clock
    }),
    (SchedulesSQLite, SchedulesPostgres, set()),
    (InboxSQLite, InboxPostgres, {
        "_inbox_insert_many",  # PostgreSQL inserts the batch in one statement
        "inbox_event_mark_handled",  # group commit on SQLite
    }),
    (StepsSQLite, StepsPostgres, {"step_record"}),  # group commit on SQLite
    (LimitsSQLite, LimitsPostgres, {
        "_lim_now",  # PostgreSQL reads the database clock inside the transaction
        "_lim_waits",  # one statement over arrays on PostgreSQL
    }),
    (SQLiteCore, PostgresCore, {
        # the driver itself: connections, transactions, parameters, the clock, schema
        "_conn", "_tx", "_read", "_execute", "_exec_many", "_list", "_filter_params", "_now", "now", "close",
        "migrate", "schema_version",
        # the job paths, batched differently (arrays and pipelines on PostgreSQL, one row at a time on SQLite)
        "job_insert_many", "job_claim", "job_finish_many", "job_finish_and_claim", "job_heartbeat_many",
        "job_rescue_many", "_move_many", "worker_process_gone", "job_get", "job_list", "dead_list",
        "job_pending", "job_delete_finished", "leader_acquire",
        "job_insert_many_async",  # into a caller's async transaction: PostgreSQL's alone, SQLite refuses
        "_insert_in",  # a batch's insert in an open transaction (a spawn's): the job_insert_many paths above
    }),
]


def _own_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items()
            if not name.startswith("__") and (callable(value) or isinstance(value, staticmethod | classmethod))}


@pytest.mark.parametrize(("sqlite", "postgres", "expected"), DIFFERENCES,
                         ids=[s.__name__.removesuffix("SQLite").removesuffix("Core") or "core"
                              for s, _p, _e in DIFFERENCES])
def test_a_dialect_defines_only_what_differs(sqlite: type, postgres: type, expected: set[str]) -> None:
    assert _own_methods(sqlite) & _own_methods(postgres) == expected
