"""``firesafe serve`` against slow and many clients: real sockets on 127.0.0.1, short test limits.

Every wait here ends on an event (the server closing a socket, a read returning b"") or on a
deadline; the trickling client paces its bytes by waiting for the server to close its socket.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from firesafe import App, ConfigError
from firesafe.dashboard.inbox import server_config
from firesafe.inbox import Hmac
from firesafe.inbox.http import create_app
from firesafe.inbox.serving import Limits

SECRET = "whsec_test"
BODY = b'{"ref": "refs/heads/main"}'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _signed_headers(body: bytes, delivery: str) -> dict[str, str]:
    return {"X-GitHub-Delivery": delivery, "X-GitHub-Event": "push", "Content-Type": "application/json",
            "X-Hub-Signature-256": "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()}


def _head(body_length: int, delivery: str) -> bytes:
    headers = {**_signed_headers(BODY, delivery), "Host": "127.0.0.1", "Content-Length": str(body_length)}
    return (b"POST /events/github HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode()
            + b"\r\n")


class _Logged(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def serving(url: str, limits: Limits) -> Iterator[tuple[App, str, uvicorn.Server, _Logged]]:
    app = App(url)
    app.event_source("github", id_header="X-GitHub-Delivery", type_header="X-GitHub-Event", verify=Hmac(SECRET))
    port = _free_port()
    server = uvicorn.Server(server_config(create_app(app), "127.0.0.1", port, "warning", False, None, limits))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:  # uvicorn sets a flag, no event: a bounded wait for it
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    logged = _Logged()
    logging.getLogger("uvicorn.error").addHandler(logged)  # after start: uvicorn's dictConfig resets handlers
    try:
        yield app, f"http://127.0.0.1:{port}", server, logged
    finally:
        logging.getLogger("uvicorn.error").removeHandler(logged)
        server.should_exit = True
        thread.join(10)
        app.close()


@pytest.fixture
def connect() -> Iterator[Any]:
    """``connect(base, first_bytes)``: a client socket, closed at the end of the test whatever happens."""
    opened: list[socket.socket] = []

    def open_one(base: str, first: bytes = b"") -> socket.socket:
        host, port = base.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)), timeout=5)
        opened.append(sock)
        if first:
            sock.sendall(first)
        return sock

    yield open_one
    for sock in opened:
        sock.close()


def _until_closed(sock: socket.socket, within: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when that was
    (``time.monotonic()``); fails if it is still open after ``within`` seconds."""
    got = bytearray()
    deadline = time.monotonic() + within
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"the server did not close the connection within {within:g}s (got {bytes(got)!r})")
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return bytes(got), time.monotonic()
        got += chunk


