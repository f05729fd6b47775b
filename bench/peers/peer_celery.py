"""celery on a Redis broker, tasks with ``acks_late=True`` (acknowledged after they ran), no result
backend, a worker with a thread pool of 8 (one process) and celery's other defaults."""

from __future__ import annotations

import socket
import sys
import uuid
from importlib.metadata import version

from celery import Celery
from common import PREFIX, REDIS_DB, REDIS_HOST, REDIS_PORT, Item, Peer, main, record

QUEUE = f"{PREFIX}_celery"
app = Celery("peers", broker=f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}")
app.conf.update(
    broker_transport_options={"global_keyprefix": f"{PREFIX}_celery:"},
    task_default_queue=QUEUE,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="work", acks_late=True, ignore_result=True)
def work(i: int, tag: str, sleep: float, sent: float) -> None:
    record(i, tag, sleep, sent)


class CeleryPeer(Peer):
    storage = "redis"
    name = "celery"
    bulk_api = None
    worker_note = "celery worker --pool threads -c {c} (prefetch multiplier 4, the default)"
    recovery_note = ("acks_late: a message taken by a dead worker (running or prefetched) returns to the "
                     "queue after the broker's visibility_timeout, 3600 s by default")

    def _redis(self):  # type: ignore[no-untyped-def]
        from redis import Redis

        return Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)

    def setup(self) -> None:
        self.teardown()

    def teardown(self) -> None:
        conn = self._redis()
        for key in conn.scan_iter(match=f"{PREFIX}_celery:*"):
            conn.delete(key)
        conn.close()

    def versions(self) -> dict[str, str]:
        return {"celery": version("celery"), "kombu": version("kombu"), "redis-py": version("redis")}

    def enqueue(self, item: Item) -> None:
        work.delay(*item)

    def close(self) -> None:
        app.close()

    def work(self, concurrency: int, recovery: bool) -> None:
        name = f"w{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
        app.worker_main(["worker", "--pool", "threads", "--concurrency", str(concurrency), "--loglevel", "WARNING",
                         "--hostname", name, "--queues", QUEUE])


if __name__ == "__main__":
    sys.exit(main(CeleryPeer))
