"""The limits part of the postgres store: a mixin of the store class (queries in store/sql/postgres/limits.sql)."""

from __future__ import annotations


class LimitsPostgres:
    """Store methods of the limits part; mixed into the postgres store class."""
