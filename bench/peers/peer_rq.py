"""rq on Redis, with its default worker: one job at a time, each in a forked work horse."""

from __future__ import annotations

import sys
from importlib.metadata import version

from common import PREFIX, REDIS_DB, REDIS_HOST, REDIS_PORT, Item, Peer, main, record
from redis import Redis
from rq import Queue, Worker

QUEUE = f"{PREFIX}_rq"


def work(i: int, tag: str, sleep: float, sent: float) -> None:
    record(i, tag, sleep, sent)


def connect() -> Redis:
    return Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)


class Rq(Peer):
    storage = "redis"
    name = "rq"
    bulk_api = "Queue.enqueue_many"
    worker_note = "rq worker (default Worker: one job at a time, a forked work horse per job)"
    recovery_note = ("a job whose worker died is found once its execution's TTL runs out and goes to "
                     "FailedJobRegistry (retried only with Retry(...), not set here)")

    def __init__(self) -> None:
        self.conn = connect()
        self.queue = Queue(QUEUE, connection=self.conn)

    def teardown(self) -> None:
        # rq's keys have no prefix of their own: this run owns its Redis database (PEERS_REDIS_DB).
        for key in self.conn.scan_iter(match="rq:*"):
            self.conn.delete(key)

    def setup(self) -> None:
        self.teardown()

    def versions(self) -> dict[str, str]:
        return {"rq": version("rq"), "redis-py": version("redis")}

    def enqueue(self, item: Item) -> None:
        self.queue.enqueue("peer_rq.work", *item)

    def enqueue_bulk(self, items: list[Item]) -> None:
        self.queue.enqueue_many([Queue.prepare_data("peer_rq.work", args=it) for it in items])

    def close(self) -> None:
        self.conn.close()

    def work(self, concurrency: int, recovery: bool) -> None:
        conn = connect()
        Worker([Queue(QUEUE, connection=conn)], connection=conn).work(logging_level="WARNING")


if __name__ == "__main__":
    sys.exit(main(Rq))
