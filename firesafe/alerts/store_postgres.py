"""The alerts part of the postgres store: a mixin of the store class (queries in store/sql/postgres/alerts.sql)."""

from __future__ import annotations


class AlertsPostgres:
    """Store methods of the alerts part; mixed into the postgres store class."""
