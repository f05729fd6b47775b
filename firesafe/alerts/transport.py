"""HTTP for the sinks: one POST that ends by its deadline, however the receiver paces its bytes.

A per-operation timeout does not bound a request: a receiver that sends one byte a second keeps
every read under it for as long as it likes. Here every network operation (pool wait, connect, TLS
handshake, each write and each read) waits at most until the request's deadline, so a request takes
at most its timeout from start to finish; past it, the request fails as a timeout. The delivery
lease (``(timeout + 5) * limit + 30`` seconds) relies on that bound.

Built on httpcore (what httpx runs on), whose connection pool takes a network backend; this module
is imported only when a sink first sends.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpcore

#: The deadline (``time.monotonic()``) of the request this thread is making, if any.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("firesafe_http_deadline", default=None)
#: Writes go out in pieces of this size, each bounded by the deadline.
WRITE_CHUNK = 16 * 1024
#: How much of a response body is read (only the start of an error page is ever shown).
MAX_BODY = 64 * 1024

TIMEOUTS = (httpcore.TimeoutException,)
FAILURES = (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol,
            httpcore.ConnectionNotAvailable, httpcore.ProxyError, OSError)


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    """The time an operation may take: its own timeout, cut to what is left before the deadline."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the request's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), WRITE_CHUNK):
            self._inner.write(buffer[start:start + WRITE_CHUNK], _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        # One call: CPython bounds the whole handshake by the socket's timeout, not each read of it.
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname,
                                                     _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout),
                                                       local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:  # pragma: no cover - unused
        raise httpcore.UnsupportedProtocol("alert sinks connect over TCP only")

    def sleep(self, seconds: float) -> None:  # pragma: no cover - the pool makes no retries
        self._inner.sleep(seconds)


def pool(ssl_context: Any) -> httpcore.ConnectionPool:
    """A connection pool whose requests keep the deadline :func:`post` sets. No proxy, no
    redirects: httpcore follows none and reads no environment."""
    return httpcore.ConnectionPool(ssl_context=ssl_context, max_connections=4, max_keepalive_connections=1,
                                   retries=0, network_backend=_DeadlineBackend())


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes  # the first MAX_BODY bytes


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def post(conn: httpcore.ConnectionPool, url: httpcore.URL, body: bytes, headers: Mapping[str, str],
         timeout: float, extensions: Mapping[str, Any] | None = None) -> Answer:
    """POST ``body`` and read the answer, all within ``timeout`` seconds (raises httpcore's
    ``TimeoutException`` past it, or another httpcore error)."""
    budget = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    with deadline(timeout), conn.stream("POST", url, headers=list(headers.items()), content=body,
                                        extensions={**(extensions or {}), "timeout": budget}) as response:
        got = bytearray()
        for chunk in response.iter_stream():
            got += chunk
            if len(got) >= MAX_BODY:
                break
        names = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
        return Answer(response.status, names, bytes(got[:MAX_BODY]))
