"""The limits part of the sqlite store: a mixin of the store class (queries in store/sql/sqlite/limits.sql)."""

from __future__ import annotations


class LimitsSQLite:
    """Store methods of the limits part; mixed into the sqlite store class."""
