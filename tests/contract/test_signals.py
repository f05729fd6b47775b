"""Contract: durable signals. A job waits for a named signal without a worker; the signal is kept
once per (job, name), before or after the wait. Runs on every store."""

from __future__ import annotations

import pytest

from firesafe import App, Backoff, InvalidInput, JobNotFound, SignalConflict, State
from firesafe.steps import SignalWait

FAST = Backoff(base=1.0, jitter="none")
DAY = 86400.0


def _approval_job(app: App, got: list[object], timeout: float = DAY):
    @app.job(max_attempts=3, backoff=FAST)
    def refund(ctx, order: str) -> object:
        ctx.step("quote", lambda: {"order": order})
        decision = ctx.wait_for_signal("approval", timeout=timeout)
        got.append(decision)
        return decision

    return refund


def test_a_signal_sent_before_the_wait_is_kept_and_delivered_at_once(app: App) -> None:
    got: list[object] = []
    _approval_job(app, got).enqueue("o-1", key="refund:o-1")
    sent = app.signal("refund:o-1", "approval", {"approved": True}, actor="ann", reason="looks fine")
    assert sent.sent and not sent.woke  # queued and due already: nothing to wake

    app.work(burst=True)
    job = app.get("refund:o-1")
    assert job.state == State.SUCCEEDED and job.result == {"approved": True} and got == [{"approved": True}]
    assert [a.outcome for a in job.trace] == ["succeeded"]  # it never parked
    assert job.trace[0].detail["steps"][-1] == {"name": "signal:approval", "status": "signal", "by": "ann"}
    events = [e for e in app.get("refund:o-1").events if e.kind == "signal_sent"]
    assert [(e.actor, e.detail) for e in events] == [("ann", {"name": "approval", "woke": False,
                                                              "reason": "looks fine"})]


def test_a_signal_sent_after_the_wait_makes_the_parked_job_due_at_once(app: App, clock) -> None:
    got: list[object] = []
    _approval_job(app, got, timeout=7 * DAY).enqueue("o-2", key="refund:o-2")
    app.work(burst=True)
    parked = app.get("refund:o-2")
    assert parked.state == State.SCHEDULED and got == []
    assert parked.run_at.timestamp() == pytest.approx(clock.now() + 7 * DAY)  # parked until the deadline
    assert parked.trace[-1].outcome == "deferred" and parked.attempt == 0  # the wait used no attempt
    assert parked.trace[-1].detail["steps"][-1] == {"name": "signal:approval", "status": "waiting"}

    clock.advance(60)
    assert app.work(burst=True).claimed == 0  # still parked: nothing polls it
    sent = app.signal("refund:o-2", "approval", {"approved": False, "note": "too much"}, actor="bob")
    assert sent.sent and sent.woke
    assert app.get("refund:o-2").run_at.timestamp() == pytest.approx(clock.now())  # due now, no clock advance

    app.work(burst=True)
    job = app.get("refund:o-2")
    assert job.state == State.SUCCEEDED and job.result == {"approved": False, "note": "too much"}
    assert got == [{"approved": False, "note": "too much"}]
    assert [a.outcome for a in job.trace] == ["deferred", "succeeded"] and job.attempt == 1
    assert job.trace[-1].detail["steps"] == [{"name": "quote", "status": "restored"},
                                             {"name": "signal:approval", "status": "signal", "by": "bob"}]


def test_the_same_signal_sent_twice_is_delivered_once(app: App) -> None:
    got: list[object] = []
    _approval_job(app, got).enqueue("o-3", key="refund:o-3")
    app.work(burst=True)
    first = app.signal("refund:o-3", "approval", {"approved": True}, actor="ann")
    again = app.signal("refund:o-3", "approval", {"approved": True}, actor="bob")
    assert first.sent and first.woke
    assert not again.sent and not again.woke and again.signal.actor == "ann"  # the first one is kept
    with pytest.raises(SignalConflict, match="already, by ann, with other data"):
        app.signal("refund:o-3", "approval", {"approved": False}, actor="eve")

    app.work(burst=True)
    assert got == [{"approved": True}]
    assert [(s.name, s.actor, s.value()) for s in app.signals("refund:o-3")] == [("approval", "ann",
                                                                                   {"approved": True})]
    assert [e.actor for e in app.get("refund:o-3").events if e.kind == "signal_sent"] == ["ann"]


