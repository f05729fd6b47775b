"""The agent: a research loop over a deterministic fake model, one durable step per turn.

Workers import this module as ``examples.agent_run.agent:app``; the store is ``$FIRESAFE_STORE``.
Each model call is appended to ``$FAKE_MODEL_LOG`` (a JSON line when it starts and one when it
answers), which is the bill: what the model provider would charge for.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from firesafe import App, Backoff, Permanent

#: A short lease, so a killed worker's job is rescued within seconds (the default is 30 s).
app = App(lease=2.0)

QUESTION = "Which refunds failed last week, and what should we do about them?"
MAX_TURNS = 12
#: What the model answers at each turn: the agent's thoughts and tool calls, then its answer.
SCRIPT = [
    "I need last week's refunds. Calling tool: list_refunds(since='7 days ago').",
    "412 refunds, 9 failed. Calling tool: group_failures(by='error').",
    "6 failed with 'card expired', 2 with 'provider timeout', 1 with 'amount above limit'.",
    "Timeouts are transient: checking whether they were retried. Calling tool: show_trace('refund:o-88').",
    "Both timeouts succeeded on their second attempt. The expired cards need the customers.",
    "Drafting the answer with the counts and the next step for each group.",
    "Checking the draft against the data: 9 failures, 3 causes, 2 already recovered.",
    "ANSWER: 9 refunds failed; 2 timeouts recovered by retries; 6 expired cards need new card "
    "details (email the customers); 1 refund above the limit needs approval from finance.",
]
#: Turn 5 is a long one (the model reads a lot of data), which is when the worker gets killed.
LONG_TURN = 5
LATENCY = 0.1
LONG_LATENCY = 1.5


def tokens(history: list[dict[str, str]], text: str) -> dict[str, int]:
    """What a call costs: the whole history is sent again at every turn, so later turns cost more."""
    prompt = 50 + sum(len(m["content"].split()) * 4 for m in history)
    return {"prompt": prompt, "completion": len(text.split()) * 4}


def bill(entry: dict[str, Any]) -> None:
    path = os.environ.get("FAKE_MODEL_LOG", "model-calls.jsonl")
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())


async def call_model(history: list[dict[str, str]]) -> dict[str, Any]:
    """The fake model: the same history always gets the same reply, and every call is billed."""
    turn = sum(1 for m in history if m["role"] == "assistant")
    bill({"event": "start", "turn": turn, "pid": os.getpid()})
    await asyncio.sleep(LONG_LATENCY if turn == LONG_TURN else LATENCY)
    text = SCRIPT[min(turn, len(SCRIPT) - 1)]
    used = tokens(history, text)
    bill({"event": "answer", "turn": turn, "pid": os.getpid(), **used})
    return {"text": text, "tokens": used, "done": text.startswith("ANSWER:")}


#: Refunds above this amount wait for a person's approval (a durable signal) before they are issued.
REFUND_LIMIT = 500
#: The refund above the limit that the answer finds (the one that "needs approval from finance").
ABOVE_LIMIT = {"order": "o-91", "amount": 1200}
#: How long the run waits for the approval before it gives up (SignalTimeout, a dead letter).
APPROVAL_TIMEOUT = 3600


def issue_refund(refund: dict[str, Any], approval: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    """The payment provider's refund (fake): called with the step's idempotency key, as a real one would be."""
    return {**refund, "status": "refunded", "approved_by": approval.get("note"), "key": idempotency_key}


@app.job(max_attempts=3, backoff=Backoff(base=0.2, cap=1.0))
async def research_agent(ctx, question: str) -> dict[str, Any]:
    """Each turn is a durable step: a later attempt gets the recorded replies back without calling
    the model again, and carries on from the first turn that has no record. The refund above the
    limit waits, holding no worker, for a person's approval (``firesafe signal KEY approval``)."""
    history = [{"role": "user", "content": question}]
    for turn in range(MAX_TURNS):
        reply = await ctx.step(f"turn-{turn}", call_model, history)
        history.append({"role": "assistant", "content": reply["text"]})
        if reply["done"]:
            result: dict[str, Any] = {"answer": reply["text"], "turns": turn + 1}
            if ABOVE_LIMIT["amount"] > REFUND_LIMIT:
                approval = await ctx.wait_for_signal("approval", timeout=APPROVAL_TIMEOUT,
                                                     default={"approved": False, "note": "no answer in time"})
                if approval.get("approved") is True:
                    key = ctx.idempotency_key("refund-o-91")
                    result["refund"] = await ctx.step("refund-o-91", issue_refund, ABOVE_LIMIT, approval, key)
                else:
                    result["refund"] = {**ABOVE_LIMIT, "status": "declined", "note": approval.get("note")}
            return result
    raise Permanent(f"no answer after {MAX_TURNS} turns")
