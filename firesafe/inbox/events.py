"""Events in, jobs out: each event becomes a job keyed by its source and id, so redelivery is a no-op.

An event is stored once per ``(source, event id)``; if a handler is declared for its type, a job
keyed ``<source>:<event id>`` (see :func:`event_key`) runs the handler with all of firesafe's recovery
(retries, dead letters, replay). The stored event is marked handled only once its job is enqueued:
a sender that redelivers after a crash between the two completes the work, and a redelivery of a
handled event enqueues nothing, even after the job itself was pruned (event rows are not pruned).
"""

from __future__ import annotations

import builtins
import hashlib
import inspect
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from firesafe.clock import to_datetime
from firesafe.errors import ConfigError, IdempotencyConflict, InvalidInput
from firesafe.idempotency.keys import MAX_DEPTH as JOB_MAX_DEPTH
from firesafe.idempotency.keys import canonical_json, check_name, escaped, joined_key
from firesafe.models import Job
from firesafe.sanitize import for_store
from firesafe.store.base import JobFilter

if TYPE_CHECKING:
    from firesafe.app import App
    from firesafe.jobs import JobDef

log = logging.getLogger("firesafe.inbox")

MAX_EVENT_ID = 200
MAX_TYPE = 200
#: How deep event data may nest: one level less than a job's arguments, since the event that holds
#: the data is its handler's argument.
MAX_DEPTH = JOB_MAX_DEPTH - 1
DEFAULT_MAX_BODY = 256 * 1024
#: Bytes of the job payload kept for what wraps the event data: the source, id, type, received_at.
PAYLOAD_RESERVE = 1024


@dataclass(frozen=True)
class InboxEvent:
    """What a handler receives as ``event``."""

    source: str
    id: str
    type: str
    data: Any
    received_at: datetime

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "id": self.id, "type": self.type, "data": self.data,
                "received_at": self.received_at.timestamp()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> InboxEvent:
        return cls(d["source"], d["id"], d["type"], d["data"], to_datetime(d["received_at"]))


@dataclass(frozen=True)
class Source:
    """How to read and verify the requests of one webhook source.

    ``body_digest``: whether the SHA-256 of a request's body is a second identity of its event, so
    that the same body under another event id is a duplicate, not a new event. None (the default)
    turns it on where a replay could otherwise pass for a new event: the signature covers the body
    (``Hmac``, ``StripeSignature``) and the event id travels in a header it does not cover.

    ``strict``: refuse (:class:`EventConflict`, HTTP 409) a redelivery whose data differ from the
    stored event's. By default such a redelivery is a duplicate like any other (answered 2xx, no new
    job, the stored data stand) and is counted as ``changed`` on the stored event: providers update
    some fields between their retries (Stripe's ``pending_webhooks``), and a refusal would make them
    retry for days. Either way, a redelivery under another event type is refused.
    """

    name: str
    id_field: str | None = "id"
    type_field: str | None = "type"
    id_header: str | None = None
    type_header: str | None = None
    verify: Any = None  # Hmac, StripeSignature, Bearer, or None (only for trusted networks)
    max_body: int = DEFAULT_MAX_BODY
    body_digest: bool | None = None
    strict: bool = False

    @property
    def keys_bodies(self) -> bool:
        """Whether events of this source are keyed by the digest of their body too (see ``body_digest``)."""
        if self.body_digest is not None:
            return self.body_digest
        return self.id_header is not None and bool(getattr(self.verify, "signs_body", False))


@dataclass(frozen=True)
class Ingested:
    """What became of one received event: its handler's job (None if no handler takes its type, or
    the job was pruned); whether the event was received before (``duplicate``), with other data
    (``changed``: the stored data stand); for the same body received before under another id, that id."""

    job: Job | None
    duplicate_of: str | None = None
    duplicate: bool = False
    changed: bool = False


class EventConflict(IdempotencyConflict):
    """An event id received again under another type, or with other data from a ``strict`` source."""

    def __init__(self, source: str, event_id: str, what: str = "another type or data") -> None:
        Exception.__init__(self, f"event {event_id!r} of {source!r} was already received with {what}")
        self.key = event_key(source, event_id)


#: Escapes of the source part of an event key, ``%`` first: that part then holds no ``:``.
_SOURCE_ESCAPES = (("%", "%25"), (":", "%3A"))


