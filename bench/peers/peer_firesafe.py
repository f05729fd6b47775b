"""firesafe on SQLite (``PEERS_STORAGE=sqlite``) or PostgreSQL (``PEERS_STORAGE=postgresql``), with its
defaults: WAL and ``synchronous=FULL`` on SQLite, synchronous commits on PostgreSQL, a 30 s lease.
Runs in the project's own virtual environment."""

from __future__ import annotations

import os
import sqlite3
import sys
from typing import Any

from common import PG_URL, WORKDIR, Item, Peer, main, queries, record, schema_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import firesafe  # noqa: E402
from firesafe import App  # noqa: E402

STORAGE = os.environ.get("PEERS_STORAGE", "sqlite")
#: An A/B knob: a worker prefetch other than the default (``PEERS_FIRESAFE_PREFETCH=0`` turns it off).
PREFETCH = os.environ.get("PEERS_FIRESAFE_PREFETCH")
#: Claim loops per worker process (``PEERS_FIRESAFE_LANES=2``; the default is one): the ``l2`` row, an A/B knob.
LANES = os.environ.get("PEERS_FIRESAFE_LANES")


def build_app(url: str) -> tuple[App, Any]:
    app = App(url)

    @app.job(name="work")
    def work(ctx: Any, i: int, tag: str, sleep: float, sent: float) -> None:
        record(i, tag, sleep, sent)

    return app, work


class Firesafe(Peer):
    storage = STORAGE
    name = f"firesafe-{STORAGE}"
    bulk_api = "enqueue_many"
    worker_note = (("app.work(concurrency={c}): {c} threads; while attempts are short it claims more (prefetch, "
                    "its default: as many as the threads run in 20 ms, at least {c} more, at most 512 held in all "
                    "or twice the threads if that is more)" if PREFETCH is None else
                    "app.work(concurrency={c}, prefetch=" + str(PREFETCH) + "): {c} threads, " + str(PREFETCH)
                    + " more claimed while attempts are short (PEERS_FIRESAFE_PREFETCH)")
                   + (f"; {LANES} claim loops per process share the threads (lanes={LANES})" if LANES else
                      "; 2 store transactions in flight (pipeline, its default while prefetching)"
                      if STORAGE == "postgresql" and PREFETCH != "0" else ""))
    recovery_note = "lease 30 s (default): a dead worker's attempts are rescued as lost, then retried"

    def __init__(self) -> None:
        if STORAGE == "sqlite":
            self.url = f"sqlite:///{WORKDIR / 'firesafe.db'}"
        else:
            sep = "&" if "?" in PG_URL else "?"
            self.schema = schema_name("firesafe")
            self.url = f"{PG_URL}{sep}schema={self.schema}"
        self.app: App | None = None

    def setup(self) -> None:
        self.teardown()
        self.app, self.job = build_app(self.url)
        self.app.store.migrate()

    def teardown(self) -> None:
        self.close()
        if STORAGE == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.unlink(WORKDIR / f"firesafe.db{suffix}")
                except FileNotFoundError:
                    pass
        else:
            import psycopg

            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(queries(self.schema)["drop_schema"])

    def versions(self) -> dict[str, str]:
        return {"firesafe": firesafe.__version__, "sqlite": sqlite3.sqlite_version}

    def enqueue(self, item: Item) -> None:
        self.job.enqueue(*item)

    def enqueue_bulk(self, items: list[Item]) -> None:
        self.job.enqueue_many([{"args": list(it)} for it in items])

    def close(self) -> None:
        if self.app is not None:
            self.app.close()
            self.app = None

    def work(self, concurrency: int, recovery: bool) -> None:
        app, _ = build_app(self.url)
        app.work(concurrency=concurrency, **({} if PREFETCH is None else {"prefetch": int(PREFETCH)}),
                 **({} if LANES is None else {"lanes": int(LANES)}))


if __name__ == "__main__":
    sys.exit(main(Firesafe))
