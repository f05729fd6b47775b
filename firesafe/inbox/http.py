"""``POST /events/{source}``: webhooks in, answered 2xx only once the event is durably stored.

The handler runs later in the workers, so the endpoint answers fast. An unverified, malformed or
oversized request gets a 4xx and stores nothing; a store fault gets 503 so the sender redelivers.
A delivery of an event received before is answered 200 with ``"duplicate": true`` (and the header
``Firesafe-Duplicate: true``), also when its data changed, unless its source is ``strict`` (409).
Whatever the body or headers hold, the answer is one of these, never a 500. A signed body received
before under another event id is a duplicate (see :attr:`~firesafe.inbox.events.Source.keys_bodies`).
Slow clients and too many connections are cut off by the server (:mod:`firesafe.inbox.serving`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from firesafe.errors import FiresafeError, InvalidInput, StoreError
from firesafe.inbox.events import EventConflict, Source, json_kind
from firesafe.inbox.verify import Unverified

if TYPE_CHECKING:

    from firesafe.app import App

log = logging.getLogger("firesafe.inbox")


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _Refused(413, f"the body is {declared} bytes; this source accepts at most {limit}")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _Refused(413, f"the body is over {limit} bytes, the most this source accepts")
            chunks.append(chunk)
    except ClientDisconnect:  # the client left, or was cut off (firesafe.inbox.serving): no one to answer
        raise _Refused(400, "the connection closed before the whole body arrived") from None
    return b"".join(chunks)


def _field(payload: Any, path: str) -> Any:
    """``a.b.c`` inside a JSON object; None if absent."""
    value = payload
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def read_event(src: Source, headers: Any, body: bytes) -> tuple[str, str, Any]:
    """The (event id, type, data) of a verified request body (pure)."""
    try:
        data = json.loads(body) if body else None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _Refused(400, f"the body is not JSON: {exc}") from None
    except ValueError as exc:  # an integer past Python's digit limit
        raise _Refused(400, f"the body cannot be read as JSON: {exc}") from None
    except RecursionError:
        raise _Refused(400, "the body nests too deeply to be read as JSON") from None
    event_id = headers.get(src.id_header) if src.id_header else _field(data, src.id_field or "id")
    if event_id is None or event_id == "":
        where = f"header {src.id_header}" if src.id_header else f"field {src.id_field!r}"
        raise _Refused(400, f"no event id: expected it in the {where}")
    if isinstance(event_id, int) and not isinstance(event_id, bool):
        event_id = str(event_id)
    if not isinstance(event_id, str):
        raise _Refused(400, f"the event id must be a string or an integer, not {json_kind(event_id)}")
    if src.type_header:
        etype = headers.get(src.type_header)
    elif src.type_field:
        etype = _field(data, src.type_field)
    else:
        etype = "event"
    if not isinstance(etype, str) or not etype:
        raise _Refused(400, "no event type: expected it in the "
                            f"{'header ' + src.type_header if src.type_header else 'field ' + repr(src.type_field)}")
    return event_id, etype, data


def event_routes(app: App) -> list[Route]:
    async def receive(request: Request) -> JSONResponse:
        name = request.path_params["source"]
        src = app.inbox.sources.get(name)
        if src is None:
            return JSONResponse({"error": f"unknown event source {name!r}"}, status_code=404)
        try:
            body = await _body(request, src.max_body)
            if src.verify is not None:
                try:
                    src.verify.verify(request.headers, body, time.time())
                except Unverified as exc:
                    raise _Refused(401, str(exc)) from None
            event_id, etype, data = read_event(src, request.headers, body)
            digest = hashlib.sha256(body).hexdigest() if src.keys_bodies else None
            got = await run_in_threadpool(app.inbox.receive, name, event_id=event_id, type=etype, data=data,
                                          body_digest=digest)
        except _Refused as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        except EventConflict as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)
        except InvalidInput as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except StoreError as exc:
            log.error("event of %s not stored: %s", name, exc)
            return JSONResponse({"error": "the event could not be stored; deliver it again"}, status_code=503)
        except FiresafeError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        answer = {"stored": True, "event_id": event_id, "type": etype, "job": got.job.key if got.job else None,
                  "created": bool(got.job and got.job.created), "duplicate": got.duplicate}
        if got.changed:
            answer["changed"] = True
        if got.duplicate_of is not None:
            answer["duplicate_of"] = got.duplicate_of
        return JSONResponse(answer, headers={"Firesafe-Duplicate": "true"} if got.duplicate else None)

    return [Route("/events/{source}", receive, methods=["POST"])]


def create_app(app: App) -> Starlette:
    """An ASGI app with the event endpoint alone (``firesafe serve --no-dashboard``)."""
    return Starlette(routes=event_routes(app))