def event_key(source: str, event_id: str) -> str:
    """The job key of an event: one per ``(source, event id)``, never another pair's, at most 255
    characters.

    ``SOURCE:EVENT_ID``, with ``%`` and ``:`` in the source written ``%25`` and ``%3A`` (source names
    without them keep their plain keys), so the first ``:`` splits the two parts one way only. A key
    over 255 characters, or one with the shape of a shortened key, is shortened as step keys are:
    its first 190 characters, ``#``, and the SHA-256 (hex) of the whole key.

    >>> event_key("stripe", "evt_1")
    'stripe:evt_1'
    >>> event_key("a", "b:c"), event_key("a:b", "c")
    ('a:b:c', 'a%3Ab:c')
    >>> len(event_key("s" * 60, "x" * 200))
    255
    """
    return joined_key(escaped(source, _SOURCE_ESCAPES), event_id, ":")


def check_event_id(event_id: object) -> str:
    if not isinstance(event_id, str) or not event_id or len(event_id) > MAX_EVENT_ID or not event_id.isprintable():
        raise InvalidInput(f"an event id must be 1 to {MAX_EVENT_ID} printable characters, not {event_id!r}")
    return event_id


def check_event_type(etype: object) -> str:
    """``etype`` if it is 1 to 200 printable characters (no NUL or other control character: every
    store keeps it as text)."""
    if not isinstance(etype, str) or not etype or len(etype) > MAX_TYPE or not etype.isprintable():
        raise InvalidInput(f"an event type must be 1 to {MAX_TYPE} printable characters, not {etype!r}")
    return etype


