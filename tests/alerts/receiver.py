"""A real HTTP receiver on 127.0.0.1 for the alert tests: it checks signatures the way the docs tell
users to (plain hmac, not firesafe's helper), records what it got, and can be taken down, brought
back up on the same port, or made to hang."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def verify(secret: str, timestamp: str, body: bytes, signature: str, tolerance: float = 300) -> bool:
    """The verification snippet of docs/alerts.md, verbatim in spirit: HMAC-SHA256 of ts + "." + body."""
    expected = "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature) and abs(time.time() - int(timestamp)) <= tolerance


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    valid: bool

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """``up()`` / ``down()`` / ``hang = True``; ``got`` lists the requests answered with ``status``.

    ``trickle = ("body", 0.2)`` answers 200 with its headers at once, then a 40-byte body one byte
    every 0.2 s; ``("headers", 0.2)`` sends the whole answer, status line included, that way.
    """

    def __init__(self, secret: str = "test-secret", status: int = 200) -> None:
        self.secret = secret
        self.status = status
        self.hang = False
        self.trickle: tuple[str, float] | None = None
        self.got: list[Received] = []
        self.attempts = 0  # every request that reached the handler, answered or not
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        self._release = threading.Event()
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/firesafe"

    def up(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.attempts += 1
                if receiver.hang:
                    receiver._release.wait(30)
                    return
                if receiver.trickle is not None:
                    self.close_connection = True
                    part, every = receiver.trickle
                    head, body = b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n", b"x" * 40
                    try:
                        if part == "body":
                            self.wfile.write(head)
                        for byte in (head + body if part == "headers" else body):
                            if receiver._release.wait(every):
                                return
                            self.wfile.write(bytes([byte]))
                    except OSError:  # the sender gave up and closed the connection
                        pass
                    return
                valid = verify(receiver.secret, self.headers.get("X-Firesafe-Timestamp", "0"), body,
                               self.headers.get("X-Firesafe-Signature", ""))
                # Recorded before the answer goes out, so a sender that has its answer always finds
                # its request in ``got`` (recording after the answer raced with the caller's check).
                with receiver.arrived:
                    receiver.got.append(Received(self.path, dict(self.headers), body, valid))
                    receiver.arrived.notify_all()
                self.send_response(receiver.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def release(self) -> None:
        """Let hanging requests end (without an answer)."""
        self._release.set()

    def wait_for(self, predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self.arrived:
            while not predicate(self.got):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"receiver: gave up after {timeout:g}s waiting for {what} "
                                         f"(got {len(self.got)} request(s))")
                self.arrived.wait(min(left, 0.1))

    def close(self) -> None:
        self.release()
        self.down()
