"""The daily digest: every morning at 08:00 (Paris), mail the team what happened since yesterday.

Two steps: ``compose`` (read the day's activity, render the mail) and ``send`` (hand it to the mail
relay). The send carries a Message-ID made from ``ctx.idempotency_key("send")``, the same on every
attempt, and the relay drops a message whose id it has already accepted: a retry after a send that
failed *after* the relay took the mail cannot mail the team twice.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

from firesafe import App, Backoff, FakeClock

PARIS = ZoneInfo("Europe/Paris")
TEAM = "team@shop.example"


@dataclass
class Relay:
    """The mail relay. ``drop_reply_once``: message subjects whose first delivery is accepted but
    whose reply is lost (the connection drops), so the sender sees a timeout."""

    drop_reply_once: set[str] = field(default_factory=set)
    mailbox: list[dict[str, str]] = field(default_factory=list)  # what the team received
    calls: list[str] = field(default_factory=list)  # message ids, one per call
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, message_id: str, to: str, subject: str, body: str) -> str:
        with self.lock:
            self.calls.append(message_id)
            if any(m["message_id"] == message_id for m in self.mailbox):
                return "duplicate: already delivered, dropped"
            self.mailbox.append({"message_id": message_id, "to": to, "subject": subject, "body": body})
            if subject in self.drop_reply_once:
                self.drop_reply_once.discard(subject)
                raise TimeoutError("the relay did not answer within 10s")
            return "delivered"


def activity(day_start: str) -> list[str]:
    """What happened in the shop on a day (the same every time it is asked)."""
    n = int(day_start[8:10])
    return [f"{n % 7 + 3} orders", f"{n % 3} refunds", f"{n % 4 + 1} new customers"]


def build(store_url: str, clock: FakeClock, relay: Relay) -> App:
    app = App(store_url, clock=clock, lease=5.0)

    @app.schedule("0 8 * * *", tz="Europe/Paris", catchup="all", catchup_window=timedelta(days=2),
                  max_attempts=4, backoff=Backoff(base=30, cap=300, jitter="none"))
    def daily_digest(ctx, window) -> dict[str, Any]:
        day = window.start.astimezone(PARIS).date().isoformat()

        def compose() -> dict[str, str]:
            return {"subject": f"Shop digest for {day}", "body": "; ".join(activity(day))}

        mail = ctx.step("compose", compose)
        message_id = f"<{ctx.idempotency_key('send')}@shop.example>"
        status = ctx.step("send", relay.send, message_id, TEAM, mail["subject"], mail["body"])
        return {"day": day, "message_id": message_id, "relay": status}

    return app
