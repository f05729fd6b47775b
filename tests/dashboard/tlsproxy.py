"""A TLS-terminating reverse proxy on 127.0.0.1, the way the docs tell users to deploy the dashboard
(nginx, Caddy, a load balancer): HTTPS to the browser, plain HTTP to the dashboard.

``rewrite_host`` passes ``Host: 127.0.0.1:PORT`` upstream (nginx's default, ``proxy_set_header
Host $proxy_host``) instead of the browser's; ``forwarded_for`` adds ``X-Forwarded-Proto: https`` and
``X-Forwarded-For`` (the browser's address as the proxy claims it). One request per connection:
the proxy asks for ``Connection: close`` and pipes the answer back until the dashboard closes.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A throwaway certificate for ``name``, made with the openssl command (the test is skipped
    without it)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        import pytest

        pytest.skip("the openssl command is missing (it makes the proxy's test certificate)")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
                    "-addext", f"subjectAltName=DNS:{name}"], check=True, capture_output=True, timeout=30)
    return cert, key


class TLSProxy:
    def __init__(self, cert: Path, key: Path, *, rewrite_host: bool = False, forwarded_for: str | None = None) -> None:
        self.upstream_port = 0  # set once the dashboard listens; may change between requests
        self.rewrite_host = rewrite_host
        self.forwarded_for = forwarded_for
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert), str(key))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[bytes] = []  # the request heads sent upstream, as sent
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="tls-proxy", daemon=True)

    def __enter__(self) -> TLSProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.listener.close()
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            raw.settimeout(30)
            client = self.context.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):  # a speculative connection closed early, say
            raw.close()
            return
        try:
            with client, socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30) as upstream:
                head, rest = self._read_head(client)
                if head is None:
                    return
                head, length = self._rewrite(head)
                self.requests.append(head)
                upstream.sendall(head + rest)
                length -= len(rest)
                while length > 0:
                    chunk = client.recv(min(length, 65536))
                    if not chunk:
                        return
                    upstream.sendall(chunk)
                    length -= len(chunk)
                while chunk := upstream.recv(65536):
                    client.sendall(chunk)
        except (OSError, ssl.SSLError):
            pass

    @staticmethod
    def _read_head(client: Any) -> tuple[bytes | None, bytes]:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk:
                return None, b""
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n", rest

    def _rewrite(self, head: bytes) -> tuple[bytes, int]:
        request_line, *lines = head.decode("latin-1").split("\r\n")[:-2]
        headers: list[tuple[str, str]] = []
        length = 0
        for line in lines:
            name, _, value = line.partition(":")
            lower = name.strip().lower()
            if lower == "content-length":
                length = int(value.strip())
            if lower == "transfer-encoding":
                raise AssertionError("the test proxy forwards bodies with a Content-Length only")
            if lower in ("connection", "keep-alive", "x-forwarded-proto", "x-forwarded-for", "x-forwarded-host"):
                continue  # hop-by-hop, or what only the proxy may say
            if lower == "host" and self.rewrite_host:
                value = f"127.0.0.1:{self.upstream_port}"
            headers.append((name, value.strip()))
        if self.forwarded_for is not None:
            headers += [("X-Forwarded-Proto", "https"), ("X-Forwarded-For", self.forwarded_for)]
        headers.append(("Connection", "close"))
        text = "\r\n".join([request_line, *(f"{k}: {v.strip()}" for k, v in headers)]) + "\r\n\r\n"
        return text.encode("latin-1"), length