def json_kind(value: Any) -> str:
    """A JSON value in a few words, without walking it (it may nest deeply or be large).

    >>> json_kind(True), json_kind(1.5), json_kind([[1]]), json_kind({"a": 1})
    ('true', '1.5', 'a list', 'an object')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    kinds: dict[type, str] = {dict: "an object", list: "a list"}
    return kinds.get(type(value), type(value).__name__)


_NESTS = (dict, list, tuple)


def check_depth(data: Any) -> None:
    """InvalidInput if ``data`` nests lists and dicts more than :data:`MAX_DEPTH` levels deep."""
    level = [data] if isinstance(data, _NESTS) else []
    for _ in range(MAX_DEPTH):
        level = [v for c in level for v in (c.values() if isinstance(c, dict) else c) if isinstance(v, _NESTS)]
        if not level:
            return
    raise InvalidInput(f"event data are nested more than {MAX_DEPTH} levels deep")


def _data_limit(max_payload: int, source: str, event_id: str, etype: str) -> int:
    """The most bytes of event data whose handler job still fits ``max_payload``: what wraps the data
    (source, id, type, received_at; the id and type at most doubled by JSON escapes) is kept out."""
    wrap = 128 + len(source) + 2 * (len(event_id.encode()) + len(etype.encode()))
    return max_payload - max(PAYLOAD_RESERVE, wrap)


class Inbox:
    """The event inbox of one app (``app.inbox``)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.handlers: dict[tuple[str, str], JobDef] = {}
        self.sources: dict[str, Source] = {}

    # -- declaring ---------------------------------------------------------------------------
    def on_event(self, source: str, type: str = "*", **job_options: Any) -> Callable[[Callable[..., Any]], JobDef]:
        check_name(source, "event source")
        if not isinstance(type, str) or not type or len(type) > MAX_TYPE or not type.isprintable():
            raise ConfigError(f"event type must be 1 to {MAX_TYPE} printable characters or '*', not {type!r}")
        if (source, type) in self.handlers:
            raise ConfigError(f"a handler for {source!r} events of type {type!r} is declared already")

        def register(fn: Callable[..., Any]) -> JobDef:
            if inspect.iscoroutinefunction(fn):
                async def run_async(ctx: Any, event: dict) -> Any:
                    return await fn(ctx, InboxEvent.from_dict(event))

                wrapper: Callable[..., Any] = run_async
            else:
                def run_sync(ctx: Any, event: dict) -> Any:
                    return fn(ctx, InboxEvent.from_dict(event))

                wrapper = run_sync
            wrapper.__name__ = fn.__name__
            wrapper.__doc__ = fn.__doc__
            job = self.app.job(wrapper, name=job_options.pop("name", fn.__name__), **job_options)
            self.handlers[(source, type)] = job
            return job

        return register

    def source(self, name: str, **options: Any) -> Source:
        check_name(name, "event source")
        src = Source(name, **options)
        if src.id_field is None and src.id_header is None:
            raise ConfigError(f"event source {name!r} needs id_field or id_header to find the event id")
        if src.verify is not None and not hasattr(src.verify, "verify"):
            raise ConfigError(f"event source {name!r}: verify must be Hmac(...), StripeSignature(...) or Bearer(...)")
        if src.body_digest is not None and not isinstance(src.body_digest, bool):
            raise ConfigError(f"event source {name!r}: body_digest must be True, False or None (automatic)")
        if not isinstance(src.strict, bool):
            raise ConfigError(f"event source {name!r}: strict must be True or False")
        self.sources[name] = src
        return src

    def handler_for(self, source: str, type: str) -> JobDef | None:
        return self.handlers.get((source, type)) or self.handlers.get((source, "*"))

    def _check_again(self, source: str, row: dict[str, Any], item: dict[str, Any]) -> bool:
        """Whether a delivery of a stored event (``row``) brings other data: raises
        :class:`EventConflict` if it brings another type, or other data to a ``strict`` source."""
        if row["fingerprint"] == item["fingerprint"]:
            return False
        if row["type"] != item["type"]:
            raise EventConflict(source, item["event_id"], f"type {row['type']!r}, not {item['type']!r}")
        src = self.sources.get(source)
        if src is not None and src.strict:
            raise EventConflict(source, item["event_id"], f"other data (source {source!r} is strict)")
        log.info("event %r of %r was delivered again with other data: a duplicate, the stored data stand",
                 item["event_id"], source)
        return True

    # -- ingesting ---------------------------------------------------------------------------
    def _prepare(self, source: str, event_id: object, etype: object, data: Any) -> dict[str, Any]:
        """What the store keeps of one event, checked: nothing bad reaches the store or the job."""
        check_event_id(event_id)
        check_event_type(etype)
        assert isinstance(event_id, str) and isinstance(etype, str)
        text = canonical_json(data, what="event data",
                              limit=_data_limit(self.app.max_payload, source, event_id, etype), depth=MAX_DEPTH)
        check_depth(data)
        return {"event_id": event_id, "type": etype, "data": text,
                "fingerprint": hashlib.sha256(f"{etype}\n{text}".encode()).hexdigest()}

    def ingest_many(self, source: str, events: list[tuple[str, str, Any]]) -> list[Job | None]:
        """:meth:`ingest` for a batch of ``(event id, type, data)`` of one source: the events are
        stored in one transaction and the jobs enqueued in one per handler. All or nothing: a bad
        event raises before anything is stored; a conflicting one raises after the others are
        stored and before any job is enqueued (redelivering the batch is then safe)."""
        check_name(source, "event source")
        items = [self._prepare(source, event_id, etype, data) for event_id, etype, data in events]
        if not items:
            return []
        handlers = [self.handler_for(source, it["type"]) for it in items]
        stored = self.app.store.inbox_event_store_many(source, items)
        for item in items:
            self._check_again(source, stored[item["event_id"]][1], item)
        results: list[Job | None] = [None] * len(items)
        by_handler: dict[str, list[int]] = {}
        handled: dict[str, list[int]] = {}  # job key -> positions of events whose job was enqueued before
        for n, (item, handler) in enumerate(zip(items, handlers, strict=True)):
            if handler is None:
                continue
            if stored[item["event_id"]][1]["handled"]:
                handled.setdefault(event_key(source, item["event_id"]), []).append(n)
            else:
                by_handler.setdefault(handler.name, []).append(n)
        for name, positions in by_handler.items():
            rows = [stored[items[n]["event_id"]][1] for n in positions]
            jobs = self.app.jobs[name].enqueue_many(
                [{"args": [self._event_arg(r)], "key": event_key(source, r["event_id"])} for r in rows])
            for n, job in zip(positions, jobs, strict=True):
                results[n] = job
        enqueued = {items[n]["event_id"] for positions in by_handler.values() for n in positions}
        if enqueued:
            self.app.store.inbox_event_mark_handled_many(source, sorted(enqueued))
        if handled:  # redeliveries: no new job; the stored one, unless it was pruned already
            found = self.app.store.job_list(JobFilter(keys=list(handled), limit=len(handled)))
            for job in found:
                for n in handled.get(job.key, []):
                    results[n] = job
        return results

    def ingest(self, source: str, *, event_id: str, type: str, data: Any = None) -> Job | None:
        """Store an event once and enqueue its handler's job once; returns that job (None if no
        handler takes this type yet: the event is kept and can be replayed later; None too for a
        redelivery of an event whose job was pruned already).

        Runs at most one handler job per ``(source, event id)``, however often and however late it
        is delivered.
        """
        return self.receive(source, event_id=event_id, type=type, data=data).job

    def receive(self, source: str, *, event_id: str, type: str, data: Any = None,
                body_digest: str | None = None) -> Ingested:
        """:meth:`ingest`, keyed by ``body_digest`` too (the SHA-256 of the signed body, hex): an
        event whose body was received before under another id is that event again. It stores
        nothing new and runs nothing new (its answer names the first id), like a redelivery.
        A redelivery with other data is a duplicate too, counted on the stored event (see
        :class:`Source`, ``strict``).

        Runs at most one handler job per ``(source, event id)`` and per ``(source, body digest)``.
        """
        check_name(source, "event source")
        item = self._prepare(source, event_id, type, data)
        created, row = self.app.store.inbox_event_store(source, event_id, type, item["data"], item["fingerprint"],
                                                        body_digest)
        if row["event_id"] != event_id:
            log.warning("event %r of %r has the body of event %r, received before: a replay, not stored again",
                        event_id, source, row["event_id"])
            return Ingested(self._settle(row), duplicate_of=row["event_id"], duplicate=True)
        changed = not created and self._check_again(source, row, item)
        return Ingested(self._settle(row), duplicate=not created, changed=changed)

    def _settle(self, row: dict[str, Any]) -> Job | None:
        """The handler job of a stored event, enqueued once (see :meth:`ingest`)."""
        store = self.app.store
        handler = self.handler_for(row["source"], row["type"])
        if handler is None:
            return None
        if row["handled"]:  # a redelivery: its job was enqueued before (and may be pruned since)
            return store.job_get(event_key(row["source"], row["event_id"]))
        job = self._enqueue(handler, row)
        store.inbox_event_mark_handled(row["source"], row["event_id"])
        return job

    @staticmethod
    def _event_arg(row: dict[str, Any]) -> dict[str, Any]:
        return {"source": row["source"], "id": row["event_id"], "type": row["type"],
                "data": json.loads(row["data"]), "received_at": row["received_at"]}

    def _enqueue(self, handler: JobDef, row: dict[str, Any]) -> Job:
        return handler.enqueue(self._event_arg(row), key=event_key(row["source"], row["event_id"]))

    def list(self, source: str | None = None, unhandled: bool = False, limit: int = 100,
             offset: int = 0) -> list[dict[str, Any]]:
        rows = self.app.store.inbox_event_list(source, unhandled, limit, offset)
        for r in rows:
            r["data"] = json.loads(r["data"])
        return rows

    def show(self, source: str, event_id: str) -> dict[str, Any] | None:
        """One stored event (None if not stored), with its redeliveries: how many (``redeliveries``),
        how many brought other data (``changed``), and the last such data (``changed_data``), its
        fingerprint and time."""
        row = self.app.store.inbox_event_show(source, event_id)
        if row is not None:
            row["data"] = json.loads(row["data"])
            if row["changed_data"] is not None:
                row["changed_data"] = json.loads(row["changed_data"])
        return row

    def replay_unhandled(self, source: str | None = None) -> builtins.list[Job]:
        """Enqueue the handler jobs of stored events that had no handler when they arrived."""
        jobs = []
        offset = 0
        while True:
            page = self.app.store.inbox_event_list(source, True, 500, offset)
            for row in page:
                handler = self.handler_for(row["source"], row["type"])
                if handler is None:
                    offset += 1
                    continue
                jobs.append(self._enqueue(handler, row))
                self.app.store.inbox_event_mark_handled(row["source"], row["event_id"])
            if len(page) < 500:
                return jobs

    def reject(self, source: str, reason: str, body: bytes | str | None) -> None:
        """Keep a message that could not be read as an event (never silently dropped)."""
        check_name(source, "event source")
        if isinstance(body, bytes):
            body = body[:64 * 1024].decode("utf-8", "backslashreplace")
        self.app.store.inbox_reject(source, for_store(reason[:1000]), for_store(body[:64 * 1024]) if body else body)

