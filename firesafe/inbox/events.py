"""Events in, jobs out: each event becomes a job keyed by its source and id, so redelivery is a no-op.

An event is stored once per ``(source, event id)``; if a handler is declared for its type, a job
keyed ``<source>:<event id>`` runs the handler with all of firesafe's recovery (retries, dead
letters, replay). Storing the event and enqueueing its job are both idempotent, so a sender that
redelivers after a crash between the two completes the work instead of duplicating it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from firesafe.clock import to_datetime
from firesafe.errors import ConfigError, IdempotencyConflict, InvalidInput
from firesafe.idempotency.keys import canonical_json, check_name
from firesafe.models import Job

if TYPE_CHECKING:
    from firesafe.app import App, JobDef

MAX_EVENT_ID = 200
MAX_TYPE = 200
DEFAULT_MAX_BODY = 256 * 1024


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
        return cls(d["source"], d["id"], d["type"], d["data"], to_datetime(d["received_at"]))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Source:
    """How to read and verify the requests of one webhook source."""

    name: str
    id_field: str | None = "id"
    type_field: str | None = "type"
    id_header: str | None = None
    type_header: str | None = None
    verify: Any = None  # Hmac, StripeSignature, Bearer, or None (only for trusted networks)
    max_body: int = DEFAULT_MAX_BODY


class EventConflict(IdempotencyConflict):
    def __init__(self, source: str, event_id: str) -> None:
        Exception.__init__(self, f"event {event_id!r} of {source!r} was already received with another type or data")
        self.key = f"{source}:{event_id}"


def event_key(source: str, event_id: str) -> str:
    return f"{source}:{event_id}"


def check_event_id(event_id: object) -> str:
    if not isinstance(event_id, str) or not event_id or len(event_id) > MAX_EVENT_ID or not event_id.isprintable():
        raise InvalidInput(f"an event id must be 1 to {MAX_EVENT_ID} printable characters, not {event_id!r}")
    return event_id


class Inbox:
    """The event inbox of one app (``app.inbox``)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.handlers: dict[tuple[str, str], JobDef] = {}
        self.sources: dict[str, Source] = {}

    # -- declaring ---------------------------------------------------------------------------
    def on_event(self, source: str, type: str = "*", **job_options: Any) -> Callable[[Callable[..., Any]], JobDef]:
        check_name(source, "event source")
        if not isinstance(type, str) or not type or len(type) > MAX_TYPE:
            raise ConfigError(f"event type must be a non-empty string of at most {MAX_TYPE} characters or '*'")
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
        self.sources[name] = src
        return src

    def handler_for(self, source: str, type: str) -> JobDef | None:
        return self.handlers.get((source, type)) or self.handlers.get((source, "*"))

    # -- ingesting ---------------------------------------------------------------------------
    def ingest_many(self, source: str, events: list[tuple[str, str, Any]]) -> list[Job | None]:
        """:meth:`ingest` for a batch of ``(event id, type, data)`` of one source: the events are
        stored in one transaction and the jobs enqueued in one per handler. All or nothing: a bad
        event raises before anything is stored; a conflicting one raises after the others are
        stored (redelivering the batch is then safe)."""
        check_name(source, "event source")
        items, handlers = [], []
        for event_id, etype, data in events:
            check_event_id(event_id)
            if not isinstance(etype, str) or not etype or len(etype) > MAX_TYPE:
                raise InvalidInput(f"an event type must be 1 to {MAX_TYPE} characters, not {etype!r}")
            text = canonical_json(data, what="event data", limit=self.app.max_payload - 1024)
            handler = self.handler_for(source, etype)
            handlers.append(handler)
            items.append({"event_id": event_id, "type": etype, "data": text, "handled": handler is not None,
                          "fingerprint": hashlib.sha256(f"{etype}\n{text}".encode()).hexdigest()})
        if not items:
            return []
        stored = self.app.store.inbox_event_store_many(source, items)
        by_handler: dict[str, list[int]] = {}
        for n, (item, handler) in enumerate(zip(items, handlers, strict=True)):
            if stored[item["event_id"]][1]["fingerprint"] != item["fingerprint"]:
                raise EventConflict(source, item["event_id"])
            if handler is not None:
                by_handler.setdefault(handler.name, []).append(n)
        results: list[Job | None] = [None] * len(items)
        for name, positions in by_handler.items():
            rows = [stored[items[n]["event_id"]][1] for n in positions]
            jobs = self.app.jobs[name].enqueue_many(
                [{"args": [self._event_arg(r)], "key": event_key(source, r["event_id"])} for r in rows])
            for n, job, row in zip(positions, jobs, rows, strict=True):
                results[n] = job
                if not stored[row["event_id"]][0] and not row["handled"]:
                    self.app.store.inbox_event_mark_handled(source, row["event_id"])
        return results

    def ingest(self, source: str, *, event_id: str, type: str, data: Any = None) -> Job | None:
        """Store an event once and enqueue its handler's job once; returns that job (None if no
        handler takes this type yet: the event is kept and can be replayed later).

        Runs at most one handler job per ``(source, event id)``, however often it is delivered.
        """
        check_name(source, "event source")
        check_event_id(event_id)
        if not isinstance(type, str) or not type or len(type) > MAX_TYPE:
            raise InvalidInput(f"an event type must be 1 to {MAX_TYPE} characters, not {type!r}")
        text = canonical_json(data, what="event data", limit=self.app.max_payload - 1024)
        fingerprint = hashlib.sha256(f"{type}\n{text}".encode()).hexdigest()
        handler = self.handler_for(source, type)
        store = self.app.store
        created, row = store.inbox_event_store(source, event_id, type, text, fingerprint, handler is not None)
        if row["fingerprint"] != fingerprint:
            raise EventConflict(source, event_id)
        if handler is None:
            return None
        job = self._enqueue(handler, row)
        if not created and not row["handled"]:
            store.inbox_event_mark_handled(source, event_id)
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

    def replay_unhandled(self, source: str | None = None) -> list[Job]:
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
        if isinstance(body, bytes):
            body = body[:64 * 1024].decode("utf-8", "backslashreplace")
        if body:  # kept as readable text: NUL is escaped (PostgreSQL text cannot hold it)
            body = body[:64 * 1024].replace("\x00", "\\x00")
        self.app.store.inbox_reject(source, reason[:1000].replace("\x00", "\\x00"), body)
