"""Contract: durable steps, resume, reruns and durable sleep. Runs on every store."""

from __future__ import annotations

import asyncio

import pytest

from firesafe import App, Backoff, InvalidInput, State

FAST = Backoff(base=1.0, jitter="none")


def test_completed_steps_are_restored_not_rerun_on_retry(app: App, clock) -> None:
    effects: list[str] = []

    @app.job(max_attempts=3, backoff=FAST)
    def refund(ctx, order_id: str, amount: int) -> dict:
        key = ctx.idempotency_key("charge")
        receipt = ctx.step("charge", lambda: effects.append(f"charge {key}") or {"id": "rcpt-1", "amount": amount})
        if ctx.job.attempt == 1:
            raise TimeoutError("email provider timed out")
        ctx.step("email", lambda: effects.append("email") or "sent")
        return receipt

    refund.enqueue("o-1", 100, key="refund:o-1")
    app.work(burst=True)
    clock.advance(10)
    app.work(burst=True)
    job = app.get("refund:o-1")
    assert job.state == State.SUCCEEDED and job.result == {"id": "rcpt-1", "amount": 100}
    assert effects == ["charge refund:o-1/charge", "email"]  # charge ran once across two attempts
    assert job.trace[0].detail["steps"] == [{"name": "charge", "status": "ran"}]
    assert job.trace[1].detail["steps"] == [{"name": "charge", "status": "restored"},
                                            {"name": "email", "status": "ran"}]
    assert [s["name"] for s in app.steps("refund:o-1")] == ["charge", "email"]


def test_async_job_with_async_and_sync_steps(app: App, clock) -> None:
    calls: list[int] = []

    async def call_model(turn: int) -> dict:
        await asyncio.sleep(0)
        calls.append(turn)
        return {"turn": turn, "done": turn == 3}

    @app.job(max_attempts=3, backoff=FAST)
    async def agent(ctx, question: str) -> dict:
        for turn in range(5):
            reply = await ctx.step(f"turn-{turn}", call_model, turn)
            if turn == 1 and ctx.job.attempt == 1:
                raise ConnectionError("model API dropped")
            if reply["done"]:
                return reply
        return {}

    agent.enqueue("why?", key="a")
    app.work(burst=True)
    clock.advance(10)
    app.work(burst=True)
    assert app.get("a").result == {"turn": 3, "done": True}
    assert calls == [0, 1, 2, 3]  # turns 0 and 1 restored on attempt 2


def test_reused_step_name_is_a_clear_permanent_error(app: App) -> None:
    @app.job(max_attempts=3)
    def twice(ctx) -> None:
        ctx.step("a", lambda: 1)
        ctx.step("a", lambda: 2)

    twice.enqueue(key="t")
    app.work(burst=True)
    job = app.get("t")
    assert job.state == State.DEAD and job.error_type == "DuplicateStep" and "'a'" in job.error_message


def test_changed_step_order_raises_non_determinism_showing_both_sequences(store_url: str, clock) -> None:
    v1 = App(store_url, clock=clock)

    @v1.job(name="flow", max_attempts=1)
    def flow_v1(ctx) -> None:
        ctx.step("fetch", lambda: 1)
        ctx.step("charge", lambda: 2)
        raise ConnectionError("boom")

    flow_v1.enqueue(key="f")
    v1.work(burst=True)
    v2 = App(store_url, clock=clock)

    @v2.job(name="flow", max_attempts=1)
    def flow_v2(ctx) -> None:
        ctx.step("fetch", lambda: 1)
        ctx.step("validate", lambda: 3)

    v2.dlq.replay(keys=["f"])
    v2.work(burst=True)
    job = v2.get("f")
    assert job.state == State.DEAD and job.error_type == "NonDeterminism"
    assert "['fetch', 'charge']" in job.error_message and "['fetch', 'validate']" in job.error_message
    # --from-step forgets 'charge' and later, so the new code can run
    v2.rerun("f", from_step="charge")
    v2.work(burst=True)
    assert v2.get("f").state == State.SUCCEEDED
    assert [s["name"] for s in v2.steps("f")] == ["fetch", "validate"]
    v1.close()
    v2.close()


