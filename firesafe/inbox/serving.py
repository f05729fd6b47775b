"""The HTTP server of ``firesafe serve``: uvicorn, with limits on slow clients and on connections.

uvicorn (0.29 to today) cuts idle keep-alive connections, but not a client that sends its request
slowly: a connection that never finishes its request head, or trickles its body, is held for as
long as the client likes, and nothing bounds how many connections are open. Here each connection
keeps these limits (:class:`Limits`):

- **The request head** (request line and headers) must arrive within ``header_timeout`` seconds
  of the connection opening, or of the first byte of a later request on a kept-alive connection.
- **The body** must arrive within ``body_timeout`` seconds of the end of the head.
- **At most** ``max_connections`` connections are open at once. One more is answered ``503``
  (``Retry-After: 1``) at once and closed; the open ones are not disturbed.

A request cut off by a timeout is answered ``408 Request Timeout`` if no answer was started yet,
and its connection is closed; nothing of it reaches the store. Waiting for the application (the
store's commit) is not limited here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass

from firesafe.errors import ConfigError

log = logging.getLogger("firesafe.inbox")

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_MAX_CONNECTIONS = 1000
#: How long a refused connection stays open to read what the client sends (closing with unread
#: data would reset the connection, and the client could lose the 503 before reading it).
LINGER = 1.0
#: At most one warning per this many seconds about refused connections (a flood logs a few lines).
WARN_EVERY = 10.0


@dataclass(frozen=True)
class Limits:
    """How long a client may take to send a request, and how many connections may be open."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    def __post_init__(self) -> None:
        for name in ("header_timeout", "body_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
                raise ConfigError(f"{name} must be more than 0 and at most 3600 seconds, not {value!r}")
        if isinstance(self.max_connections, bool) or not isinstance(self.max_connections, int) \
                or self.max_connections < 1:
            raise ConfigError(f"max_connections must be a whole number of at least 1, not {self.max_connections!r}")


def _answer(status: int, reason: str, error: str, extra: str = "") -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, with the JSON body the endpoint uses."""
    body = (json.dumps({"error": error}) + "\n").encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n{extra}\r\n")
    return head.encode("ascii") + body


def guarded_protocol(limits: Limits) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, keeping ``limits`` (see the module's docstring)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    warned = [0.0, 0]  # when the last warning was logged, connections refused since

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn's
            self._phase: str | None = None
            self._timer: asyncio.TimerHandle | None = None
            self._refused = False
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self._refuse()
            else:
                self._enter("head")

        def data_received(self, data: bytes) -> None:
            if self._refused:  # read and dropped: the 503 is out and the connection closing
                return
            super().data_received(data)
            state = self.conn.their_state
            self._enter("head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None)

        def eof_received(self) -> None:
            if self._refused:
                return  # the transport closes
            super().eof_received()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel()
            super().connection_lost(exc)

        # -- the limits ------------------------------------------------------------------------
        def _enter(self, phase: str | None) -> None:
            """Start ``phase``'s clock, unless it is the phase already running (its deadline counts
            from its start, however the bytes are paced)."""
            if phase == self._phase:
                return
            self._cancel()
            self._phase = phase
            if phase is not None:
                seconds = limits.header_timeout if phase == "head" else limits.body_timeout
                self._timer = self.loop.call_later(seconds, self._expire, phase, seconds)

        def _cancel(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _expire(self, phase: str, seconds: float) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            what = "request head" if phase == "head" else "request body"
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.info("closed the connection of %s: no complete %s within %gs", client, what, seconds)
            cycle = self.cycle if phase == "body" else None
            if phase == "head" or (cycle is not None and not cycle.response_started):
                self.transport.write(_answer(408, "Request Timeout", f"the {what} did not arrive within {seconds:g}s"))
            if cycle is not None:  # the application reads a disconnect, and what it sends is dropped
                cycle.disconnected = True
                cycle.message_event.set()
            self.transport.close()

        def _refuse(self) -> None:
            self._refused = True
            self.connections.discard(self)
            now = time.monotonic()
            warned[1] += 1
            if now - warned[0] >= WARN_EVERY:
                log.warning("refused %d connection(s): %d are open, the most allowed (--max-connections)",
                            warned[1], limits.max_connections)
                warned[:] = [now, 0]
            self.transport.write(_answer(503, "Service Unavailable",
                                         f"too many connections (at most {limits.max_connections}); try again",
                                         "retry-after: 1\r\n"))
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self._timer = self.loop.call_later(LINGER, self.transport.close)

    return GuardedH11Protocol