def test_a_wait_past_its_deadline_fails_for_good_or_returns_the_default(app: App, clock) -> None:
    @app.job(max_attempts=5, backoff=FAST)
    def strict(ctx) -> object:
        return ctx.wait_for_signal("approval", timeout=3600)

    @app.job(max_attempts=5, backoff=FAST)
    def lenient(ctx) -> object:
        return ctx.wait_for_signal("approval", timeout=3600, default={"approved": False, "note": "no answer"})

    strict.enqueue(key="strict")
    lenient.enqueue(key="lenient")
    app.work(burst=True)
    clock.advance(3599)
    assert app.work(burst=True).claimed == 0
    clock.advance(2)
    app.work(burst=True)
    dead = app.get("strict")
    assert dead.state == State.DEAD and dead.error_type == "SignalTimeout" and dead.reason == "permanent"
    assert "no signal 'approval' came within the wait's timeout" in dead.error_message
    assert app.get("lenient").result == {"approved": False, "note": "no answer"}

    # A signal sent after the deadline does not answer that wait; a rerun from the wait does.
    with pytest.raises(InvalidInput, match="is dead: a signal goes to a job that has not finished"):
        app.signal("strict", "approval", {"approved": True})
    app.rerun("strict", from_step="signal:approval")
    app.signal("strict", "approval", {"approved": True})
    app.work(burst=True)
    assert app.get("strict").result == {"approved": True}


def test_a_retry_after_the_signal_restores_its_data_without_waiting(app: App, clock) -> None:
    calls: list[object] = []

    @app.job(max_attempts=3, backoff=FAST)
    def pay(ctx) -> object:
        decision = ctx.wait_for_signal("approval", timeout=60)
        calls.append(decision)
        if len(calls) == 1:
            raise ConnectionError("bank down")
        return decision

    pay.enqueue(key="pay")
    app.work(burst=True)
    app.signal("pay", "approval", "yes")
    app.work(burst=True)
    clock.advance(600)  # past the wait's deadline: the signal came in time, so it still answers
    app.work(burst=True)
    job = app.get("pay")
    assert job.state == State.SUCCEEDED and job.result == "yes" and calls == ["yes", "yes"]
    assert [a.outcome for a in job.trace] == ["deferred", "failed", "succeeded"]


def test_a_signal_sent_while_the_job_decides_to_park_is_not_lost(app: App) -> None:
    """The job found no signal and is about to park when the signal arrives (it still runs, so the
    sender cannot move it): its finish makes it due at once instead of at the deadline."""
    sent: list[object] = []

    @app.job(max_attempts=1)
    def flow(ctx) -> object:
        try:
            return ctx.wait_for_signal("go", timeout=DAY)
        except SignalWait:
            sent.append(app.signal("flow", "go", 42, actor="racer"))
            raise

    flow.enqueue(key="flow")
    app.work(burst=True, concurrency=1)
    job = app.get("flow")
    assert len(sent) == 1 and sent[0].sent and not sent[0].woke  # it was running: not woken by the send
    assert job.state == State.SUCCEEDED and job.result == 42  # no clock advance needed
    assert [a.outcome for a in job.trace] == ["deferred", "succeeded"]


def test_async_jobs_wait_for_signals_too(app: App) -> None:
    @app.job()
    async def agent(ctx) -> object:
        return await ctx.wait_for_signal("approval", timeout=60)

    agent.enqueue(key="agent")
    app.work(burst=True)
    assert app.get("agent").state == State.SCHEDULED
    app.signal("agent", "approval", [1, 2])
    app.work(burst=True)
    assert app.get("agent").result == [1, 2]


