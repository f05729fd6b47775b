"""The stores, assembled: each dialect's core (:mod:`firesafe.store`) with each part's storage
(``store_sqlite.py`` / ``store_postgres.py`` beside the part's code) mixed in, and :func:`open_store`.

This sits above the parts, so :mod:`firesafe.store` itself never imports them (docs/architecture.md, "The layers").
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from firesafe.clock import Clock
from firesafe.errors import ConfigError, InvalidInput, StoreError
from firesafe.masking import redact_url
from firesafe.store import Store, resolve_url


def open_store(url: str | None = None, clock: Clock | None = None, **options: Any) -> Store:
    """Open (not migrate) the store a URL names.

    ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``, ``postgresql://user@host/db``
    (``?schema=NAME`` picks firesafe's schema, default ``firesafe``).
    """
    url = resolve_url(url)
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "sqlite":
        parts = urlsplit(url)
        if parts.netloc:
            raise StoreError(f"SQLite URL {redact_url(url)!r} has a host; write sqlite:///relative.db or "
                             "sqlite:////abs.db")
        path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
        if "\x00" in path:
            raise StoreError(f"SQLite URL {redact_url(url)!r} names a path with a NUL character in it")
        from firesafe.stores.sqlite import SQLiteStore

        return SQLiteStore(path, clock, **options)
    if scheme in ("postgresql", "postgres"):
        try:
            from firesafe.stores.postgres import PostgresStore
        except ImportError as exc:  # pragma: no cover - psycopg is a dependency
            raise StoreError(f"the PostgreSQL store needs psycopg: {exc}") from exc
        try:
            return PostgresStore(url, clock, **options)
        except ValueError as exc:  # urllib's verdict on a malformed URL: a port out of range, a broken IPv6 host
            if isinstance(exc, StoreError | ConfigError | InvalidInput):
                raise
            if redact_url(url) != url:  # urllib may quote a piece of a password it took for the port
                raise StoreError("invalid PostgreSQL URL: it does not parse (escape '/', '?', '#', '@' and ':' "
                                 "in the user name and password as %XX)") from None
            raise StoreError(f"invalid PostgreSQL URL: {exc}") from None
    raise StoreError(
        f"unknown store URL {redact_url(url)!r}: use sqlite:///path/to/file.db or "
        "postgresql://user@host:port/database"
    )


__all__ = ["open_store"]