def test_rerun_resume_from_step_and_from_scratch(app: App) -> None:
    runs: list[str] = []

    @app.job(max_attempts=1)
    def pipeline(ctx) -> list:
        return [ctx.step(n, lambda n=n: runs.append(n) or n) for n in ("extract", "transform", "load")]

    pipeline.enqueue(key="p")
    app.work(burst=True)
    assert runs == ["extract", "transform", "load"]
    app.rerun("p")  # resume: every step restored
    app.work(burst=True)
    assert runs == ["extract", "transform", "load"]
    app.rerun("p", from_step="transform", actor="ops")
    app.work(burst=True)
    assert runs[3:] == ["transform", "load"]
    app.rerun("p", from_scratch=True)
    app.work(burst=True)
    assert runs[5:] == ["extract", "transform", "load"]
    job = app.get("p")
    assert job.state == State.SUCCEEDED and [e.kind for e in job.events] == ["rerun"] * 3
    assert job.events[1].actor == "ops" and job.events[1].detail["steps_forgotten"] == 2
    with pytest.raises(InvalidInput, match="no recorded step 'nope'"):
        app.rerun("p", from_step="nope")


def test_rerun_of_a_waiting_job_is_refused(app: App) -> None:
    @app.job
    def j(ctx) -> None: ...

    j.enqueue(key="w")
    with pytest.raises(InvalidInput, match="queued"):
        app.rerun("w")


def test_step_result_that_is_not_json_fails_the_attempt_clearly(app: App) -> None:
    @app.job(max_attempts=3)
    def bad(ctx) -> None:
        ctx.step("s", lambda: {1, 2})

    bad.enqueue(key="b")
    app.work(burst=True)
    job = app.get("b")
    assert job.state == State.DEAD and job.reason == "permanent" and job.error_type == "UnstorableValue"
    assert "step 's'" in job.error_message and app.steps("b") == []


def test_failing_step_records_error_in_trace(app: App) -> None:
    @app.job(max_attempts=1)
    def f(ctx) -> None:
        ctx.step("ok", lambda: 1)
        ctx.step("broken", lambda: 1 / 0)

    f.enqueue(key="f")
    app.work(burst=True)
    trace = app.get("f").trace
    assert trace[0].detail["steps"] == [{"name": "ok", "status": "ran"},
                                        {"name": "broken", "status": "failed", "error": "ZeroDivisionError"}]


def test_durable_sleep_releases_the_worker_and_resumes_after_the_time(app: App, clock) -> None:
    sent: list[str] = []

    @app.job(max_attempts=1)
    def follow_up(ctx, user: str) -> str:
        ctx.step("welcome", lambda: sent.append("welcome"))
        ctx.sleep(86400)
        ctx.step("follow-up", lambda: sent.append("follow-up"))
        return "done"

    follow_up.enqueue("ann", key="fu")
    app.work(burst=True)
    job = app.get("fu")
    assert job.state == State.SCHEDULED and sent == ["welcome"]
    assert job.run_at.timestamp() == pytest.approx(clock.now() + 86400)
    assert job.trace[-1].outcome == "deferred"
    clock.advance(3600)
    assert app.work(burst=True).claimed == 0
    clock.advance(86400)
    app.work(burst=True)
    job = app.get("fu")
    assert job.state == State.SUCCEEDED and sent == ["welcome", "follow-up"] and job.attempt == 1


def test_a_stale_attempt_cannot_record_a_step(app: App, clock) -> None:
    from firesafe.store.base import ClaimParams

    @app.job
    def j(ctx) -> None: ...

    j.enqueue(key="s")
    [c] = app.store.job_claim(ClaimParams(("default",), 1, "w", 30.0))
    assert app.store.step_record(c.job.id, c.token, "a", 0, "1")
    assert not app.store.step_record(c.job.id, c.token, "a", 0, "2")  # recorded already
    assert not app.store.step_record(c.job.id, "stale-token", "b", 1, "1")
