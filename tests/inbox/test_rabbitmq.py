"""The RabbitMQ consumer against the real broker at 127.0.0.1:5672, with real SIGKILLs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pika
import pytest

from firesafe.store.base import JobFilter

ROOT = Path(__file__).resolve().parents[2]
AMQP = os.environ.get("FIRESAFE_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/")


def _channel():
    try:
        conn = pika.BlockingConnection(pika.URLParameters(AMQP))
    except Exception as exc:
        if os.environ.get("CI"):
            pytest.fail(f"RabbitMQ unreachable at {AMQP}: {exc}", pytrace=False)
        pytest.skip(f"RabbitMQ unreachable: {exc}")
    return conn, conn.channel()


def publish(queue: str, messages: list[tuple[str | None, bytes]]) -> None:
    conn, ch = _channel()
    ch.queue_declare(queue=queue, durable=True)
    for mid, body in messages:
        ch.basic_publish("", queue, body, pika.BasicProperties(message_id=mid, type="order.paid", delivery_mode=2))
    conn.close()


def delete_queue(queue: str) -> None:
    conn, ch = _channel()
    ch.queue_delete(queue)
    conn.close()


def run_consumer(store_url: str, queue: str, crash_after: int = 0, idle: float = 1.0) -> int:
    env = {**os.environ, "FIRESAFE_TEST_CRASH_AFTER_STORE": str(crash_after)}
    code = ("import sys; from tests.inbox.rabbit_app import build; from firesafe.inbox.amqp import consume;"
            f"consume(build(sys.argv[1]), {AMQP!r}, sys.argv[2], source='orders', idle_timeout={idle})")
    proc = subprocess.run([sys.executable, "-c", code, store_url, queue], cwd=ROOT, env=env, timeout=300,
                          capture_output=True, text=True)
    if proc.returncode not in (0, -9):
        print(proc.stderr[-3000:])
    return proc.returncode


@pytest.fixture
def queue() -> str:
    name = f"fs_test_{uuid.uuid4().hex[:8]}"
    yield name
    delete_queue(name)


def test_killed_between_store_and_ack_the_redelivery_is_absorbed(store_url: str, queue: str) -> None:
    publish(queue, [("m-1", json.dumps({"order": 1}).encode())])
    assert run_consumer(store_url, queue, crash_after=1) == -9  # stored, then killed before the ack
    assert run_consumer(store_url, queue) == 0  # RabbitMQ redelivers; the inbox absorbs it
    from tests.inbox.rabbit_app import build

    app = build(store_url)
    app.work(burst=True)
    assert app.store.job_count(JobFilter()) == 1
    assert app.get("orders:m-1").result == {"order": 1}
    assert [e["event_id"] for e in app.inbox.list()] == ["m-1"]
    app.close()


def test_messages_without_id_or_json_are_kept_as_rejects(store_url: str, queue: str) -> None:
    publish(queue, [(None, json.dumps({"no": "id"}).encode()), ("m-2", b"\x00not json"),
                    ("m-3", json.dumps({"order": 3}).encode())])
    assert run_consumer(store_url, queue) == 0
    from tests.inbox.rabbit_app import build

    app = build(store_url)
    reasons = sorted(r["reason"].split(" ")[0] for r in app.store.inbox_reject_list(None, 10))
    assert reasons == ["body", "no"]
    assert [e["event_id"] for e in app.inbox.list()] == ["m-3"]
    app.close()


def test_many_messages_with_the_consumer_killed_twice_lose_nothing_and_apply_nothing_twice(
        store_url: str, queue: str) -> None:
    n = int(os.environ.get("FIRESAFE_INBOX_MESSAGES", "10000"))
    publish(queue, [(f"m-{i}", json.dumps({"order": i}).encode()) for i in range(n)])
    t0 = time.monotonic()
    assert run_consumer(store_url, queue, crash_after=n // 3) == -9
    assert run_consumer(store_url, queue, crash_after=n // 3) == -9
    assert run_consumer(store_url, queue) == 0
    from tests.inbox.rabbit_app import build

    app = build(store_url)
    stats = app.work(burst=True, concurrency=8)
    assert app.store.job_count(JobFilter()) == n
    assert app.store.job_count(JobFilter(state="succeeded")) == n
    assert stats.succeeded == n  # each handler ran once
    assert len(app.inbox.list(limit=n + 10)) == n
    print(f"{n} messages, consumer killed twice: {time.monotonic() - t0:.1f}s")
    app.close()


def publish_with(queue: str, messages: list[tuple[dict, bytes]]) -> None:
    """Publish each body with exactly these properties (no type unless given)."""
    conn, ch = _channel()
    ch.queue_declare(queue=queue, durable=True)
    for props, body in messages:
        ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2, **props))
    conn.close()


def waiting(queue: str) -> int:
    conn, ch = _channel()
    count = ch.queue_declare(queue=queue, durable=True, passive=True).method.message_count
    conn.close()
    return count


def test_poison_messages_are_kept_as_rejects_and_do_not_block_the_queue(store_url: str, queue: str) -> None:
    good = {"message_id": None, "type": "order.paid"}
    publish_with(queue, [
        ({**good, "message_id": "m-1"}, json.dumps({"order": 1}).encode()),
        ({}, b'{"id": "bad", "type": "a\\u0000b"}'),  # NUL in the type: PostgreSQL text cannot hold it
        ({"message_id": "deep"}, b"[" * 100_000 + b"]" * 100_000),
        ({"message_id": "big"}, b'{"n": ' + b"9" * 5000 + b"}"),
        ({}, b'{"id": true, "type": "order.paid"}'),
        ({}, b'{"id": "m-list", "type": ["order.paid"]}'),
        ({**good, "message_id": "m-2"}, json.dumps({"order": 2}).encode()),
    ])
    assert run_consumer(store_url, queue) == 0
    assert waiting(queue) == 0  # every message acknowledged
    from tests.inbox.rabbit_app import build

    app = build(store_url)
    reasons = [r["reason"] for r in reversed(app.store.inbox_reject_list(None, 10))]
    assert len(reasons) == 5, reasons
    assert "event type" in reasons[0] and "a\\x00b" in reasons[0]
    assert "nests too deeply" in reasons[1] and "4300 digits" in reasons[2]
    assert "id must be a string or an integer, not true" in reasons[3]
    assert "type must be a string or an integer, not a list" in reasons[4]
    assert sorted(e["event_id"] for e in app.inbox.list()) == ["m-1", "m-2"]
    app.work(burst=True)
    assert app.get("orders:m-1").result == {"order": 1} and app.get("orders:m-2").result == {"order": 2}
    app.close()


def test_a_queue_name_that_is_no_source_name_stops_the_consumer_before_it_takes_a_message(
        store_url: str, tmp_path: Path) -> None:
    queue = f"fs test {uuid.uuid4().hex[:8]}"  # a valid queue name, not a valid source name
    (tmp_path / "qapp.py").write_text(f"from tests.inbox.rabbit_app import build\napp = build({store_url!r})\n")
    try:
        publish(queue, [("m-1", json.dumps({"order": 1}).encode())])
        env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
        proc = subprocess.run([sys.executable, "-m", "firesafe", "consume", "qapp:app", "--from", AMQP,
                               "--queue", queue, "--idle-exit", "1"], cwd=ROOT, env=env, timeout=120,
                              capture_output=True, text=True)
        assert proc.returncode == 1, proc.stderr
        assert "is not a valid event source name" in proc.stderr and "--source" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert waiting(queue) == 1  # nothing taken, nothing rejected
        from tests.inbox.rabbit_app import build

        app = build(store_url)
        app.store.migrate()
        assert app.store.inbox_reject_list(None, 10) == [] and app.inbox.list() == []
        app.close()
    finally:
        delete_queue(queue)


def test_a_message_redelivered_after_its_job_was_pruned_runs_nothing(store_url: str, queue: str) -> None:
    from firesafe import Retention
    from tests.inbox.rabbit_app import build

    message = [("m-1", json.dumps({"order": 1}).encode()), ("m-2", json.dumps({"order": 2}).encode())]
    publish(queue, message)
    assert run_consumer(store_url, queue) == 0
    app = build(store_url)
    assert app.work(burst=True).succeeded == 2
    app.retention = Retention(succeeded=0.0, keys=0.0)
    assert app.prune()["succeeded"] == 2
    publish(queue, [*message, ("m-3", json.dumps({"order": 3}).encode())])  # the broker delivers them again
    assert run_consumer(store_url, queue) == 0
    assert app.work(burst=True).succeeded == 1  # only m-3
    assert [j.key for j in app.jobs_list()] == ["orders:m-3"]
    assert sorted((e["event_id"], e["handled"]) for e in app.inbox.list()) == [
        ("m-1", True), ("m-2", True), ("m-3", True)]
    app.close()


def test_consume_counts_a_message_the_inbox_refuses_once(store_url: str, queue: str, tmp_path: Path) -> None:
    """A message that parses but that the inbox refuses (data nested past its cap) is a reject, not
    also a stored event: the one-by-one fallback of its batch counts it once."""
    deep = {"id": "m-deep", "data": json.loads("[" * 300 + "]" * 300)}
    publish_with(queue, [
        ({"message_id": "m-1", "type": "order.paid"}, json.dumps({"order": 1}).encode()),
        ({"message_id": "m-deep", "type": "order.paid"}, json.dumps(deep).encode()),
        ({"message_id": "m-other", "type": "order.refunded"}, json.dumps({"order": 9}).encode()),  # no handler
        ({"message_id": "m-2", "type": "order.paid"}, json.dumps({"order": 2}).encode()),
    ])
    (tmp_path / "qapp.py").write_text(f"from tests.inbox.rabbit_app import build\napp = build({store_url!r})\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    proc = subprocess.run([sys.executable, "-m", "firesafe", "consume", "qapp:app", "--from", AMQP, "--queue", queue,
                           "--source", "orders", "--idle-exit", "1"], cwd=ROOT, env=env, timeout=120,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "stored 3, duplicates absorbed 0, rejected 1"
    assert waiting(queue) == 0
    from tests.inbox.rabbit_app import build

    app = build(store_url)
    [reject] = app.store.inbox_reject_list(None, 10)
    assert "InvalidInput: event data are nested more than" in reject["reason"]
    assert sorted(e["event_id"] for e in app.inbox.list()) == ["m-1", "m-2", "m-other"]
    app.close()
