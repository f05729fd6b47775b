"""Contract: shared limiters (rate, concurrency, Retry-After pauses, breakers). Runs on every store.

The fake clock drives every limiter decision: given the same calls, both stores decide the same.
"""

from __future__ import annotations

import itertools
import json

import pytest

from firesafe import App, Backoff, ConfigError, RetryAfter, State
from firesafe.limits.api import Throttled
from firesafe.limits.store import Acquire, Report
from firesafe.states import Outcome
from firesafe.store.base import ClaimParams, FinishParams

FAST = Backoff(base=1.0, jitter="none")


class Response:
    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status_code, self.headers = status, headers


class HTTPStatusError(Exception):
    """Shaped like httpx's: the error carries the response."""

    def __init__(self, status: int, retry_after: str | None) -> None:
        super().__init__(f"{status} from the provider")
        self.response = Response(status, {"Retry-After": retry_after} if retry_after else {})


def states(app: App) -> dict[str, int]:
    out: dict[str, int] = {}
    for _q, state, n in app.store.job_stats():
        out[state] = out.get(state, 0) + n
    return out


def test_a_rate_limited_job_waits_without_using_an_attempt(app: App, clock) -> None:
    app.limiter("stripe", rate=2, burst=2)
    ran: list[tuple[float, str]] = []

    @app.job(limiter="stripe", max_attempts=1, max_deferrals=1)
    def refund(ctx, n: int) -> int:
        ran.append((app.store.now(), ctx.job.key))
        return n

    refund.enqueue_many([{"args": [i], "key": f"r{i}"} for i in range(7)])
    app.work(burst=True)
    assert len(ran) == 2  # the burst
    waiting = [j for j in app.jobs_list(state="scheduled")]
    assert len(waiting) == 5
    for j in waiting:
        assert (j.attempt, j.deferrals, j.reason) == (0, 0, "limiter:stripe")
        full = app.get(j.key)
        assert full.trace[-1].outcome == "deferred" and full.trace[-1].detail["why"] == "rate"
    for _ in range(30):
        clock.advance(0.25)
        app.work(burst=True)
    assert states(app) == {"succeeded": 7}
    for j in app.jobs_list():
        # max_attempts=1 and max_deferrals=1, yet several waits each: waiting is neither.
        assert (j.attempt, j.deferrals) == (1, 0)
    times = sorted(t for t, _ in ran)
    for t in times:  # never more than burst + rate * window
        assert sum(1 for u in times if t <= u < t + 1.0) <= 2 + 2


def test_refused_jobs_come_back_one_spacing_apart(app: App, clock) -> None:
    app.limiter("mail", rate=10, burst=1)

    @app.job(limiter="mail")
    def send(ctx, n: int) -> None:
        pass

    send.enqueue_many([{"args": [i]} for i in range(20)])
    start = app.store.now()
    app.work(burst=True)
    turns = sorted(j.run_at.timestamp() - start for j in app.jobs_list(state="scheduled"))  # type: ignore[union-attr]
    assert len(turns) == 19
    for a, b in itertools.pairwise(turns):
        assert b - a > 0.0 and b - a < 0.2  # spread at the limiter's pace, not one herd
    assert turns[-1] == pytest.approx(1.9, abs=0.11)


def test_concurrency_slots_follow_the_lease(app: App, clock) -> None:
    app.limiter("llm", concurrency=1)

    @app.job(limiter="llm")
    def ask(ctx) -> None:
        pass

    store = app.store
    specs = {"llm": app.limiters["llm"].spec}
    ask.enqueue(key="a")
    ask.enqueue(key="b")
    [first, second] = store.job_claim(ClaimParams(("default",), 2, "w1", 30.0))

    def acquire(c, defer: bool = False):
        return store.limiter_acquire_many(specs, [Acquire(c.job.id, c.token, c.job.runs, ("llm",), defer=defer)])[0]

    assert acquire(first).granted
    refused = acquire(second)
    assert not refused.granted and refused.why == "concurrency"
    assert store.limiter_list()[0].in_flight == 1
    # Finishing the attempt frees the slot in the same transaction (the lease token is gone).
    store.job_finish_many([FinishParams(first.job.id, first.token, first.job.runs, State.SUCCEEDED,
                                        Outcome.SUCCEEDED)])
    assert acquire(second).granted
    # A worker that dies holds its slot only until its lease expires.
    ask.enqueue(key="c")
    [third] = store.job_claim(ClaimParams(("default",), 1, "w2", 30.0))
    assert not acquire(third).granted
    clock.advance(31)
    assert acquire(third).granted


