"""Steps: lookups by recorded position (a failed step leaves a gap) and values a step cannot record.

Runs on every store.
"""

from __future__ import annotations

import pytest

from firesafe import App, Backoff, State

FAST = Backoff(base=1.0, jitter="none")


def test_a_caught_failing_step_leaves_a_gap_and_the_retry_restores_the_later_steps(app: App, clock) -> None:
    # Given a job that catches a failing step, records the next one, then fails transiently
    effects: list[str] = []

    @app.job(max_attempts=3, backoff=FAST)
    def caught(ctx) -> str:
        try:
            ctx.step("a", lambda: effects.append("a") or 1 / 0)
        except ZeroDivisionError:
            pass
        ctx.step("b", lambda: effects.append("b") or "b")
        if ctx.job.attempt == 1:
            raise ConnectionError("transient")
        return "done"

    # When it is retried
    caught.enqueue(key="c")
    app.work(burst=True)
    clock.advance(10)
    app.work(burst=True)

    # Then the failed step runs again at its place and the recorded one is restored, not re-run
    job = app.get("c")
    assert job.state == State.SUCCEEDED and job.result == "done", job.last_error
    assert effects == ["a", "b", "a"]
    assert [(s["name"], s["position"]) for s in app.steps("c")] == [("b", 1)]
    assert job.trace[1].detail["steps"] == [{"name": "a", "status": "failed", "error": "ZeroDivisionError"},
                                            {"name": "b", "status": "restored"}]


def test_a_recorded_step_met_at_another_place_is_non_determinism_despite_a_gap(store_url: str, clock) -> None:
    # Given a run that recorded 'b' and 'c' as steps 2 and 3 (step 1, 'a', failed and was caught)
    v1 = App(store_url, clock=clock)

    @v1.job(name="flow", max_attempts=1)
    def flow_v1(ctx) -> None:
        try:
            ctx.step("a", lambda: 1 / 0)
        except ZeroDivisionError:
            pass
        ctx.step("b", lambda: "b")
        ctx.step("c", lambda: "c")
        raise ConnectionError("boom")

    flow_v1.enqueue(key="f")
    v1.work(burst=True)
    assert [(s["name"], s["position"]) for s in v1.steps("f")] == [("b", 1), ("c", 2)]

    # When new code meets 'b' first (a reordering) and the job is replayed
    v2 = App(store_url, clock=clock)
    effects: list[str] = []

    @v2.job(name="flow", max_attempts=1)
    def flow_v2(ctx) -> None:
        ctx.step("b", lambda: effects.append("b") or "b")
        ctx.step("c", lambda: effects.append("c") or "c")

    v2.dlq.replay(keys=["f"])
    v2.work(burst=True)

    # Then it is NonDeterminism, naming both places, and no step ran again
    job = v2.get("f")
    assert job.state == State.DEAD and job.reason == "permanent" and job.error_type == "NonDeterminism"
    assert "step 1 is 'b' in this run but step 2 in the recorded run" in job.error_message
    assert effects == []
    v1.close()
    v2.close()


@pytest.mark.parametrize(("value", "kind"), [
    ({"visa", "amex"}, "set"),
    ([{"card": "visa", "ids": {1, 2}}], "set at [0]['ids']"),
    (10 ** 4400, "int of more than 4300 digits"),
    ({1: "one"}, "dict with a key of type int"),
    (float("nan"), "float nan"),
], ids=["set", "nested-set", "huge-int", "int-key", "nan"])
def test_a_step_value_that_cannot_be_stored_fails_the_job_at_once(app: App, clock, value: object,
                                                                  kind: str) -> None:
    # Given a step whose effect happens, then returns a value JSON cannot carry
    effects: list[str] = []

    @app.job(name="nonjson", max_attempts=3, backoff=FAST)
    def nonjson(ctx) -> None:
        ctx.step("charge", lambda: effects.append("charge") or value)

    # When the worker runs it and would have retried
    nonjson.enqueue(key="n")
    app.work(burst=True)
    clock.advance(60)
    app.work(burst=True)

    # Then the job is dead at once, its effect ran once, and the message says which step and what type
    job = app.get("n")
    assert job.state == State.DEAD and job.reason == "permanent" and len(job.trace) == 1
    assert effects == ["charge"]
    assert job.error_type == "UnstorableValue"
    assert job.error_message == (f"step 'charge' returned a value that cannot be stored as JSON ({kind}); "
                                 "its effect ran but is not recorded, so the job is not retried")
    assert job.trace[0].detail["steps"] == [{"name": "charge", "status": "failed", "error": "UnstorableValue"}]
    assert app.steps("n") == []


def test_a_step_value_over_the_size_cap_fails_the_job_at_once(app: App, clock) -> None:
    effects: list[str] = []

    @app.job(max_attempts=3, backoff=FAST)
    def big(ctx) -> None:
        ctx.step("export", lambda: effects.append("export") or "x" * (1024 * 1024 + 1))

    big.enqueue(key="b")
    app.work(burst=True)
    clock.advance(60)
    app.work(burst=True)
    job = app.get("b")
    assert job.state == State.DEAD and job.reason == "permanent" and effects == ["export"]
    assert job.error_type == "UnstorableValue"
    assert job.error_message.startswith("step 'export' returned a value too large to store")
    assert "so the job is not retried" in job.error_message


def test_an_async_step_value_that_cannot_be_stored_fails_the_job_at_once(app: App, clock) -> None:
    effects: list[str] = []

    async def charge() -> set:
        effects.append("charge")
        return {"visa"}

    @app.job(max_attempts=3, backoff=FAST)
    async def pay(ctx) -> None:
        await ctx.step("charge-results", charge)  # 'result' in the name must not change how it is reported

    pay.enqueue(key="p")
    app.work(burst=True)
    clock.advance(60)
    app.work(burst=True)
    job = app.get("p")
    assert job.state == State.DEAD and job.reason == "permanent" and effects == ["charge"]
    assert job.error_type == "UnstorableValue" and job.error_message.startswith(
        "step 'charge-results' returned a value that cannot be stored as JSON (set)")
