"""The story: an agent run whose worker is killed with SIGKILL at turn 5, and resumes at turn 5.

    python -m examples.agent_run [--dir DIR]

Everything happens for real: two worker processes (``firesafe worker``), a SIGKILL, a lease that
expires, a rescue. Every claim printed is checked; the run exits 1 if one does not hold.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

KEY = "agent:weekly-refunds"
#: What finance sends when it approves the refund above the limit.
APPROVAL = {"approved": True, "note": "finance: ok, the order was returned"}
ROOT = Path(__file__).resolve().parents[2]


class StoryFailed(Exception):
    pass


def check(condition: bool, claim: str) -> None:
    if not condition:
        raise StoryFailed(claim)
    print(f"  ok: {claim}")


def read_bill(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def start_worker(data: Path, env: dict[str, str], n: int, *extra: str) -> subprocess.Popen[bytes]:
    with open(data / f"worker-{n}.log", "wb") as log:  # the child keeps its own copy of the file
        return subprocess.Popen([sys.executable, "-m", "firesafe", "worker", "examples.agent_run.agent:app",
                                 "--concurrency", "1", *extra], cwd=ROOT, env=env, stdout=log, stderr=log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.agent_run", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="agent-run-data", help="where the store and the logs go (made afresh)")
    data = Path(parser.parse_args(argv).dir).resolve()
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    store = f"sqlite:///{data}/agent.db"
    bill_path = data / "model-calls.jsonl"
    os.environ["FIRESAFE_STORE"] = store
    os.environ["FAKE_MODEL_LOG"] = str(bill_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

    from examples.agent_run.agent import LONG_TURN, QUESTION, SCRIPT, app, research_agent

    try:
        return story(app, research_agent, data, env, bill_path, LONG_TURN, QUESTION, SCRIPT)
    except StoryFailed as exc:
        print(f"\nthe story did not hold: {exc}", file=sys.stderr)
        return 1
    finally:
        app.close()


def story(app: Any, research_agent: Any, data: Path, env: dict[str, str], bill_path: Path, long_turn: int,
          question: str, script: list[str]) -> int:
    print(f"1. Enqueue the agent run under the key {KEY!r} (store: {data / 'agent.db'})")
    research_agent.enqueue(question, key=KEY)

    print("\n2. A worker process runs it; each turn is a durable step (ctx.step)")
    first = start_worker(data, env, 1)
    print(f"   worker 1 is pid {first.pid}")
    deadline = time.monotonic() + 60
    seen = 0
    while True:
        bill = read_bill(bill_path)
        for entry in bill[seen:]:
            if entry["event"] == "answer":
                print(f"   turn {entry['turn']} answered ({entry['prompt'] + entry['completion']} tokens)")
            elif entry["turn"] == long_turn:
                print(f"   turn {entry['turn']} started: a long call, the model is reading a lot of data")
        seen = len(bill)
        if any(e["event"] == "start" and e["turn"] == long_turn for e in bill):
            break
        if first.poll() is not None or time.monotonic() > deadline:
            raise StoryFailed(f"worker 1 never reached turn {long_turn} (see {data / 'worker-1.log'})")
        time.sleep(0.005)

    print(f"\n3. kill -9 {first.pid}, in the middle of turn {long_turn}")
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    job = app.get(KEY)
    recorded = [s["name"] for s in app.steps(KEY)]
    print(f"   the job is still {job.state!s} under worker 1's lease, which nobody renews now")
    print(f"   recorded turns: {', '.join(recorded)}")
    check(job.state == "running" and recorded == [f"turn-{t}" for t in range(long_turn)],
          f"turns 0 to {long_turn - 1} are recorded; turn {long_turn} is not")

    print("\n4. A new worker starts; once the lease expires it rescues the job and resumes it")
    started = time.monotonic()
    second = start_worker(data, env, 2, "--burst", "--wait-scheduled")
    deadline = time.monotonic() + 60
    while not waiting_for_approval(app):
        if second.poll() is not None or time.monotonic() > deadline:
            raise StoryFailed(f"the run never waited for the approval (see {data / 'worker-2.log'})")
        time.sleep(0.05)
    job = app.get(KEY)
    print(f"   the answer is in after {time.monotonic() - started:.1f}s; it finds a refund above the limit, so the run")
    print(f"   now waits for a person's approval: the job is {job.state!s}, parked until the approval's")
    print("   deadline, holding no worker (ctx.wait_for_signal)")

    print("\n5. Finance approves it from the command line (or the dashboard's approve form)")
    signal_cmd = ["signal", KEY, "approval", "--data", json.dumps(APPROVAL), "--actor", "finance@example.com",
                  "--reason", "refund o-91 checked against the order"]
    print(f"   firesafe {' '.join(signal_cmd[:4])} '{signal_cmd[4]}' --actor {signal_cmd[6]} ...")
    sent = subprocess.run([sys.executable, "-m", "firesafe", *signal_cmd], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=False)
    print(f"   {sent.stdout.strip() or sent.stderr.strip()}")
    check(sent.returncode == 0, "the signal was sent to the waiting run")
    if second.wait(timeout=60) != 0:
        raise StoryFailed(f"worker 2 failed (see {data / 'worker-2.log'})")
    print(f"   worker 2 finished in {time.monotonic() - started:.1f}s")

    job = app.get(KEY)
    print(f"\n6. The trace of {KEY}: each attempt, and the turns it restored or ran (job.trace[n].detail)")
    print(f"   {'attempt':<8}{'outcome':<11}{'worker pid':<12}{'turns restored':<24}turns run")
    for a in job.trace:
        steps = a.detail.get("steps", [])
        restored = [s["name"] for s in steps if s["status"] == "restored"]
        ran = [s["name"] for s in steps if s["status"] in ("ran", "signal", "waiting")]
        pid = (a.worker or "?").split(":")[1] if a.worker and ":" in a.worker else "?"
        print(f"   {a.seq:<8}{a.outcome or '':<11}{pid:<12}{span(restored):<24}{span(ran)}")
    print(f"   result: {job.result}")

    bill = read_bill(bill_path)
    answers = [e for e in bill if e["event"] == "answer"]
    starts = [e for e in bill if e["event"] == "start"]
    spent = sum(e["prompt"] + e["completion"] for e in answers)
    restored_turns = [e for e in answers if e["turn"] < long_turn]
    saved = sum(e["prompt"] + e["completion"] for e in restored_turns)
    print("\n7. The model's bill")
    print(f"   calls started: {len(starts)}, answered: {len(answers)}, tokens billed: {spent}")
    print(f"   resuming saved {len(restored_turns)} model calls and {saved} tokens "
          f"({100 * saved / spent:.0f}% of the run) that a from-scratch retry would have paid again")

    print("\n8. What the story claims")
    check(job.state == "succeeded", "the run succeeded")
    check({k: job.result[k] for k in ("answer", "turns")} == {"answer": script[-1], "turns": len(script)},
          f"its answer is the one an uninterrupted run gives, after {len(script)} turns")
    check([a.outcome for a in job.trace] == ["lost", "deferred", "succeeded"],
          "attempt 1 was recorded as lost (its worker was killed); attempt 2 waited for the approval "
          "(a wait, not an attempt) and then succeeded")
    resumed = job.trace[1].detail.get("steps", [])
    check([s["name"] for s in resumed if s["status"] == "restored"] == [f"turn-{t}" for t in range(long_turn)],
          f"attempt 2 restored turns 0 to {long_turn - 1} from their records")
    ran_turns = [f"turn-{t}" for t in range(long_turn, len(script))]
    check([s["name"] for s in resumed if s["status"] == "ran"] == ran_turns,
          f"attempt 2 ran turns {long_turn} to {len(script) - 1}")
    last = job.trace[-1].detail.get("steps", [])
    check([s["status"] for s in last][-2:] == ["signal", "ran"] and job.result["refund"]["status"] == "refunded",
          "after the approval it restored every turn, got the signal's data and issued the refund once")
    check(job.attempt == 2, "two attempts were used, the lost one and the one that finished: the wait used none")
    check(sorted(e["turn"] for e in answers) == list(range(len(script))),
          "the model answered every turn exactly once")
    check([e["turn"] for e in starts].count(long_turn) == 2,
          f"only turn {long_turn}, cut off by the kill, was asked twice")
    return 0


def waiting_for_approval(app: Any) -> bool:
    """Whether the run is parked on its wait for the approval signal."""
    job = app.get(KEY)
    steps = job.trace[-1].detail.get("steps", []) if job.trace else []
    return job.state == "scheduled" and any(s["name"] == "signal:approval" and s["status"] == "waiting"
                                            for s in steps)


def span(names: list[str]) -> str:
    """turn-0 .. turn-4 -> 'turn 0-4'; other steps (the approval, the refund) by name after them."""
    turns = [n.split("-")[1] for n in names if n.startswith("turn-")]
    others = [n for n in names if not n.startswith("turn-")]
    shown = [] if not turns else [f"turn {turns[0]}" if len(turns) == 1 else f"turns {turns[0]}-{turns[-1]}"]
    return ", ".join(shown + others) or "-"


if __name__ == "__main__":
    sys.exit(main())
