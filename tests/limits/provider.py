"""A provider on 127.0.0.1 for the limiter tests: counts requests, can rate-limit (429 with
Retry-After) or be down (503) for a while, and can take its time to answer.

Times are wall-clock (``time.time()``), the clock the workers' stores use too, so a request's
arrival can be compared with a limiter event recorded in the store.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class _Stamped:
    """A socket that remembers when it was accepted."""

    def __init__(self, sock: socket.socket, at: float) -> None:
        self._sock = sock
        self.accepted_at = at

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _Server(ThreadingHTTPServer):
    """Stamps each connection when it is accepted, in the server's own thread: a request's time
    does not include the start of the thread that handles it (each request has its connection)."""

    daemon_threads = True
    request_queue_size = 512  # bursts of connections must not overflow the listen backlog (a SYN retry costs 1 s)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        return _Stamped(sock, time.time()), addr

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(getattr(request, "_sock", request))


@dataclass(frozen=True)
class Hit:
    at: float
    key: str
    status: int


class Provider:
    """The server and what it saw. Use as a context manager; ``url`` is where it listens."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.hits: list[Hit] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.latency = 0.0  # seconds each answer takes
        self.down_until = 0.0  # before this time: 503 without Retry-After
        self.throttle_at: int | None = None  # the request number (1-based) that gets the first 429
        self.throttle_for = 0.0  # Retry-After of that 429: every request for that long gets one too
        self.throttled_from: float | None = None  # when the first 429 was answered
        self.date_form = False  # Retry-After as an HTTP date instead of seconds
        self.once_at: int | None = None  # the request number (1-based) that gets the only 429
        self.once_retry_after = 2.0  # the Retry-After (seconds) of that 429
        self.once_delay = 0.0  # how long that 429 takes to be answered (seconds)
        self.once_sent_at: float | None = None  # when that 429 was answered
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                provider._serve(self)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="provider", daemon=True)

    def __enter__(self) -> Provider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _decide(self, now: float) -> tuple[int, dict[str, str]]:
        with self._lock:
            number = len(self.hits) + 1
            if now < self.down_until:
                return 503, {}
            if self.once_at is not None and number == self.once_at:
                return 429, {"Retry-After": f"{self.once_retry_after:g}"}
            if self.throttle_at is not None and number >= self.throttle_at and self.throttled_from is None:
                self.throttled_from = now
            if self.throttled_from is not None and now < self.throttled_from + self.throttle_for:
                left = self.throttled_from + self.throttle_for - now
                if self.date_form:
                    return 429, {"Retry-After": formatdate(now + left, usegmt=True)}
                return 429, {"Retry-After": str(max(1, math.ceil(left)))}
            return 200, {}

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        now = getattr(handler.request, "accepted_at", None) or time.time()
        query = parse_qs(urlsplit(handler.path).query)
        key = query.get("key", ["?"])[0]
        status, headers = self._decide(now)
        with self._lock:
            self.hits.append(Hit(now, key, status))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency:
                time.sleep(self.latency)
            if status == 429 and self.once_at is not None:
                time.sleep(self.once_delay)
                self.once_sent_at = time.time()
            body = json.dumps({"key": key, "status": status}).encode()
            handler.send_response(status)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        finally:
            with self._lock:
                self.in_flight -= 1

    # -- what it saw ---------------------------------------------------------------------------
    def times(self, status: int | None = None) -> list[float]:
        with self._lock:
            return sorted(h.at for h in self.hits if status is None or h.status == status)

    def hits_of(self, prefix: str) -> list[Hit]:
        """The requests of the jobs whose key starts with ``prefix``, in arrival order."""
        with self._lock:
            return sorted((h for h in self.hits if h.key.startswith(prefix)), key=lambda h: h.at)

    def ok_keys(self) -> list[str]:
        with self._lock:
            return [h.key for h in self.hits if h.status == 200]


def max_in_window(times: list[float], window: float = 1.0) -> int:
    """The most requests in any window ``[t, t + window)`` (sliding, starting at each request)."""
    best = 0
    j = 0
    for i, t in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] < t + window:
            j += 1
        best = max(best, j - i)
    return best


def busiest_window(times: list[float], window: float = 1.0) -> tuple[int, float]:
    """``(count, start)`` of the busiest window ``[start, start + window)``."""
    best, at = 0, times[0] if times else 0.0
    j = 0
    for i, t in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] < t + window:
            j += 1
        if j - i > best:
            best, at = j - i, t
    return best, at