def test_a_refusal_is_fenced_on_the_lease(app: App, clock) -> None:
    app.limiter("x", rate=1, burst=1)

    @app.job(limiter="x")
    def job(ctx) -> None:
        pass

    job.enqueue(key="a")
    job.enqueue(key="b")
    store = app.store
    [a, b] = store.job_claim(ClaimParams(("default",), 2, "w", 30.0))
    specs = {"x": app.limiters["x"].spec}
    grants = store.limiter_acquire_many(specs, [Acquire(a.job.id, a.token, a.job.runs, ("x",)),
                                                Acquire(b.job.id, "not-the-token", b.job.runs, ("x",))])
    assert grants[0].granted and not grants[1].granted and not grants[1].applied
    assert app.get("b").state == State.RUNNING  # nothing changed under a stale token


def test_retry_after_pauses_the_limiter_for_everyone_and_gives_the_attempt_back(app: App, clock) -> None:
    app.limiter("stripe", rate=100, burst=100)
    calls: list[str] = []

    @app.job(limiter="stripe", max_attempts=1)
    def charge(ctx) -> str:
        calls.append(ctx.job.key)
        if ctx.job.key == "c0" and len(calls) == 1:
            raise HTTPStatusError(429, "5")
        return "ok"

    charge.enqueue(key="c0")
    app.work(burst=True, concurrency=1)
    status = app.limiters["stripe"].status()
    assert status.paused_until is not None
    assert status.paused_until.timestamp() == pytest.approx(app.store.now() + 5, abs=0.01)
    job = app.get("c0")
    assert (job.state, job.attempt, job.deferrals, job.reason) == (State.SCHEDULED, 0, 0, "limiter:stripe")
    assert job.trace[0].outcome == "deferred" and job.trace[0].error_type == "HTTPStatusError"
    assert job.trace[0].detail["limiter"]["why"] == "paused"
    events = app.store.limiter_event_list()
    assert [(e.limiter, e.kind) for e in events] == [("stripe", "paused")]
    # Jobs enqueued during the pause wait for it too, without running.
    charge.enqueue(key="c1")
    app.work(burst=True)
    assert calls == ["c0"] and app.get("c1").trace[0].detail["why"] == "paused"
    clock.advance(6)
    app.work(burst=True)
    assert states(app) == {"succeeded": 2}
    assert app.get("c0").attempt == 1


def test_retry_after_without_a_limiter_defers_the_job(app: App, clock) -> None:
    @app.job(max_attempts=1)
    def fetch(ctx) -> str:
        if ctx.job.run == 1:
            raise HTTPStatusError(503, "3")
        return "ok"

    fetch.enqueue(key="f")
    app.work(burst=True)
    job = app.get("f")
    assert (job.state, job.attempt, job.deferrals) == (State.SCHEDULED, 0, 1)
    assert job.run_at.timestamp() == pytest.approx(app.store.now() + 3, abs=0.01)  # type: ignore[union-attr]
    clock.advance(3)
    app.work(burst=True)
    assert app.get("f").state == State.SUCCEEDED


