"""The alerts part of the sqlite store: a mixin of the store class (queries in store/sql/sqlite/alerts.sql)."""

from __future__ import annotations


class AlertsSQLite:
    """Store methods of the alerts part; mixed into the sqlite store class."""
