"""dramatiq on Redis, with its defaults (an actor's message is acknowledged after it ran), run by its
CLI with one worker process of 8 threads (``dramatiq --processes 1 --threads 8``)."""

from __future__ import annotations

import sys
from importlib.metadata import version

import dramatiq
from common import PREFIX, REDIS_DB, REDIS_HOST, REDIS_PORT, Item, Peer, main, record
from dramatiq.brokers.redis import RedisBroker

QUEUE = f"{PREFIX}_dramatiq"
NAMESPACE = f"{PREFIX}_dramatiq"
broker = RedisBroker(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB, namespace=NAMESPACE)
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name="work", queue_name=QUEUE)
def work(i: int, tag: str, sleep: float, sent: float) -> None:
    record(i, tag, sleep, sent)


class Dramatiq(Peer):
    storage = "redis"
    name = "dramatiq"
    bulk_api = None
    worker_note = "dramatiq --processes 1 --threads {c} (a supervisor process and one worker process)"
    recovery_note = ("unacked messages of a worker whose heartbeat is older than 60 s are requeued by "
                     "maintenance, which runs on 0.1% of broker commands (defaults)")

    def setup(self) -> None:
        self.teardown()

    def teardown(self) -> None:
        conn = broker.client
        for key in conn.scan_iter(match=f"{NAMESPACE}:*"):
            conn.delete(key)

    def versions(self) -> dict[str, str]:
        return {"dramatiq": version("dramatiq"), "redis-py": version("redis")}

    def enqueue(self, item: Item) -> None:
        work.send(*item)

    def close(self) -> None:
        broker.close()

    def worker_argv(self, concurrency: int, recovery: bool) -> list[str]:
        return [sys.executable, "-m", "dramatiq", "peer_dramatiq", "--processes", "1", "--threads", str(concurrency),
                "--path", ".", "--queues", QUEUE]


if __name__ == "__main__":
    sys.exit(main(Dramatiq))
