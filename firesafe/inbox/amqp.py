"""A RabbitMQ consumer for the inbox: a message is acknowledged only after its event is stored.

A crash between storing and acknowledging makes RabbitMQ redeliver the message, and the inbox absorbs
the redelivery (the event is stored once, its job enqueued once). A message that cannot be an event
(no id, a body that is not JSON, an id or type that is not printable text) is kept as a reject with
the reason, then acknowledged: never silently dropped, and never blocking the messages behind it.

The event id is the message's ``message_id`` property, else the body's ``id`` field; the type is
the ``type`` property, else the body's ``type`` field, else ``"message"``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from firesafe.errors import FiresafeError, InvalidInput, StoreError
from firesafe.idempotency.keys import check_name
from firesafe.inbox.events import check_event_id, check_event_type, json_kind

if TYPE_CHECKING:
    from firesafe.app import App

log = logging.getLogger("firesafe.inbox")
#: What the consumer's one-by-one fallback gives for a message it kept as a reject (None means an
#: event stored with no handler for its type).
_REJECTED = object()


@dataclass
class ConsumeStats:
    stored: int = 0
    duplicates: int = 0
    rejected: int = 0


def _text_or_integer(value: Any, what: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise InvalidInput(f"the message {what} must be a string or an integer, not {json_kind(value)}")
    return value


def parse_message(properties: Any, body: bytes) -> tuple[str, str, Any]:
    """(event id, type, data) of a message; InvalidInput (a ValueError) with the reason if it is not
    an event, whatever the body holds.

    >>> parse_message(None, b'{"id": 7, "type": "order.paid"}')
    ('7', 'order.paid', {'id': 7, 'type': 'order.paid'})
    >>> parse_message(None, b'{"id": true}')
    Traceback (most recent call last):
    ...
    firesafe.errors.InvalidInput: the message id must be a string or an integer, not true
    """
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"body is not JSON: {exc}") from None
    except ValueError as exc:  # an integer past Python's digit limit
        raise InvalidInput(f"body cannot be read as JSON: {exc}") from None
    except RecursionError:
        raise InvalidInput("body nests too deeply to be read as JSON") from None
    event_id = getattr(properties, "message_id", None) or (data.get("id") if isinstance(data, dict) else None)
    if event_id is None or event_id == "":
        raise InvalidInput("no message id (message_id property or 'id' field)")
    etype = getattr(properties, "type", None) or (data.get("type") if isinstance(data, dict) else None)
    if etype is None or etype == "":
        etype = "message"
    return (check_event_id(_text_or_integer(event_id, "id")), check_event_type(_text_or_integer(etype, "type")),
            data)


def check_source(queue: str, source: str | None) -> str:
    """The event source a consumer of ``queue`` stores into: ``source``, else the queue's name, which
    must then be a valid source name (InvalidInput before anything is consumed)."""
    if source is not None:
        return check_name(source, "event source")
    try:
        return check_name(queue, "event source")
    except InvalidInput:
        raise InvalidInput(f"the queue name {queue!r} is not a valid event source name (letters, digits, '_', "
                           "'.', ':' or '-', starting with a letter or '_', at most 128 characters): "
                           "name the source with --source (source=...)") from None


def parameters(url: str) -> Any:
    """The connection parameters of an AMQP URL, or InvalidInput if ``url`` is not one.

    >>> parameters("amqp://guest:guest@127.0.0.1:5672/").port
    5672
    >>> parameters("notaurl")
    Traceback (most recent call last):
    ...
    firesafe.errors.InvalidInput: not an AMQP URL: write amqp://user:pass@host:port/vhost (or amqps://...)
    """
    import pika

    usage = "not an AMQP URL: write amqp://user:pass@host:port/vhost (or amqps://...)"
    try:
        parts = urlsplit(url)
        ok = parts.scheme.lower() in ("amqp", "amqps") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise InvalidInput(usage)
    try:
        return pika.URLParameters(url)
    except (ValueError, IndexError, TypeError) as exc:  # pika's parser: a bad port, a bad query option...
        raise InvalidInput(f"{usage} ({exc})") from None


def consume(app: App, url: str, queue: str, *, source: str | None = None, prefetch: int = 500,
            batch: int = 200, max_messages: int | None = None, idle_timeout: float | None = None) -> ConsumeStats:
    """Consume ``queue`` until stopped (SIGTERM/SIGINT), ``max_messages``, or ``idle_timeout`` seconds
    without a message. Messages are stored in batches of up to ``batch`` (or whatever arrived before
    a 50 ms lull), then acknowledged together."""
    import pika

    source = check_source(queue, source)
    params = parameters(url)
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    channel.queue_declare(queue=queue, durable=True)
    channel.basic_qos(prefetch_count=prefetch)
    stats = ConsumeStats()
    stopping = False
    idle = 0.0
    crash_after = int(os.environ.get("FIRESAFE_TEST_CRASH_AFTER_STORE", "0"))  # fault point for the tests

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            signal.signal(sig, stop)
        except ValueError:  # not the main thread
            pass
    pending: list[tuple[int, str, str, Any, bytes]] = []  # (delivery tag, id, type, data, body)

    def flush() -> None:
        """Store the batch, then acknowledge it: a crash in between makes RabbitMQ redeliver it."""
        if not pending:
            return
        try:
            jobs = app.inbox.ingest_many(source, [(eid, etype, data) for _, eid, etype, data, _ in pending])
        except StoreError:
            raise  # nothing acknowledged: RabbitMQ redelivers the batch to the next consumer
        except FiresafeError:
            jobs = [_one(tag, eid, etype, data, body) for tag, eid, etype, data, body in pending]
        for job in jobs:
            if job is _REJECTED:  # kept as a reject, and counted, by _one
                continue
            if job is not None and not job.created:
                stats.duplicates += 1
            else:
                stats.stored += 1  # a new event: its job enqueued, or none (no handler for its type)
        if crash_after and stats.stored + stats.duplicates >= crash_after:
            os.kill(os.getpid(), signal.SIGKILL)  # stored, not yet acknowledged
        channel.basic_ack(pending[-1][0], multiple=True)
        pending.clear()

    def _one(tag: int, eid: str, etype: str, data: Any, body: bytes) -> Any:
        """The event's job (None if its type has no handler), or _REJECTED once it is kept as a reject."""
        try:
            return app.ingest(source, event_id=eid, type=etype, data=data)
        except StoreError:
            raise
        except FiresafeError as exc:
            app.inbox.reject(source, f"{type(exc).__name__}: {exc}", body)
            stats.rejected += 1
            return _REJECTED

    try:
        for method, properties, body in channel.consume(queue, inactivity_timeout=0.05):
            if method is None:  # a quiet moment: store what is pending
                flush()
                idle += 0.05
                if stopping or (idle_timeout is not None and idle >= idle_timeout):
                    break
                continue
            idle = 0.0
            try:
                event_id, etype, data = parse_message(properties, body)
            except ValueError as exc:
                flush()  # keep acknowledgements in order
                app.inbox.reject(source, str(exc), body)
                stats.rejected += 1
                channel.basic_ack(method.delivery_tag)
                continue
            pending.append((method.delivery_tag, event_id, etype, data, body))
            if len(pending) >= batch:
                flush()
            if stopping or (max_messages is not None
                            and stats.stored + stats.duplicates + stats.rejected + len(pending) >= max_messages):
                flush()
                break
        flush()
    finally:
        try:
            channel.cancel()
            connection.close()
        except Exception:
            pass
    log.info("consumer stopped: %s", stats)
    return stats
