"""Stores: where jobs live. One contract (:class:`Store`), each dialect's core and SQL; the stores assembled
with each part's storage, and ``open_store``, are in :mod:`firesafe.stores`."""

from __future__ import annotations

import os

from firesafe.store.contract import ListenStore, Store
from firesafe.store.queries import check_version

DEFAULT_URL = "sqlite:///firesafe.db"


def resolve_url(url: str | None) -> str:
    """The URL given, else ``$FIRESAFE_STORE``, else ``sqlite:///firesafe.db``."""
    return url or os.environ.get("FIRESAFE_STORE") or DEFAULT_URL


def describe(store: Store) -> str:
    """Where a store is, for messages: its URL without a password (PostgreSQL: with the schema)."""
    return store.where


def check_schema(store: Store) -> int:
    """The store's schema version, once this code is known to be able to use it: raises
    :class:`~firesafe.errors.SchemaTooNew` when a newer firesafe migrated the store."""
    return check_version(describe(store), store.dialect, store.schema_version())


__all__ = ["DEFAULT_URL", "ListenStore", "Store", "check_schema", "describe", "resolve_url"]
