"""The shop's side: its orders, the payment provider's client, and the refund job.

The job is the point of the example:

- its key (``refund:<order>``) makes a double click, a retried request or a re-run script one job;
- ``ctx.idempotency_key("refund")`` goes to the provider as its ``Idempotency-Key`` header, so a
  retry after a timeout (when the refund may well have been applied) cannot refund twice;
- ``ctx.step`` records the refund, so a later attempt of the job does not even ask again;
- the ``psp`` limiter keeps every worker, together, under the provider's rate; a 429 with
  ``Retry-After`` pauses it for all of them, and the job waits without using an attempt;
- a declined card is not worth retrying (``give_up_on``): the job is dead-lettered with its trace,
  and the alert carries that trace to the ops team's webhook.
"""

from __future__ import annotations

import json
import sqlite3
import urllib.error
import urllib.request
from typing import Any

from firesafe import App, Backoff
from firesafe.alerts import Webhook

#: How long the client waits for the provider: a call that takes longer fails as a timeout.
CLIENT_TIMEOUT = 0.5


class CardDeclined(Exception):
    """The provider refused the card: retrying will not help until the card is changed."""


class Shop:
    """The shop's orders, in a database of their own (not firesafe's)."""

    def __init__(self, path: str) -> None:
        self.path = path
        with self.connect() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, amount INTEGER NOT NULL,"
                         " card TEXT NOT NULL, refund_id TEXT)")

    def connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def add(self, order_id: str, amount: int, card: str) -> None:
        with self.connect() as conn:
            conn.execute("INSERT INTO orders (id, amount, card) VALUES (?, ?, ?)", (order_id, amount, card))

    def card_of(self, order_id: str) -> str:
        with self.connect() as conn:
            return conn.execute("SELECT card FROM orders WHERE id = ?", (order_id,)).fetchone()[0]

    def update_card(self, order_id: str, card: str) -> None:
        with self.connect() as conn:
            conn.execute("UPDATE orders SET card = ? WHERE id = ?", (card, order_id))

    def mark_refunded(self, order_id: str, refund_id: str) -> str:
        with self.connect() as conn:
            conn.execute("UPDATE orders SET refund_id = ? WHERE id = ?", (refund_id, order_id))
        return refund_id


def psp_refund(base_url: str, order_id: str, amount: int, card: str, idempotency_key: str) -> dict[str, Any]:
    """Ask the provider for a refund. A 429 or 503 is raised as it is (an ``HTTPError`` with its
    ``Retry-After`` header), which firesafe reads: the limiter pauses and the job waits."""
    request = urllib.request.Request(
        f"{base_url}/v1/refunds", method="POST",
        data=json.dumps({"order_id": order_id, "amount": amount, "card": card}).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key})
    try:
        with urllib.request.urlopen(request, timeout=CLIENT_TIMEOUT) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read() or b"{}")
        exc.close()
        if exc.code == 402:
            raise CardDeclined(f"refund of order {order_id} declined: {body.get('message')}") from None
        raise


def build(store_url: str, provider_url: str, shop: Shop, ops_url: str, ops_secret: str) -> tuple[App, Any]:
    """The app, its limiter and its refund job. Alerts go to the ops team's webhook, which lives
    on this machine here (hence ``allow_private=True``; a real one would be a public HTTPS URL)."""
    app = App(store_url, alerts=[Webhook(ops_url, secret=ops_secret, allow_private=True, timeout=5)])
    # The provider allows 10 requests a second; stay under it, whatever the number of workers.
    app.limiter("psp", rate=5, per=1.0, burst=2, concurrency=4)

    @app.job(queue="payments", max_attempts=6, backoff=Backoff(base=0.2, cap=1.0), give_up_on=(CardDeclined,),
             limiter="psp")
    def refund(ctx, order_id: str, amount: int) -> dict[str, Any]:
        card = shop.card_of(order_id)  # read at every attempt: a replay sees a corrected card
        key = ctx.idempotency_key("refund")  # 'refund:o-1/refund', the same on every attempt
        receipt = ctx.step("refund", psp_refund, provider_url, order_id, amount, card, idempotency_key=key)
        ctx.step("mark-refunded", shop.mark_refunded, order_id, receipt["id"])
        return receipt

    return app, refund