def test_hostile_signal_data_is_refused_whole_or_kept_escaped(app: App) -> None:
    got: list[object] = []
    _approval_job(app, got).enqueue("o-4", key="refund:o-4")
    for bad, why in [({"note": "\ud800"}, "not valid Unicode"), ("x" * (300 * 1024), "the cap is"),
                     (float("nan"), "JSON"), ({1, 2}, "JSON")]:
        with pytest.raises(InvalidInput, match=why):
            app.signal("refund:o-4", "approval", bad)
    deep: list[object] = []
    for _ in range(400):
        deep = [deep]
    with pytest.raises(InvalidInput, match="nested"):
        app.signal("refund:o-4", "approval", deep)
    for name in ("", "bad name", "a\x00b", "x" * 200, 7):
        with pytest.raises(InvalidInput, match="invalid signal name"):
            app.signal("refund:o-4", name, True)  # type: ignore[arg-type]
    assert app.signals("refund:o-4") == []  # nothing of the refused sends was kept

    nasty = {"note": "nul\x00 \x1b[31mred\u202e <script>", "bidi": "\u2066x"}
    sent = app.signal("refund:o-4", "approval", nasty, actor="eve\x00\x1b[2J", reason="why\x00")
    assert sent.sent and "\x00" not in sent.signal.actor and "\x1b" not in sent.signal.actor
    app.work(burst=True)
    assert got == [nasty] and app.get("refund:o-4").result == nasty  # the data round-trips exactly


def test_unknown_and_finished_jobs_are_refused_with_one_clear_line(app: App) -> None:
    @app.job()
    def done(ctx) -> str:
        return "ok"

    done.enqueue(key="done")
    app.work(burst=True)
    with pytest.raises(JobNotFound, match="no job with key 'nope'"):
        app.signal("nope", "approval", True)
    with pytest.raises(InvalidInput, match="job 'done' is succeeded: a signal goes to a job that has not finished"):
        app.signal("done", "approval", True)
    assert app.signals("done") == []


def test_a_send_wakes_only_a_job_that_waits_for_that_name(app: App, clock) -> None:
    @app.job(max_attempts=3, backoff=Backoff(base=600.0, cap=3600.0, jitter="none"))
    def flaky(ctx) -> str:
        if ctx.job.attempt == 1:
            raise ConnectionError("down")
        return "ok"

    @app.job()
    def waits(ctx) -> object:
        return ctx.wait_for_signal("approval", timeout=DAY)

    flaky.enqueue(key="flaky")
    waits.enqueue(key="waits")
    app.work(burst=True)
    backoff_until = app.get("flaky").run_at
    parked_until = app.get("waits").run_at
    assert not app.signal("flaky", "approval", True).woke  # in backoff, not waiting: left as it is
    assert not app.signal("waits", "other", True).woke  # waiting for another signal
    assert app.get("flaky").run_at == backoff_until and app.get("waits").run_at == parked_until
    assert app.work(burst=True).claimed == 0


def test_a_step_of_the_same_name_recorded_by_ctx_step_is_not_taken_for_a_wait(versions) -> None:
    v1 = versions()

    @v1.job(name="flow", max_attempts=1)
    def flow_v1(ctx) -> None:
        ctx.step("signal:approval", lambda: ["not", "a", "wait"])
        raise RuntimeError("stop here")

    flow_v1.enqueue(key="flow")
    v1.work(burst=True)
    v1.rerun("flow")
    v2 = versions()

    @v2.job(name="flow", max_attempts=1)
    def flow_v2(ctx) -> object:
        return ctx.wait_for_signal("approval", timeout=60)

    v2.work(burst=True)
    job = v2.get("flow")
    assert job.state == State.DEAD and job.error_type == "NonDeterminism"
    assert "was recorded by ctx.step, not by a wait for a signal" in job.error_message
