"""examples/agent_run: the worker is SIGKILLed at turn 5 and the run resumes at turn 5."""

from __future__ import annotations

import json
from pathlib import Path

from firesafe import App
from tests.examples.runner import run_example

TURNS = 8
KILLED_AT = 5


def test_the_killed_agent_resumes_from_its_last_completed_turn(tmp_path: Path) -> None:
    data = tmp_path / "agent-run"
    out = run_example("agent_run", data).stdout
    assert "kill -9" in out and "attempt 2 restored turns 0 to 4 from their records" in out
    assert "the job was waiting for it and runs now" in out

    app = App(f"sqlite:///{data}/agent.db")
    job = app.get("agent:weekly-refunds")
    assert job.state == "succeeded" and job.result["turns"] == TURNS
    assert job.result["answer"].startswith("ANSWER: 9 refunds failed")
    assert [a.outcome for a in job.trace] == ["lost", "deferred", "succeeded"]
    killed, resumed, approved = job.trace
    assert killed.worker != resumed.worker  # a different process took over
    steps = resumed.detail["steps"]
    assert [s["name"] for s in steps if s["status"] == "restored"] == [f"turn-{t}" for t in range(KILLED_AT)]
    assert [s["name"] for s in steps if s["status"] == "ran"] == [f"turn-{t}" for t in range(KILLED_AT, TURNS)]
    # The refund above the limit waited for finance's approval (a wait, not an attempt), then ran once
    assert steps[-1] == {"name": "signal:approval", "status": "waiting"}
    assert approved.detail["steps"][-2:] == [
        {"name": "signal:approval", "status": "signal", "by": "finance@example.com"},
        {"name": "refund-o-91", "status": "ran"}]
    assert job.result["refund"] == {"order": "o-91", "amount": 1200, "status": "refunded",
                                    "approved_by": "finance: ok, the order was returned",
                                    "key": "agent:weekly-refunds/refund-o-91"}
    assert job.attempt == 2  # the lost attempt and the one that finished; the wait used none
    sent = [e for e in job.events if e.kind == "signal_sent"]
    assert [(e.actor, e.detail["woke"]) for e in sent] == [("finance@example.com", True)]
    app.close()

    bill = [json.loads(line) for line in (data / "model-calls.jsonl").read_text().splitlines()]
    answers = [e for e in bill if e["event"] == "answer"]
    starts = [e["turn"] for e in bill if e["event"] == "start"]
    assert sorted(e["turn"] for e in answers) == list(range(TURNS))  # each turn paid for once
    assert sorted(starts) == sorted([*range(TURNS), KILLED_AT])  # only the cut-off call was asked twice
    saved = sum(e["prompt"] + e["completion"] for e in answers if e["turn"] < KILLED_AT)
    spent = sum(e["prompt"] + e["completion"] for e in answers)
    assert (saved, spent) == (1110, 2436)  # the figures the README quotes
    assert f"resuming saved {KILLED_AT} model calls and {saved} tokens" in out
