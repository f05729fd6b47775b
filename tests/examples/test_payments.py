"""examples/payments: every refund applied exactly once, whatever the provider did."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from firesafe import App
from tests.examples.runner import run_example

ORDERS = {f"o-{n}": 1000 + 250 * n for n in range(1, 13)}


def test_every_refund_is_applied_exactly_once(tmp_path: Path) -> None:
    data = tmp_path / "payments"
    out = run_example("payments", data).stdout
    provider = json.loads((data / "provider.json").read_text())
    ledger, requests = provider["ledger"], provider["requests"]

    # The ledger holds each refund once, for the amount asked, under the job's step key.
    assert Counter(r["order_id"] for r in ledger.values()) == Counter(list(ORDERS))
    assert {r["order_id"]: r["amount"] for r in ledger.values()} == ORDERS
    assert sorted(ledger) == sorted(f"refund:{o}/refund" for o in ORDERS)

    # The timeouts were retried with the same key, and the provider replayed instead of refunding.
    for order in ("o-3", "o-9"):
        keys = [r["key"] for r in requests if r["order"] == order]
        assert set(keys) == {f"refund:{order}/refund"}
        assert any(r["replayed"] for r in requests if r["order"] == order)

    # The limiter: at most 5/s plus a burst of 2 in any second; nobody called during the 429's Retry-After.
    times = sorted(r["at"] for r in requests)
    assert max(sum(1 for u in times if t <= u < t + 1.0) for t in times) <= 7
    (t429,) = [r["at"] for r in requests if r["status"] == 429]
    assert not [r for r in requests if t429 + 0.25 < r["at"] < t429 + 1.0]

    app = App(f"sqlite:///{data}/firesafe.db")
    jobs = {o: app.get(f"refund:{o}") for o in ORDERS}
    assert all(j.state == "succeeded" for j in jobs.values())
    assert jobs["o-5"].attempt == 1  # the 429 used no attempt
    assert [a.error_type for a in jobs["o-3"].trace if a.outcome == "failed"] in (["TimeoutError"], ["URLError"])

    # The declined card: dead as permanent, then replayed after the fix, by support, under the same key.
    declined = jobs["o-7"]
    tried = [a for a in declined.trace if a.outcome != "deferred"]
    assert [(a.outcome, a.error_type) for a in tried] == [("failed", "CardDeclined"), ("succeeded", None)]
    assert [(e.kind, e.actor) for e in declined.events] == [("replayed", "support@shop")]
    app.close()

    # One signed alert reached the ops webhook, with the dead job's trace and the command to see it.
    alerts = [a for a in json.loads((data / "ops-alerts.json").read_text()) if a["kind"] == "dead_letter"]
    assert len(alerts) == 1 and alerts[0]["keys"] == ["refund:o-7"]
    job = alerts[0]["jobs"][0]
    assert job["show"] == "firesafe show refund:o-7"
    assert [a["error_type"] for a in job["attempts"] if a["outcome"] == "failed"] == ["CardDeclined"]
    assert "every one of the 12 refunds was applied exactly once" in out
