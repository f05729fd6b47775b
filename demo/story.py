"""The demo story, told against a real worker and a fresh SQLite file.

A shop charges cards and mails receipts. The payment gateway times out twice before it answers; a
customer's card is declined; a bug in the receipt template fails every attempt until it is fixed.
firesafe retries what is transient, keeps duplicates from running twice, puts what cannot succeed in
the dead-letter queue with the trace of every attempt, and replays it safely once the fix is out.

Every claim the story prints is checked: if the outcome differs, the demo says what differed and
exits with status 1 (``tests/test_demo.py`` runs it).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from firesafe import App, Backoff, IdempotencyConflict, Job, Permanent

# Piped output (make demo | less, the test) gets 100 columns rather than rich's default of 80.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 100)
PACE = 0.0  # seconds between chapters, so a person can follow along in a terminal

RECEIPT = "Hello {customer_name}, we received your payment for order {order_id}."


class DemoFailed(Exception):
    """The story's outcome is not what it claims."""


def check(condition: bool, claim: str) -> None:
    if not condition:
        raise DemoFailed(claim)


class World:
    """Everything outside firesafe that the jobs touch: a payment gateway and a mail server."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.timeouts_left = {"A-1001": 2}  # the gateway times out on the first two calls for this order
        self.gateway_calls: Counter[str] = Counter()
        self.charges: dict[str, str] = {}  # order -> charge id: the external effect of a charge
        self.template_fixed = False  # "the fix": a deploy flips this
        self.receipts_sent: list[str] = []


def clock() -> str:
    return datetime.now().strftime("%H:%M:%S.%f")[:-3]


def say(ctx: Any, text: str) -> None:
    job = ctx.job
    console.print(f"  [dim]{clock()}[/]  {job.name:<12} {escape(job.key):<15} "
                  f"attempt {job.attempt}/{job.max_attempts}  {text}")


def declare(app: App, world: World) -> tuple[Any, Any]:
    """The two jobs of the shop."""

    @app.job(queue="payments", max_attempts=5, backoff=Backoff(base=0.5, factor=2.0, cap=4.0, jitter="equal"))
    def charge_card(ctx: Any, order_id: str, amount: int, card_token: str) -> dict[str, Any]:
        with world.lock:
            world.gateway_calls[order_id] += 1
            timeout = world.timeouts_left.get(order_id, 0) > 0
            if timeout:
                world.timeouts_left[order_id] -= 1
        if card_token == "tok_declined":
            say(ctx, "gateway: [red]card declined[/] -> Permanent")
            raise Permanent("card declined by the issuer (do_not_honor)")
        if timeout:
            say(ctx, "gateway: [yellow]no answer in 10 s[/] -> TimeoutError")
            raise TimeoutError("payment gateway did not answer within 10 s")
        charge_id = f"ch_{order_id.lower().replace('-', '')}"
        world.charges[order_id] = charge_id
        say(ctx, f"gateway: [green]captured {amount / 100:.2f} EUR[/] as {charge_id}")
        return {"charge_id": charge_id, "amount": amount, "status": "captured"}

    @app.job(queue="email", max_attempts=3, backoff=Backoff(base=0.4, factor=2.0, cap=2.0, jitter="equal"))
    def send_receipt(ctx: Any, order_id: str, email: str) -> dict[str, Any]:
        fields = {"order_id": order_id}
        if world.template_fixed:
            fields["customer_name"] = email.split("@")[0].title()
        try:
            body = RECEIPT.format(**fields)  # before the fix, customer_name is missing: KeyError
        except KeyError:
            say(ctx, "template: [red]KeyError 'customer_name'[/] (a bug)")
            raise
        with world.lock:
            world.receipts_sent.append(order_id)
        say(ctx, f"mail: [green]receipt sent[/] to {escape(email)}")
        return {"sent_to": email, "chars": len(body)}

    return charge_card, send_receipt


# -- rendering -------------------------------------------------------------------------------
def chapter(n: int, title: str, text: str) -> None:
    time.sleep(PACE)
    console.print()
    console.rule(f"[bold]{n}. {title}")
    console.print(text)
    console.print()


def enqueued(job: Job, what: str) -> None:
    mark = "[green]created[/]" if job.created else f"[yellow]already there[/] ({job.state})"
    console.print(f"  {escape(job.key):<15} {what:<46} -> job {job.id}, {mark}")


def trace_table(job: Job, title: str) -> Table:
    """Every attempt of a job: when, after what wait, how it ended."""
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    for col in ("#", "attempt", "started", "waited", "took", "outcome", "error"):
        t.add_column(col, justify="right" if col in ("#", "waited", "took") else "left")
    prev_end = None
    for a in job.trace:
        waited = f"{(a.started_at - prev_end).total_seconds():.2f}s" if prev_end and a.started_at else ""
        took = a.detail.get("duration")  # the function's own run time, as the worker measured it
        took = f"{took * 1000:.1f}ms" if isinstance(took, (int, float)) else ""
        style = {"succeeded": "green", "failed": "red", "timed_out": "red", "lost": "red"}.get(a.outcome or "", "")
        error = f"{a.error_type}: {a.message}" if a.error_type else ""
        t.add_row(str(a.seq), f"{a.attempt}/{job.max_attempts}",
                  a.started_at.astimezone().strftime("%H:%M:%S.%f")[:-3] if a.started_at else "",
                  waited, took, f"[{style}]{a.outcome}[/]" if style else str(a.outcome), escape(error))
        prev_end = a.ended_at
    return t


def events_table(job: Job) -> Table:
    t = Table(title=f"events of {job.key}", box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    for col in ("at", "event", "by"):
        t.add_column(col)
    for e in job.events:
        t.add_row(e.at.astimezone().strftime("%H:%M:%S.%f")[:-3], e.kind, escape(e.actor or ""))
    return t


def tail(text: str | None, lines: int = 4) -> str:
    return "\n".join((text or "").rstrip().splitlines()[-lines:])


def race_replays(app: App, key: str, actors: list[str]) -> dict[str, Any]:
    """Replay one dead job from several threads released at the same instant."""
    barrier = threading.Barrier(len(actors))
    results: dict[str, Any] = {}

    def replay(actor: str) -> None:
        barrier.wait()
        results[actor] = app.dlq.replay(keys=[key], actor=actor)

    threads = [threading.Thread(target=replay, args=(a,)) for a in actors]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def store_url(db: Path) -> str:
    """A sqlite:/// URL for the file, relative to the current folder when it is inside it."""
    try:
        return f"sqlite:///{db.relative_to(Path.cwd())}"
    except ValueError:
        return f"sqlite:///{db}"


