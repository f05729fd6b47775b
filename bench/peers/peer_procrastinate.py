"""procrastinate on PostgreSQL (its own schema in this run's database), with an ``async def`` task and a
worker of concurrency 8; its other defaults (LISTEN/NOTIFY, finished jobs kept)."""

from __future__ import annotations

import sys
from importlib.metadata import version

import procrastinate
import psycopg
from common import PG_URL, PREFIX, Item, Peer, arecord, main, queries, schema_name

SCHEMA = schema_name("procrastinate")
QUEUE = f"{PREFIX}_procrastinate"
app = procrastinate.App(connector=procrastinate.PsycopgConnector(
    conninfo=PG_URL, kwargs={"options": f"-c search_path={SCHEMA}"}))


@app.task(name="work", queue=QUEUE)
async def work(i: int, tag: str, sleep: float, sent: float) -> None:
    await arecord(i, tag, sleep, sent)


def kw(item: Item) -> dict[str, object]:
    return {"i": item[0], "tag": item[1], "sleep": item[2], "sent": item[3]}


class ProcrastinatePeer(Peer):
    storage = "postgresql"
    name = "procrastinate"
    bulk_api = "Task.batch_defer"
    worker_note = "app.run_worker(concurrency={c}): one asyncio process"
    recovery_note = ("a job whose worker died stays 'doing'; the app must retry stalled jobs itself "
                     "(get_stalled_jobs + retry_job, e.g. from a periodic task): nothing does it by default")

    def __init__(self) -> None:
        self.opened = False

    def setup(self) -> None:
        self.teardown()
        q = queries(SCHEMA)
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(q["create_schema"])
        app.open()
        self.opened = True
        app.schema_manager.apply_schema()

    def teardown(self) -> None:
        self.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(queries(SCHEMA)["drop_schema"])

    def versions(self) -> dict[str, str]:
        return {"procrastinate": version("procrastinate"), "psycopg": version("psycopg")}

    def enqueue(self, item: Item) -> None:
        work.defer(**kw(item))

    def enqueue_bulk(self, items: list[Item]) -> None:
        work.batch_defer(*[kw(it) for it in items])

    def close(self) -> None:
        if self.opened:
            app.close()
            self.opened = False

    def work(self, concurrency: int, recovery: bool) -> None:
        app.run_worker(queues=[QUEUE], concurrency=concurrency)


if __name__ == "__main__":
    sys.exit(main(ProcrastinatePeer))