def test_a_client_that_stalls_in_its_request_head_is_cut_off(sqlite_url: str, connect: Any) -> None:
    with serving(sqlite_url, Limits(header_timeout=0.5, body_timeout=5)) as (app, base, _, _):
        started = time.monotonic()
        half = connect(base, b"POST /events/github HTTP/1.1\r\nHost: 127.0.0.1\r\nX-GitHub-Deliv")
        silent = connect(base)
        for sock in (half, silent):
            answer, closed = _until_closed(sock, within=4)
            assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
            assert b"the request head did not arrive within 0.5s" in answer
            assert 0.4 <= closed - started < 3, closed - started
            sock.close()
        # On a kept-alive connection, a later request's head is timed from its first byte.
        kept = connect(base, _head(len(BODY), "d-1") + BODY)
        first = b""
        while b'"stored":true' not in first:  # the first answer, the connection kept open
            chunk = kept.recv(65536)
            assert chunk, f"the connection closed after its first request: {first!r}"
            first += chunk
        assert first.startswith(b"HTTP/1.1 200 OK\r\n") and b"connection: close" not in first.lower()
        kept.sendall(b"POST /events/github HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        second_started = time.monotonic()
        answer, closed = _until_closed(kept, within=4)
        kept.close()
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n") and 0.4 <= closed - second_started < 3
        assert [e["event_id"] for e in app.inbox.list()] == ["d-1"]


def test_a_body_that_trickles_slower_than_the_limit_is_cut_off_and_nothing_is_stored(
        sqlite_url: str, connect: Any) -> None:
    with serving(sqlite_url, Limits(header_timeout=5, body_timeout=0.6)) as (app, base, _, logged):
        sock = connect(base, _head(len(BODY), "d-slow"))
        started = time.monotonic()
        sent, answer = 0, b""
        # One byte every 0.1 s: the whole body would take len(BODY) / 10 = 2.6 s, over four times the limit.
        while sent < len(BODY) and time.monotonic() - started < 5:
            sock.sendall(BODY[sent:sent + 1])
            sent += 1
            sock.settimeout(0.1)
            try:
                answer = sock.recv(65536)  # the server's answer (or its close) ends the trickle
                break
            except TimeoutError:
                continue
        rest, closed = _until_closed(sock, within=3)
        answer += rest
        sock.close()
        assert sent < len(BODY), "the whole body went out: the server never cut it off"
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
        assert b"the request body did not arrive within 0.6s" in answer
        assert 0.5 <= closed - started < 2.5, closed - started
        assert app.inbox.list() == []
        assert not [r for r in logged.records if r.levelno >= logging.ERROR], [r.getMessage() for r in logged.records]
        # The same event sent at a normal pace is stored.
        r = httpx.post(f"{base}/events/github", content=BODY, headers=_signed_headers(BODY, "d-slow"))
        assert r.status_code == 200 and r.json()["stored"], r.text
        assert [e["event_id"] for e in app.inbox.list()] == ["d-slow"]


def test_connections_over_the_bound_are_answered_503_while_the_held_ones_stay(sqlite_url: str, connect: Any) -> None:
    with serving(sqlite_url, Limits(header_timeout=1.5, body_timeout=5, max_connections=5)) as (app, base, server, _):
        started = time.monotonic()
        held = [connect(base, b"POST /events/github HTTP/1.1\r\nHost: 127.0.0.1\r\n") for _ in range(5)]
        sixth = connect(base, _head(len(BODY), "d-6") + BODY)
        answer, _ = _until_closed(sixth, within=3)
        sixth.close()
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
        assert b"retry-after: 1\r\n" in answer and b"too many connections (at most 5)" in answer
        r = httpx.post(f"{base}/events/github", content=BODY, headers=_signed_headers(BODY, "d-7"), timeout=5)
        assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
        assert len(server.server_state.connections) == 5, "the five held connections are still open"
        assert app.inbox.list() == []
        for sock in held:  # the held ones end by the head timeout, not before
            answer, closed = _until_closed(sock, within=4)
            assert answer.startswith(b"HTTP/1.1 408"), answer
            assert 1.3 <= closed - started < 4
            sock.close()
        r = httpx.post(f"{base}/events/github", content=BODY, headers=_signed_headers(BODY, "d-7"), timeout=5)
        assert r.status_code == 200 and r.json()["stored"], r.text
        assert [e["event_id"] for e in app.inbox.list()] == ["d-7"]


def test_limits_are_checked() -> None:
    for bad in ({"header_timeout": 0}, {"body_timeout": -1}, {"max_connections": 0}, {"header_timeout": True},
                {"max_connections": 2.5}):
        with pytest.raises(ConfigError):
            Limits(**bad)  # type: ignore[arg-type]
    assert Limits() == Limits(10.0, 30.0, 1000)


def test_firesafe_serve_takes_the_limits_from_its_flags(sqlite_url: str, tmp_path: Path, connect: Any) -> None:
    (tmp_path / "serveapp.py").write_text(textwrap.dedent(f"""
        from firesafe import App
        from firesafe.inbox import Hmac
        app = App({sqlite_url!r})
        app.event_source("github", id_header="X-GitHub-Delivery", type_header="X-GitHub-Event",
                         verify=Hmac({SECRET!r}))
    """))
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "firesafe", "serve", "serveapp:app", "--no-dashboard",
                             "--port", str(port), "--header-timeout", "0.5", "--max-connections", "1"],
                            cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        for line in proc.stderr:  # each line is an event; uvicorn says when it listens
            lines.append(line)
            if "Uvicorn running on" in line or len(lines) > 50:
                break
        assert any("Uvicorn running on" in x for x in lines), lines
        base = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        held = connect(base, b"POST /events/github HTTP/1.1\r\n")
        second = connect(base, _head(len(BODY), "d-1") + BODY)
        answer, _ = _until_closed(second, within=3)
        assert answer.startswith(b"HTTP/1.1 503"), answer
        answer, closed = _until_closed(held, within=3)
        assert answer.startswith(b"HTTP/1.1 408") and closed - started < 2.5
        for sock in (held, second):
            sock.close()
        r = httpx.post(f"{base}/events/github", content=BODY, headers=_signed_headers(BODY, "d-1"), timeout=5)
        assert r.status_code == 200, r.text
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


def test_serve_help_names_the_limits() -> None:
    from click.testing import CliRunner

    from firesafe.cli.main import cli

    out: Any = CliRunner().invoke(cli, ["serve", "--help"]).output
    for flag in ("--header-timeout", "--body-timeout", "--max-connections", "10s", "30s", "1000", "408", "503"):
        assert flag in out, flag
    for args, why in ((["--header-timeout", "0"], "--header-timeout: 0s: give more than 0"),
                      (["--body-timeout", "2h"], "--body-timeout: 7200s"), (["--max-connections", "0"], "x>=1")):
        r = CliRunner().invoke(cli, ["serve", "nosuch:app", *args])
        assert r.exit_code == 2 and why in r.output, r.output
