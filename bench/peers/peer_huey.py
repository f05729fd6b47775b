"""huey on its SQLite storage (``PEERS_STORAGE=sqlite``: WAL, SQLite's default ``synchronous``) or on
Redis (``PEERS_STORAGE=redis``: blocking BRPOP), with a thread consumer of 8 workers."""

from __future__ import annotations

import os
import sys
from importlib.metadata import version

from common import PREFIX, REDIS_DB, REDIS_HOST, REDIS_PORT, WORKDIR, Item, Peer, main, record
from huey import RedisHuey, SqliteHuey

STORAGE = os.environ.get("PEERS_STORAGE", "sqlite")
NAME = f"{PREFIX}_huey"
DB = WORKDIR / "huey.db"

if STORAGE == "sqlite":
    huey = SqliteHuey(NAME, filename=str(DB))
else:
    huey = RedisHuey(NAME, host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)


@huey.task(name="work")
def work(i: int, tag: str, sleep: float, sent: float) -> None:
    record(i, tag, sleep, sent)


class Huey(Peer):
    storage = STORAGE
    name = f"huey-{STORAGE}"
    bulk_api = None
    worker_note = "consumer, {c} thread workers (-k thread -w {c})"
    recovery_note = "a task is removed from the queue when a worker takes it: a killed worker's tasks are gone"

    def setup(self) -> None:
        self.teardown()
        if STORAGE == "sqlite":
            huey.storage.initialize_schema()

    def teardown(self) -> None:
        if STORAGE == "sqlite":
            huey.storage.close()
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.unlink(f"{DB}{suffix}")
                except FileNotFoundError:
                    pass
        else:
            conn = huey.storage.conn
            for key in conn.scan_iter(match=f"huey.*.{NAME}*"):
                conn.delete(key)

    def versions(self) -> dict[str, str]:
        out = {"huey": version("huey")}
        if STORAGE == "sqlite":
            out["synchronous"] = str(huey.storage.sql("pragma synchronous", results=True)[0][0])
            out["journal_mode"] = str(huey.storage.sql("pragma journal_mode", results=True)[0][0])
        else:
            out["redis-py"] = version("redis")
        return out

    def enqueue(self, item: Item) -> None:
        work(*item)

    def work(self, concurrency: int, recovery: bool) -> None:
        huey.create_consumer(workers=concurrency, worker_type="thread").run()


if __name__ == "__main__":
    sys.exit(main(Huey))
