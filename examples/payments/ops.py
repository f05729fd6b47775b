"""The ops team's webhook receiver on 127.0.0.1: it checks each alert's signature and keeps it.

This is what a receiver of firesafe's ``Webhook`` sink does: verify the HMAC-SHA256 signature over
the timestamp and the body (``firesafe.alerts.verify_signature``) before trusting anything in it.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from firesafe.alerts import verify_signature
from firesafe.alerts.sinks import SIGNATURE_HEADER, TIMESTAMP_HEADER


class Inbox:
    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.alerts: list[dict[str, Any]] = []
        self.rejected = 0
        self.url = ""
        self.lock = threading.Lock()


def serve(inbox: Inbox) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            genuine = verify_signature(inbox.secret, self.headers.get(TIMESTAMP_HEADER, ""), body,
                                       self.headers.get(SIGNATURE_HEADER, ""))
            with inbox.lock:
                if genuine:
                    inbox.alerts.append(json.loads(body))
                else:
                    inbox.rejected += 1
            self.send_response(204 if genuine else 401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    inbox.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/firesafe"
    threading.Thread(target=server.serve_forever, name="ops-receiver", daemon=True).start()
    return server