def test_breaker_opens_on_an_outage_and_no_job_dies_of_it(app: App, clock) -> None:
    app.limiter("bank", rate=1000, burst=1000, breaker_after=2, cooldown=10)
    provider = {"up": False, "calls": 0}

    @app.job(limiter="bank", max_attempts=2, backoff=FAST)
    def pay(ctx, n: int) -> int:
        provider["calls"] += 1
        if not provider["up"]:
            raise ConnectionError("bank is down")
        return n

    pay.enqueue_many([{"args": [i], "key": f"p{i}"} for i in range(6)])
    app.work(burst=True, concurrency=1)
    assert provider["calls"] == 2  # two failures in a row opened the breaker; the rest waited
    [opened] = app.store.limiter_event_list()
    assert opened.kind == "breaker_opened" and opened.detail["failures"] == 2
    assert app.limiters["bank"].status().breaker == "open"
    assert [e.kind for e in app.get(opened.detail["job"]).events] == ["breaker_opened"]
    # Cool-downs pass while it is still down: one probe each time, whose attempt is given back.
    for _ in range(4):
        clock.advance(10)
        app.work(burst=True, concurrency=1)
    assert provider["calls"] == 2 + 4
    assert states(app).get("dead", 0) == 0
    provider["up"] = True
    clock.advance(10)
    app.work(burst=True, concurrency=1)
    clock.advance(1)
    app.work(burst=True)
    assert states(app) == {"succeeded": 6}
    kinds = [e.kind for e in app.store.limiter_event_list()]
    assert kinds[0] == "breaker_opened" and kinds[-1] == "breaker_closed"
    assert max(j.attempt for j in app.jobs_list()) <= 2


def test_ctx_limit_guards_a_block_and_gives_the_job_back_when_its_turn_is_far(app: App, clock) -> None:
    app.limiter("openai", rate=1, burst=1)
    entered: list[str] = []

    @app.job(max_attempts=1)
    def agent(ctx) -> str:
        with ctx.limit("openai", wait=0):
            entered.append(ctx.job.key)
        return "done"

    agent.enqueue(key="a1")
    agent.enqueue(key="a2")
    app.work(burst=True)
    assert len(entered) == 1
    waiting = app.get("a2" if entered == ["a1"] else "a1")
    assert (waiting.state, waiting.attempt, waiting.deferrals) == (State.SCHEDULED, 0, 0)
    assert waiting.trace[0].error_type == Throttled.__name__
    clock.advance(2)
    app.work(burst=True)
    assert sorted(entered) == ["a1", "a2"] and states(app) == {"succeeded": 2}


def test_ctx_limit_turns_a_429_inside_the_block_into_a_pause(app: App, clock) -> None:
    app.limiter("openai", rate=100, burst=100)

    @app.job(max_attempts=1)
    def agent(ctx) -> str:
        with ctx.limit("openai"):
            if ctx.job.run == 1:
                raise RetryAfter(4)
        return "done"

    agent.enqueue(key="a")
    app.work(burst=True)
    job = app.get("a")
    assert (job.state, job.attempt, job.deferrals, job.reason) == (State.SCHEDULED, 0, 0, "limiter:openai")
    assert app.limiters["openai"].status().paused_until is not None
    clock.advance(5)
    app.work(burst=True)
    assert app.get("a").state == State.SUCCEEDED


def test_ctx_limit_holds_a_concurrency_slot_only_inside_the_block(app: App, clock) -> None:
    app.limiter("gpu", concurrency=1)
    seen: list[int] = []

    @app.job()
    def render(ctx) -> None:
        with ctx.limit("gpu"):
            seen.append(app.limiters["gpu"].status().in_flight)
        seen.append(app.limiters["gpu"].status().in_flight)

    render.enqueue(key="r")
    app.work(burst=True)
    assert seen == [1, 0]


def test_pause_and_resume_from_the_api(app: App, clock) -> None:
    stripe = app.limiter("stripe", rate=10, burst=10)

    @app.job(limiter="stripe")
    def refund(ctx, n: int) -> None:
        pass

    stripe.pause(60, reason="incident")
    refund.enqueue_many([{"args": [i]} for i in range(5)])
    app.work(burst=True)
    assert states(app) == {"scheduled": 5}
    status = stripe.status()
    assert status.waiting == 5 and status.pause_reason == "incident"
    status = stripe.resume()
    assert status.paused_until is None
    app.work(burst=True)  # released now, a spacing apart: the first at once
    clock.advance(1)
    app.work(burst=True)
    assert states(app) == {"succeeded": 5}
    kinds = [(e.kind, e.actor is not None) for e in app.store.limiter_event_list()]
    assert kinds == [("paused", True), ("resumed", True)]
    first = app.store.limiter_event_list(limit=1)
    assert len(first) == 1 and app.store.limiter_event_list(after_id=first[0].id)[0].kind == "resumed"


