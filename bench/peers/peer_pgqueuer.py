"""pgqueuer on PostgreSQL (its own schema, ``PGQUEUER_SCHEMA``) over asyncpg, with an ``async def``
entrypoint; drains use its defaults (batches of 10, no cap on concurrent jobs), the recovery run caps
a worker at 8 jobs at a time like every other library (``batch_size=4, max_concurrent_tasks=8``).
``PEERS_PGQUEUER_CAP=8`` caps the drains the same way (the ``pgqueuer c8`` row: pgqueuer requires
``max_concurrent_tasks`` to be at least twice ``batch_size``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from importlib.metadata import version

import psycopg
from common import PG_URL, Item, Peer, arecord, main, queries, schema_name

SCHEMA = schema_name("pgqueuer")
CAP = int(os.environ.get("PEERS_PGQUEUER_CAP", "0"))  # 0: no cap (pgqueuer's default)
os.environ["PGQUEUER_SCHEMA"] = SCHEMA  # read by pgqueuer's DBSettings: every object in this schema

import asyncpg  # noqa: E402
from pgqueuer import AsyncpgDriver, QueueManager  # noqa: E402
from pgqueuer.models import Job  # noqa: E402
from pgqueuer.queries import Queries  # noqa: E402


async def connect() -> asyncpg.Connection:
    return await asyncpg.connect(PG_URL, server_settings={"search_path": SCHEMA})


def payload(item: Item) -> bytes:
    return json.dumps(item).encode()


class PgQueuer(Peer):
    storage = "postgresql"
    name = "pgqueuer"
    bulk_api = "Queries.enqueue(lists)"
    worker_note = (f"QueueManager.run(batch_size={CAP // 2}, max_concurrent_tasks={CAP}): one asyncio process"
                   if CAP else "QueueManager.run(): one asyncio process, batch_size 10, no cap on concurrent jobs")
    recovery_note = "a picked job whose heartbeat is older than heartbeat_timeout (30 s) is picked again"

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.conn: asyncpg.Connection | None = None

    def _queries(self) -> Queries:
        if self.conn is None:
            self.conn = self.loop.run_until_complete(connect())
        return Queries(AsyncpgDriver(self.conn))

    def setup(self) -> None:
        self.teardown()
        self.loop.run_until_complete(self._queries().install())

    def teardown(self) -> None:
        self.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(queries(SCHEMA)["drop_schema"])

    def versions(self) -> dict[str, str]:
        return {"pgqueuer": version("pgqueuer"), "asyncpg": version("asyncpg")}

    def enqueue(self, item: Item) -> None:
        self.loop.run_until_complete(self._queries().enqueue("work", payload(item)))

    def enqueue_bulk(self, items: list[Item]) -> None:
        q = self._queries()
        self.loop.run_until_complete(q.enqueue(["work"] * len(items), [payload(it) for it in items],
                                               [0] * len(items)))

    def close(self) -> None:
        if self.conn is not None:
            self.loop.run_until_complete(self.conn.close())
            self.conn = None

    def work(self, concurrency: int, recovery: bool) -> None:
        asyncio.run(run_worker(recovery))


async def run_worker(recovery: bool) -> None:
    qm = QueueManager(Queries(AsyncpgDriver(await connect())))

    @qm.entrypoint("work")
    async def work(job: Job) -> None:
        i, tag, sleep, sent = json.loads(job.payload or b"[]")
        await arecord(i, tag, sleep, sent)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, qm.shutdown.set)
    if recovery:
        await qm.run(batch_size=4, max_concurrent_tasks=8)
    elif CAP:
        await qm.run(batch_size=CAP // 2, max_concurrent_tasks=CAP)
    else:
        await qm.run()


if __name__ == "__main__":
    sys.exit(main(PgQueuer))