# -- the story -------------------------------------------------------------------------------
def story(folder: Path) -> None:
    started = time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "demo.db"
    for old in (db, folder / "demo.db-wal", folder / "demo.db-shm"):  # a fresh store; nothing else is touched
        old.unlink(missing_ok=True)
    url = store_url(db)
    world = World()
    app = App(url)
    charge_card, send_receipt = declare(app, world)

    console.print(Panel.fit(
        "[bold]firesafe demo[/]: the recovery layer for background jobs\n"
        f"store: {url}  (a fresh SQLite file: WAL, synchronous=FULL)\n"
        "jobs:  charge_card (queue payments, 5 attempts), send_receipt (queue email, 3 attempts)",
        border_style="cyan"))

    # 1 ------------------------------------------------------------------------------------
    chapter(1, "Enqueue under keys",
            "Each job has a key: its identity. The order id makes a natural one, so a retried web request "
            "or a double click cannot create a second charge.")
    charge = charge_card.enqueue("A-1001", 4200, card_token="tok_visa_4242", key="charge:A-1001")
    enqueued(charge, "charge_card('A-1001', 4200, card_token=...)")
    check(charge.created and charge.key == "charge:A-1001", "the first enqueue creates the job")
    receipt = send_receipt.enqueue("A-1001", "ada@example.com", key="receipt:A-1001")
    enqueued(receipt, "send_receipt('A-1001', 'ada@example.com')")
    declined = charge_card.enqueue("B-2002", 1500, card_token="tok_declined", key="charge:B-2002")
    enqueued(declined, "charge_card('B-2002', 1500, card_token=...)")

    # 2 ------------------------------------------------------------------------------------
    chapter(2, "A duplicate does nothing; a conflict is an error",
            "The same key with the same arguments returns the stored job. The same key with other "
            "arguments is refused: that is a bug in the caller, not a second order.")
    again = charge_card.enqueue("A-1001", 4200, card_token="tok_visa_4242", key="charge:A-1001")
    enqueued(again, "charge_card('A-1001', 4200, card_token=...)")
    check(not again.created and again.id == charge.id, "a duplicate enqueue returns the same job, created=False")
    try:
        charge_card.enqueue("A-1001", 9900, card_token="tok_visa_4242", key="charge:A-1001")
    except IdempotencyConflict as exc:
        what = "charge_card('A-1001', 9900, card_token=...)"
        console.print(f"  {'charge:A-1001':<15} {what:<46} -> [red]IdempotencyConflict[/]: {escape(str(exc))}")
        check("charge:A-1001" in str(exc), "the conflict names the key")
    else:
        raise DemoFailed("a conflicting enqueue must raise IdempotencyConflict")
    check(app.get("charge:A-1001").args[:2] == ["A-1001", 4200], "the conflict stored nothing")

    # 3 ------------------------------------------------------------------------------------
    chapter(3, "Run a worker: transient failures retry with backoff",
            "app.work(burst=True, wait_scheduled=True) runs a worker in this process until nothing is "
            "left, waiting for retries. Each line is printed by the job itself.")
    stats = app.work(burst=True, wait_scheduled=True, concurrency=4)
    console.print()
    charge = app.get("charge:A-1001")
    console.print(trace_table(charge, "trace of charge:A-1001"))
    console.print(f"  state [green]{charge.state}[/], result {charge.result}")
    check(charge.state == "succeeded", "the flaky charge succeeds")
    check([a.outcome for a in charge.trace] == ["failed", "failed", "succeeded"],
          "the flaky charge took three attempts: two timeouts, then success")
    check([a.error_type for a in charge.trace[:2]] == ["TimeoutError", "TimeoutError"], "both failures were timeouts")
    check(all((b.started_at - a.ended_at).total_seconds() >= 0.2 for a, b in pairwise(charge.trace)),
          "each retry waited its backoff")
    check(world.gateway_calls["A-1001"] == 3 and world.charges == {"A-1001": "ch_a1001"},
          "the card was charged exactly once")
    check(stats.succeeded == 1 and stats.dead == 2, f"the worker saw 1 success and 2 dead jobs (saw {stats})")

    console.print("\n  Enqueue the paid order again (say the web request was retried):")
    again = charge_card.enqueue("A-1001", 4200, card_token="tok_visa_4242", key="charge:A-1001")
    enqueued(again, "charge_card('A-1001', 4200, card_token=...)")
    console.print(f"  -> the stored result comes back: {again.result}")
    app.work(burst=True, concurrency=4)
    check(not again.created and again.result == charge.result, "a duplicate of a finished job returns its result")
    check(world.gateway_calls["A-1001"] == 3 and len(app.get("charge:A-1001").trace) == 3,
          "the duplicate ran nothing: no fourth gateway call, no new attempt")
    console.print("  -> and nothing ran: still 3 gateway calls, still 3 attempts in the trace.")

    # 4 ------------------------------------------------------------------------------------
    chapter(4, "Poison jobs land in the dead-letter queue, with their trace",
            "A Permanent error goes dead at once; an error on every attempt goes dead when the attempts "
            "run out. Dead jobs keep their arguments (secrets masked), their reason and every attempt.")
    dead = app.dlq.list()
    t = Table(title="app.dlq.list()", box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    for col in ("key", "job", "reason", "attempts", "last error"):
        t.add_column(col)
    for j in dead:
        t.add_row(escape(j.key), j.name, j.reason or "", str(j.runs), escape(j.last_error or ""))
    console.print(t)
    for j in dead:
        console.print(f"  arguments of {escape(j.key)} (secrets masked): {escape(str(j.masked_arguments()))}")
    console.print()
    check(sorted(j.key for j in dead) == ["charge:B-2002", "receipt:A-1001"], "two jobs are dead")
    declined = app.get("charge:B-2002")
    check(declined.reason == "permanent" and len(declined.trace) == 1, "the declined card died on its first attempt")
    check(declined.masked_arguments()["card_token"] == "********", "the card token is masked")

    receipt = app.get("receipt:A-1001")
    console.print(trace_table(receipt, "trace of receipt:A-1001 (app.get(key).trace)"))
    last = receipt.trace[-1]
    console.print(Panel(escape(tail(last.traceback)), title=f"traceback of attempt {last.attempt} (last lines)",
                        border_style="red", expand=False))
    check(receipt.state == "dead" and receipt.reason == "exhausted", "the receipt job is dead: attempts exhausted")
    check([a.outcome for a in receipt.trace] == ["failed"] * 3 and all(a.error_type == "KeyError"
                                                                      for a in receipt.trace),
          "all three receipt attempts failed with KeyError")
    check(all(a.traceback and "KeyError" in a.traceback for a in receipt.trace), "each attempt kept its traceback")
    check(world.receipts_sent == [], "no receipt was sent")

    # 5 ------------------------------------------------------------------------------------
    chapter(5, "Fix, then replay under the same key",
            "The template bug is fixed and deployed. A dry run shows what a replay would do; the replay "
            "keeps the key and the history, renews the attempt budget and records who replayed it.")
    world.template_fixed = True
    console.print("  [bold]deploy:[/] the receipt template now gets customer_name")
    dry = app.dlq.replay(keys=["receipt:A-1001"], dry_run=True)
    console.print(f"  app.dlq.replay(keys=['receipt:A-1001'], dry_run=True)  ->  would replay {dry.keys}")
    check(dry.keys == ["receipt:A-1001"] and app.get("receipt:A-1001").state == "dead", "a dry run changes nothing")
    console.print("  Two operators press replay at the same moment (two threads, one barrier):")
    results = race_replays(app, "receipt:A-1001", ["ann@ops", "bob@oncall"])
    for actor, res in results.items():
        console.print(f"    app.dlq.replay(keys=['receipt:A-1001'], actor={actor!r}) -> replayed {res.keys}",
                      soft_wrap=True)
    check(sorted(len(r.keys) for r in results.values()) == [0, 1], "two replays at once move the job once")
    replayer = next(actor for actor, r in results.items() if r.keys)
    console.print()
    app.work(burst=True, wait_scheduled=True, concurrency=4)
    console.print()
    receipt = app.get("receipt:A-1001")
    console.print(trace_table(receipt, "trace of receipt:A-1001 after the replay"))
    console.print(events_table(receipt))
    check(receipt.state == "succeeded" and receipt.id == dead[[j.key for j in dead].index("receipt:A-1001")].id,
          "the replayed job succeeds as the same job")
    check([a.outcome for a in receipt.trace] == ["failed", "failed", "failed", "succeeded"],
          "the history stays: three failures, then the success")
    check(receipt.trace[-1].attempt == 1, "the replay renewed the attempt budget (attempt 1 again)")
    replays = [e for e in receipt.events if e.kind == "replayed"]
    check(len(replays) == 1 and replays[0].actor == replayer, "the replay is recorded once, with who")
    check(world.receipts_sent == ["A-1001"], "exactly one receipt was sent")

    # summary -------------------------------------------------------------------------------
    chapter(6, "Summary", "What the store holds now (app.jobs_list()):")
    jobs = app.jobs_list(limit=100)
    by_state = Counter(str(j.state) for j in jobs)
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("key", "job", "state", "attempts", "outcome"):
        t.add_column(col)
    for j in sorted(jobs, key=lambda j: j.id):
        full = app.get(j.key)
        replayed = any(e.kind == "replayed" for e in full.events)
        outcome = (f"result {j.result}" if j.state == "succeeded" else f"{j.reason}: {j.last_error}")
        if replayed:
            outcome = "replayed after the fix, then " + outcome
        colour = {"succeeded": "green", "dead": "red"}.get(str(j.state), "")
        t.add_row(escape(j.key), j.name, f"[{colour}]{j.state}[/]", str(len(full.trace)), escape(outcome))
    console.print(t)
    counts = ", ".join(f"{n} {state}" for state, n in sorted(by_state.items()))
    console.print(f"  jobs by state: {counts}")
    console.print(f"  gateway calls: {dict(world.gateway_calls)}, cards charged: {world.charges}, "
                  f"receipts sent: {world.receipts_sent}")
    check(by_state == Counter({"succeeded": 2, "dead": 1}), "two jobs succeeded and one (the declined card) is dead")
    console.print(f"\n[bold green]The story held:[/] every claim above was checked "
                  f"({time.monotonic() - started:.1f}s).")
    console.print("Explore the store yourself with the CLI:")
    console.print(f"  [bold].venv/bin/firesafe show receipt:A-1001 --store {url}[/]", soft_wrap=True)
    console.print(f"  [bold].venv/bin/firesafe dlq ls --store {url}[/]", soft_wrap=True)
    app.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m demo", description="firesafe's recovery story on a fresh SQLite file.")
    p.add_argument("--dir", default="demo-data", help="folder for the demo's SQLite file demo.db, made afresh "
                   "(default ./demo-data)")
    p.add_argument("--pace", type=float, default=None,
                   help="seconds between chapters (default 1.5 in a terminal, 0 otherwise)")
    args = p.parse_args(argv)
    global PACE
    PACE = args.pace if args.pace is not None else (1.5 if sys.stdout.isatty() else 0.0)
    try:
        story(Path(args.dir).resolve())
    except DemoFailed as exc:
        console.print(f"\n[bold red]demo failed:[/] {escape(str(exc))}")
        return 1
    return 0