def test_multiple_limiters_are_all_or_nothing(app: App, clock) -> None:
    app.limiter("a", rate=1, burst=1)
    app.limiter("b", rate=100, burst=100)

    @app.job(limiters=["a", "b"])
    def both(ctx) -> None:
        pass

    both.enqueue_many([{} for _ in range(3)])
    app.work(burst=True)
    assert states(app) == {"succeeded": 1, "scheduled": 2}
    by_name = {s.name: s for s in app.store.limiter_list()}
    assert by_name["b"].tokens == pytest.approx(99)  # the refused jobs took nothing from b
    for j in app.jobs_list(state="scheduled"):
        assert j.reason == "limiter:a"


def test_bad_configuration_is_an_error_at_start_up(store_url: str, clock) -> None:
    app = App(store_url, clock=clock)
    try:
        for kwargs in ({"rate": 0}, {"rate": -1}, {"rate": 5, "per": 0}, {"burst": 3},
                       {"rate": 1, "burst": 0.5}, {"concurrency": 0}, {"breaker_after": 0}, {"cooldown": 0}):
            with pytest.raises(ConfigError):
                app.limiter("x", **kwargs)
        for kwargs in ({"rate": 1e-12}, {"rate": 1, "per": 1e11}):
            with pytest.raises(ConfigError, match=r"one turn every 1e\+1[12] s; the longest wait firesafe keeps is "
                                                  r"31536000000 s \(1,000 years\)"):
                app.limiter("x", **kwargs)
        app.limiter("x", rate=1)
        with pytest.raises(ConfigError, match="already declared"):
            app.limiter("x", rate=2)
        with pytest.raises(ConfigError, match="not both"):
            app.job(lambda ctx: None, name="j1", limiter="x", limiters=["x"])

        @app.job(limiter="strip")
        def typo(ctx) -> None:
            pass

        with pytest.raises(ConfigError, match="'strip', which is not declared"):
            app.worker()
    finally:
        app.close()


def test_unknown_limiter_in_ctx_limit_fails_the_attempt_clearly(app: App, clock) -> None:
    @app.job(max_attempts=1)
    def job(ctx) -> None:
        with ctx.limit("nope"):
            pass

    job.enqueue(key="j")
    app.work(burst=True)
    dead = app.get("j")
    assert dead.state == State.DEAD and "no limiter with this name" in (dead.error_message or "")


def test_report_and_events_at_the_store_level(app: App, clock) -> None:
    spec = app.limiter("p", breaker_after=1, cooldown=5).spec

    @app.job(limiter="p")
    def job(ctx) -> None:
        pass

    job.enqueue(key="j")
    store = app.store
    [c] = store.job_claim(ClaimParams(("default",), 1, "w", 30.0))
    fin = FinishParams(c.job.id, c.token, c.job.runs, State.SCHEDULED, Outcome.FAILED, delay=1.0,
                       error_type="ConnectionError", message="down", detail=json.dumps({"duration": 0.1}))
    [v] = store.limiter_report_many({"p": spec}, [Report(c.job.id, c.token, c.job.runs, ("p",), "failure",
                                                         finish=fin, key="j")])
    assert not v.waits  # the failure that opened the breaker was a real attempt: saved as usual
    [e] = store.limiter_event_list()
    assert (e.limiter, e.kind, e.detail["job"], e.detail["failures"]) == ("p", "breaker_opened", "j", 1)
    status = store.limiter_list()[0]
    assert status.breaker == "open" and status.retry_at is not None
