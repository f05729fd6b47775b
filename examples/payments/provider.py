"""A fake payment provider on 127.0.0.1, in a thread: the part of the world the refunds touch.

It behaves like the real ones in the ways that matter here:

- ``POST /v1/refunds`` needs an ``Idempotency-Key`` header. A key it has seen gets the stored answer
  back (with ``Idempotent-Replayed: true``) and refunds nothing new: the ledger holds each key once.
- It is flaky on a script, so the story is the same on every run: for the orders listed in
  ``script`` its first answer is a 429 with ``Retry-After``, or a timeout *after* the refund was
  applied (the dangerous kind: the client cannot tell it from a refund that never happened).
- A card it cannot refund to gets a 402 ``card_declined``.
- It counts every request (when, which key, what it answered), so a test can check what the
  provider saw: the busiest second, and that nobody called during a Retry-After.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Stripe's test number for a card that is expired: refunds to it are declined.
EXPIRED_CARD = "4000000000000069"
RETRY_AFTER = 1
STALL = 1.0  # seconds a "timeout" answer takes: longer than the client waits


@dataclass
class Request:
    at: float
    key: str
    order: str
    status: int
    replayed: bool = False


@dataclass
class Provider:
    script: dict[str, str] = field(default_factory=dict)  # order -> "429" or "timeout", for its first request
    ledger: dict[str, dict[str, Any]] = field(default_factory=dict)  # idempotency key -> the refund applied
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def handle(self, key: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str], float]:
        """What to answer: (status, JSON body, extra headers, seconds to stall before answering)."""
        order = str(body.get("order_id"))
        with self.lock:
            now = time.time()
            if key in self.ledger:
                self.requests.append(Request(now, key, order, 200, replayed=True))
                return 200, self.ledger[key], {"Idempotent-Replayed": "true"}, 0.0
            trick = self.script.pop(order, None)
            if trick == "429":
                self.requests.append(Request(now, key, order, 429))
                return 429, {"error": "rate_limited"}, {"Retry-After": str(RETRY_AFTER)}, 0.0
            if body.get("card") == EXPIRED_CARD:
                self.requests.append(Request(now, key, order, 402))
                return 402, {"error": "card_declined", "message": "the card has expired"}, {}, 0.0
            refund = {"id": f"re_{len(self.ledger) + 1:04d}", "order_id": order, "amount": body.get("amount"),
                      "status": "succeeded"}
            self.ledger[key] = refund  # applied, whatever happens to the answer
            self.requests.append(Request(now, key, order, 200))
            return 200, refund, {}, STALL if trick == "timeout" else 0.0

    # -- what the story reads ------------------------------------------------------------------
    def refunds_by_order(self) -> dict[str, int]:
        with self.lock:
            counts: dict[str, int] = {}
            for refund in self.ledger.values():
                counts[refund["order_id"]] = counts.get(refund["order_id"], 0) + 1
            return counts

    def busiest_second(self) -> int:
        """The most requests that arrived within any one second."""
        with self.lock:
            times = sorted(r.at for r in self.requests)
        best, start = 0, 0
        for end, t in enumerate(times):
            while t - times[start] >= 1.0:
                start += 1
            best = max(best, end - start + 1)
        return best

    def dump(self, path: str) -> None:
        """Write the ledger and every request to a JSON file (what the example's test reads)."""
        with self.lock:
            doc = {"ledger": self.ledger, "requests": [asdict(r) for r in self.requests]}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)

    def calls_during_retry_after(self, grace: float) -> tuple[int, float]:
        """Requests that arrived while a 429's Retry-After ran, more than ``grace`` seconds after it
        (a request already on its way when the 429 went out may arrive just after it); and the
        shortest time from a 429 to the next request after that grace."""
        with self.lock:
            reqs = sorted(self.requests, key=lambda r: r.at)
        during, quiet = 0, float("inf")
        for r in reqs:
            if r.status != 429:
                continue
            later = [o.at - r.at for o in reqs if o.at - r.at > grace]
            during += sum(1 for gap in later if gap < RETRY_AFTER)
            quiet = min([quiet, *later[:1]])
        return during, quiet


def serve(provider: Provider) -> ThreadingHTTPServer:
    """Start the provider on a free port of 127.0.0.1; ``provider.url`` is its address."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                return self.answer(400, {"error": "invalid_json"}, {})
            key = self.headers.get("Idempotency-Key")
            if self.path != "/v1/refunds":
                return self.answer(404, {"error": "not_found"}, {})
            if not key:
                return self.answer(400, {"error": "missing Idempotency-Key"}, {})
            status, payload, headers, stall = provider.handle(key, body)
            if stall:
                time.sleep(stall)
            self.answer(status, payload, headers)

        def answer(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up waiting (the timeout case): nobody reads the answer
                pass

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    provider.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, name="fake-provider", daemon=True).start()
    return server
