"""The deterministic simulation (tests/simulation/sim.py): thousands of seeded scenarios of workers that
crash, stall and hit store faults at the named points, on the real store and the real decisions.

``make test`` runs FIRESAFE_SIM_SCENARIOS (default 2,000; 20,000 with FIRESAFE_SOAK=1) seeds, split
over one process per core. A failing seed is printed with its events and replays alone, exactly:
``FIRESAFE_SIM_SEED=123 pytest tests/simulation``.
"""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.simulation import sim
from tests.simulation.sim import ACTIONS, Scenario, Simulation, run_seed

ROOT = Path(__file__).resolve().parents[2]
SOAK = os.environ.get("FIRESAFE_SOAK") == "1"
SCENARIOS = int(os.environ.get("FIRESAFE_SIM_SCENARIOS") or (20_000 if SOAK else 2_000))
ONE_SEED = os.environ.get("FIRESAFE_SIM_SEED")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_split(count: int, *extra: str) -> tuple[dict[str, int], list[dict[str, object]], float]:
    """Run seeds 0..count-1 in one subprocess per core; (totals, failures, seconds); the totals
    include the CPU seconds the subprocesses used (``cpu_ms``)."""
    procs = max(1, min(os.cpu_count() or 1, 8))
    share = -(-count // procs)
    started, cpu = time.monotonic(), _cpu()
    # glibc's malloc hands memory back to the kernel and asks for it again thousands of times a second
    # here (SQLite's allocations); keeping it saves two thirds of the CPU a scenario costs
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": str(256 << 20), "MALLOC_TOP_PAD_": str(64 << 20)}
    children = [subprocess.Popen([sys.executable, "-m", "tests.simulation.sim", "--first", str(first),
                                  "--count", str(min(share, count - first)), "--parent", str(os.getpid()), *extra],
                                 cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for first in range(0, count, share)]
    totals: Counter[str] = Counter()
    failures: list[dict[str, object]] = []
    try:
        for child in children:
            out, err = child.communicate(timeout=850)
            assert out, f"the simulation process printed nothing (rc {child.returncode}):\n{err[-3000:]}"
            summary = json.loads(out)
            totals.update(summary["totals"])
            failures += summary["failures"]
    finally:  # a test stopped midway (a timeout, Ctrl-C) leaves no simulation running
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    totals["cpu_ms"] = round((_cpu() - cpu) * 1000)
    return dict(totals), failures, time.monotonic() - started


@pytest.mark.skipif(ONE_SEED is None, reason="set FIRESAFE_SIM_SEED=N to replay one seed")
def test_replay_one_seed() -> None:
    result = run_seed(int(ONE_SEED or 0))
    print("\n" + "\n".join(result.events))
    assert result.ok, result.explain()


@pytest.mark.skipif(ONE_SEED is not None, reason="replaying one seed")
@pytest.mark.timeout(900)  # about a minute on two idle cores; far longer on a machine that others load too
def test_thousands_of_seeded_scenarios_keep_every_invariant() -> None:
    totals, failures, seconds = _run_split(SCENARIOS)
    for failure in failures[:5]:
        print(failure["explain"])
    assert not failures, f"{len(failures)} seed(s) broke an invariant: {[f['seed'] for f in failures][:20]}"
    # The scenarios did meet what they are about: every action at every point, deaths, rescues,
    # late writes fenced and duplicate calls absorbed by the provider.
    fired = {f"{p}:{a}" for p, actions in ACTIONS.items() for a in actions}
    assert fired <= set(totals), sorted(fired - set(totals))
    assert totals["deaths"] > 0 and totals["rescued"] > 0 and totals["fenced"] > 0
    assert totals["calls"] > totals["effects"]  # repeated calls happened, and were absorbed
    print(f"\n[simulation] scenarios={SCENARIOS} jobs={totals['jobs']} seconds={seconds:.1f} "
          f"({seconds / SCENARIOS * 1000:.1f} ms each, {os.cpu_count()} processes; "
          f"cpu={totals['cpu_ms'] / 1000:.1f}s, {totals['cpu_ms'] / SCENARIOS:.1f} ms a scenario) "
          f"turns={totals['turns']} "
          f"workers_started={totals['workers_started']} deaths={totals['deaths']} rescued={totals['rescued']} "
          f"fenced={totals['fenced']} calls={totals['calls']} effects={totals['effects']} "
          f"duplicates_absorbed={totals['calls'] - totals['effects']}\n"
          f"faults fired: { {k: v for k, v in sorted(totals.items()) if ':' in k} }")


def test_a_seed_replays_exactly(tmp_path: Path) -> None:
    # Seeds whose scenarios stall, crash and hit the store: the hardest to keep deterministic
    seeds = [s for s in range(60) if {"in_step", "store", "heartbeat"} <= set(Scenario.from_seed(s).faults)]
    replayed = 0
    for seed in seeds:
        first = run_seed(seed, tmp_path)
        assert first.ok, first.explain()
        if len(first.events) <= 3:  # few of its faults fired: not much of a test of replay
            continue
        second = run_seed(seed, tmp_path)
        assert first.events == second.events
        assert first.fingerprint == second.fingerprint  # every stored job, trace and step the same
        replayed += 1
        if replayed == 3:
            break
    assert replayed == 3, f"only {replayed} of seeds {seeds} recorded more than 3 events"


def test_without_provider_dedupe_the_window_after_an_effect_shows(tmp_path: Path) -> None:
    # Given a provider that applies every call, and crashes after a step's effect before its record
    broken = [run_seed(seed, tmp_path, dedupe=False, faults={"after_effect": 0.3}) for seed in range(40)]
    # Then the simulation catches effects applied twice, and says which seed replays it
    caught = [r for r in broken if not r.ok]
    assert caught, "the window after an effect never showed"
    assert all(any("effect applied" in v for v in r.violations) for r in caught)
    assert "FIRESAFE_SIM_SEED=" in caught[0].explain()
    # While with the provider deduplicating by ctx.idempotency_key the same seeds keep every invariant
    for seed in (r.scenario.seed for r in caught[:5]):
        fixed = run_seed(seed, tmp_path, faults={"after_effect": 0.3})
        assert fixed.ok, fixed.explain()


def test_an_unstable_idempotency_key_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A mutant: the step key changes with every attempt, so the provider cannot deduplicate
    from firesafe import context

    real = context.step_key
    monkeypatch.setattr(context.Context, "idempotency_key",
                        lambda self, name: real(self.job.key, f"{name}#{self.job.run}"))
    results = [run_seed(seed, tmp_path, faults={"after_effect": 0.3}) for seed in range(30)]
    assert any(any("effect applied" in v for v in r.violations) for r in results)


def test_a_retry_past_the_budget_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A mutant: the retry decision forgets the maximum
    import importlib

    from firesafe.states import State

    decide = importlib.import_module("firesafe.retries.decide")

    monkeypatch.setattr(decide, "_retry_or_die", lambda budget, outcome, backoff, draw: decide.Decision(
        State.SCHEDULED, outcome, delay=backoff.delay(budget.attempt, draw)))
    results = [run_seed(seed, tmp_path, faults={"in_step": 0.5}) for seed in range(20)]
    assert any(any("above its maximum" in v or "never ended" in v for v in r.violations) for r in results)


def test_a_signal_sent_while_its_job_parks_is_never_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given scenarios whose waiting jobs often meet their signal just as they park (still running)
    seeds, faults = _seeds_with("approve", 40), {"parking": 0.6, "before_complete": 0.1}
    results = [run_seed(seed, tmp_path, faults=faults) for seed in seeds]
    # Then every one keeps every invariant: the signal reaches the job, none waits for its deadline
    assert all(r.ok for r in results), next(r.explain() for r in results if not r.ok)
    assert sum(r.stats["parking:signal"] for r in results) >= 5
    # While a mutant finish that parks such a job until its deadline anyway is caught as a lost wake-up
    from firesafe.store import sqlite as core

    mutant = core.Q["job_finish"].replace("WHEN :given_back = 1 AND signaled_at >= started_at THEN :now", "")
    assert mutant != core.Q["job_finish"]
    monkeypatch.setitem(core.Q, "job_finish", mutant)
    broken = [run_seed(seed, tmp_path, faults=faults) for seed in seeds]
    assert any(any("lost wake-up" in v for v in r.violations) for r in broken)


def test_an_illegal_move_is_caught(tmp_path: Path) -> None:
    # Given a scenario run to its end
    s = Simulation(Scenario.from_seed(1, faults={}), tmp_path)
    s.app.jobs["job1"].enqueue("plain", 1, key="k")
    s._moved("enqueue")
    s._spawn()
    s._world()
    assert s.states["k"] == "succeeded"
    # When something writes a move the state machine forbids (succeeded -> running)
    with sqlite3.connect(s.path) as conn:
        conn.execute("UPDATE firesafe_jobs SET state = 'running' WHERE key = 'k'")
    s._moved("a buggy write")
    # Then the checker reports it
    assert s.result.violations == ["k: illegal move succeeded -> running (a buggy write)"]
    s.close()


def test_scenarios_are_drawn_from_their_seed() -> None:
    assert Scenario.from_seed(7) == Scenario.from_seed(7)
    assert Scenario.from_seed(7) != Scenario.from_seed(8)
    assert sim.MAX_TURNS > 1000


def test_the_simulation_runs_the_worker_loops_own_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given Worker.turn, the loop's body, counted
    from firesafe.worker import Worker

    turns = Counter[str]()
    turn = Worker.turn

    def counted_turn(self: Worker) -> object:
        turns[self.id] += 1
        return turn(self)

    monkeypatch.setattr(Worker, "turn", counted_turn)
    # When a scenario of crashes, stalls and store faults runs
    result = run_seed(5, tmp_path)
    # Then every turn of every simulated worker was the real loop's turn
    assert result.ok, result.explain()
    assert sum(turns.values()) == result.stats["worker_turns"] > 0
    assert set(turns) == {f"sim:w{i + 1}" for i in range(result.stats["workers_started"])}


def test_a_real_worker_runs_the_same_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an app with jobs, and Worker.turn recorded
    from firesafe import App
    from firesafe.worker import Turn, Worker

    app = App(f"sqlite:///{tmp_path}/real.db")

    @app.job
    def double(ctx: object, n: int) -> int:
        return 2 * n

    double.enqueue_many([{"args": [i], "key": f"d{i}"} for i in range(50)])
    turns: list[Turn] = []
    turn = Worker.turn

    def recorded(self: Worker) -> Turn:
        done = turn(self)
        turns.append(done)
        return done

    monkeypatch.setattr(Worker, "turn", recorded)
    # When a real worker (threads, wall clock) drains the queue
    stats = app.work(burst=True, concurrency=4)
    app.close()
    # Then its loop went through the same turn, to the one that ended it, and claimed every job there
    assert stats.succeeded == 50
    assert turns[-1].done and not any(t.done for t in turns[:-1])
    assert sum(len(t.claimed) for t in turns) == stats.claimed == 50


def _seeds_with(kind: str, count: int) -> list[int]:
    """The first ``count`` seeds whose scenario has a job of ``kind``."""
    return [s for s in range(400) if any(j.kind == kind for j in Scenario.from_seed(s).jobs)][:count]


def test_a_fan_out_keeps_its_invariants_through_spawn_and_wait_faults(tmp_path: Path) -> None:
    # Given scenarios with fan jobs whose spawns, parks and wake-ups are often hit
    faults = {"spawned": 0.3, "fan_parking": 0.6, "woken": 0.6, "store": 0.05, "before_complete": 0.1}
    results = [run_seed(seed, tmp_path, faults=faults) for seed in _seeds_with("fan", 40)]
    # Then each child is spawned once and applied once, and every parent ends with its children's results
    assert all(r.ok for r in results), next(r.explain() for r in results if not r.ok)
    fired = Counter[str]()
    for r in results:
        fired.update(r.stats)
    for action in ("spawned:crash", "spawned:stall", "spawned:error", "fan_parking:children", "fan_parking:crash",
                   "fan_parking:stall", "woken:crash", "woken:error"):
        assert fired[action] > 0, action


@pytest.mark.parametrize(("query", "old", "new"), [
    # the count-down that reaches 0 no longer makes the parked parent due
    ("job_parents_count_down", "THEN min(run_at, :now) ELSE run_at END", "THEN run_at ELSE run_at END"),
    # a parent whose children all ended while it was still running parks anyway
    ("job_finish", "WHEN :reason = 'children' AND children_pending <= children_wake_at THEN :now", ""),
])
def test_a_parent_left_parked_after_its_children_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           query: str, old: str, new: str) -> None:
    # Given a mutant store that forgets to wake a parent
    from firesafe.store import sqlite as core

    mutant = core.Q[query].replace(old, new)
    assert mutant != core.Q[query]
    monkeypatch.setitem(core.Q, query, mutant)
    # When fan jobs run, their children often ending while they park
    faults = {"fan_parking": 0.6}
    broken = [run_seed(seed, tmp_path, faults=faults) for seed in _seeds_with("fan", 20)]
    # Then the simulation reports a stranded parent
    assert any(any("stranded" in v for v in r.violations) for r in broken)
