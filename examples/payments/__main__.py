"""The story: twelve refunds against a flaky payment provider, each applied exactly once.

    python -m examples.payments [--dir DIR]

The provider (a real HTTP server on 127.0.0.1) times out on two refunds after applying them,
answers one request with 429 and Retry-After, and declines an expired card. The ops team's webhook
receiver (also on 127.0.0.1) gets the alert. Every claim printed is checked; the run exits 1 if
one does not hold.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from examples.payments import ops
from examples.payments.provider import EXPIRED_CARD, RETRY_AFTER, Provider, serve
from examples.payments.shop import Shop, build

GOOD_CARD = "4242424242424242"
ORDERS = {f"o-{n}": 1000 + 250 * n for n in range(1, 13)}  # order -> amount in cents
DECLINED = "o-7"
SCRIPT = {"o-3": "timeout", "o-9": "timeout", "o-5": "429"}
LIMIT = (5, 2)  # the limiter: 5 a second, bursts of 2 (the provider allows 10 a second)
GRACE = 0.25  # a request already on its way when the 429 went out may arrive just after it
SECRET = "ops-webhook-secret"


class StoryFailed(Exception):
    pass


def check(condition: bool, claim: str) -> None:
    if not condition:
        raise StoryFailed(claim)
    print(f"  ok: {claim}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.payments", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="payments-data", help="where the stores go (made afresh)")
    data = Path(parser.parse_args(argv).dir).resolve()
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)

    provider = Provider(script=dict(SCRIPT))
    inbox = ops.Inbox(SECRET)
    servers = [serve(provider), ops.serve(inbox)]
    shop = Shop(str(data / "shop.db"))
    app, refund = build(f"sqlite:///{data}/firesafe.db", provider.url, shop, inbox.url, SECRET)
    try:
        return story(app, refund, shop, provider, inbox)
    except StoryFailed as exc:
        print(f"\nthe story did not hold: {exc}", file=sys.stderr)
        return 1
    finally:
        app.close()
        provider.dump(str(data / "provider.json"))
        (data / "ops-alerts.json").write_text(json.dumps(inbox.alerts, indent=1))
        for server in servers:
            server.shutdown()
            server.server_close()


def story(app: Any, refund: Any, shop: Shop, provider: Provider, inbox: ops.Inbox) -> int:
    print(f"1. The payment provider listens on {provider.url}; the ops webhook on {inbox.url}")
    print(f"   it will time out on {', '.join(k for k, v in SCRIPT.items() if v == 'timeout')} (after refunding!), "
          f"answer 429 to {', '.join(k for k, v in SCRIPT.items() if v == '429')}, "
          f"and decline {DECLINED}'s expired card")

    print(f"\n2. Enqueue a refund for each of {len(ORDERS)} orders, keyed refund:<order>")
    for order, amount in ORDERS.items():
        shop.add(order, amount, EXPIRED_CARD if order == DECLINED else GOOD_CARD)
        refund.enqueue(order, amount, key=f"refund:{order}")
    clicks = [refund.enqueue(order, ORDERS[order], key=f"refund:{order}") for order in ("o-1", "o-2")]
    check(not any(j.created for j in clicks), "a double click on o-1 and o-2 enqueues nothing new")

    print("\n3. Workers run them (4 threads, the limiter at 5/s with bursts of 2)")
    started = time.monotonic()
    app.work(burst=True, wait_scheduled=True, concurrency=4)
    print(f"   done in {time.monotonic() - started:.1f}s")
    print(f"   {'job':<14}{'state':<11}{'attempts':<10}{'waits':<7}what happened")
    for order in ORDERS:
        job = app.get(f"refund:{order}")
        print(f"   refund:{order:<7}{job.state!s:<11}{job.attempt:<10}{len(waits(job)):<7}{story_of(job)}")
    during, quiet = provider.calls_during_retry_after(GRACE)
    print(f"   the provider saw {len(provider.requests)} requests, at most {provider.busiest_second()} in any second; "
          f"after its 429 the next request came {quiet:.2f}s later")

    timed_out = [o for o, v in SCRIPT.items() if v == "timeout"]
    for order in timed_out:
        job = app.get(f"refund:{order}")
        tried = [a for a in job.trace if a.outcome != "deferred"]
        retried_with_key = [r for r in provider.requests if r.order == order and r.replayed]
        check([a.outcome for a in tried] == ["failed", "succeeded"] and tried[0].error_type in ("TimeoutError",
              "URLError") and len(retried_with_key) == 1,
              f"refund:{order} timed out once; its retry sent the same key and got back the refund already applied")
    throttled = app.get("refund:o-5")
    check(throttled.attempt == 1 and any(a.error_type == "HTTPError" and "429" in (a.message or "")
                                         for a in waits(throttled)),
          "refund:o-5 got the 429 and waited it out without using an attempt")
    check(during == 0, f"no worker called the provider during its Retry-After of {RETRY_AFTER}s")
    check(provider.busiest_second() <= sum(LIMIT), f"the provider never saw more than {sum(LIMIT)} requests a second")

    print(f"\n4. The declined card: refund:{DECLINED} is dead-lettered with its trace, and the ops team is told")
    dead = app.dlq.list(job="refund")
    for job in dead:
        print(f"   {job.key}  {job.reason}  {job.last_error}")
    check([j.key for j in dead] == [f"refund:{DECLINED}"] and dead[0].reason == "permanent",
          f"only refund:{DECLINED} is dead, as permanent (a declined card is not retried)")
    app.alerts.flush()
    alerts = [a for a in inbox.alerts if a["kind"] == "dead_letter"]
    for alert in alerts:
        job = alert["jobs"][0]
        print(f"   alert: {alert['title']}  (signature verified)")
        for a in job["attempts"]:
            if a["outcome"] == "deferred":
                print(f"     waited: {a['message']}")
            else:
                print(f"     attempt {a['attempt']}: {a['outcome']}  {a['error_type']}: {a['message']}")
        print(f"     {job['show']}")
    check(len(alerts) == 1 and alerts[0]["keys"] == [f"refund:{DECLINED}"] and inbox.rejected == 0,
          "one signed alert reached the ops webhook, naming the dead refund")
    check(alerts[0]["jobs"][0]["attempts"][-1]["error_type"] == "CardDeclined",
          "the alert carries the trace: the attempt and its error")

    print(f"\n5. The fix: the customer gives a new card; support replays refund:{DECLINED}")
    shop.update_card(DECLINED, GOOD_CARD)
    app.dlq.replay(keys=[f"refund:{DECLINED}"], actor="support@shop")
    app.work(burst=True, wait_scheduled=True, concurrency=4)
    job = app.get(f"refund:{DECLINED}")
    tried = [a.outcome for a in job.trace if a.outcome != "deferred"]
    print(f"   refund:{DECLINED} {job.state}, attempts {tried}, replayed by {job.events[-1].actor}")
    check(job.state == "succeeded" and tried == ["failed", "succeeded"] and job.events[-1].kind == "replayed",
          "the replay ran under the same key, with its history kept, and succeeded")

    print("\n6. Someone reruns refund:o-3 from scratch by mistake (forgetting its recorded steps)")
    before = len(provider.ledger)
    app.rerun("refund:o-3", from_scratch=True, actor="intern@shop")
    app.work(burst=True, wait_scheduled=True, concurrency=4)
    replays = [r for r in provider.requests if r.order == "o-3" and r.replayed]
    print(f"   the provider got the same Idempotency-Key again and answered with the stored refund "
          f"({len(replays)} idempotent replays for o-3 so far)")
    check(len(provider.ledger) == before and app.get("refund:o-3").state == "succeeded",
          "the rerun refunded nothing new")

    print("\n7. The provider's ledger")
    by_order = provider.refunds_by_order()
    total = sum(r["amount"] for r in provider.ledger.values())
    for refund_record in sorted(provider.ledger.values(), key=lambda r: int(r["order_id"][2:])):
        print(f"   {refund_record['id']}  {refund_record['order_id']:<5} {refund_record['amount'] / 100:>7.2f}")
    print(f"   {len(provider.ledger)} refunds, {total / 100:.2f} in all")
    check(by_order == dict.fromkeys(ORDERS, 1), f"every one of the {len(ORDERS)} refunds was applied exactly once")
    check(total == sum(ORDERS.values()), "for exactly the amounts asked")
    return 0


def waits(job: Any) -> list[Any]:
    """The attempts that only waited: for the limiter's turn, or for a provider's Retry-After."""
    return [a for a in job.trace if a.outcome == "deferred"]


def story_of(job: Any) -> str:
    """One line on what the job went through besides waiting its turn."""
    said = []
    for a in job.trace:
        if a.outcome == "deferred" and a.error_type:
            said.append(f"{a.message} (waited, no attempt used)")
        elif a.outcome in ("failed", "timed_out"):
            said.append(f"{a.error_type}: {a.message}")
    return "; then ".join(said) or "refunded"


if __name__ == "__main__":
    sys.exit(main())
