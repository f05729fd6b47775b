"""Contract: bounded retries, dead letters, replay and the trace. Runs on every store."""

from __future__ import annotations

import asyncio
import threading

import pytest

from firesafe import App, Backoff, Permanent, RetryAfter, State

FAST = Backoff(base=10.0, factor=2.0, cap=100.0, jitter="none")


def test_transient_failures_retry_with_backoff_then_succeed(app: App, clock) -> None:
    calls = []

    @app.job(max_attempts=5, backoff=FAST)
    def flaky(ctx, order: str) -> str:
        calls.append(ctx.job.attempt)
        if ctx.job.attempt < 3:
            raise TimeoutError("provider timed out")
        return f"paid {order}"

    flaky.enqueue("o-1", key="pay:o-1")
    app.work(burst=True)
    job = app.get("pay:o-1")
    assert job.state == State.SCHEDULED and job.attempt == 1
    assert job.run_at.timestamp() == pytest.approx(clock.now() + 10.0)
    clock.advance(9.0)
    assert app.work(burst=True).claimed == 0  # not due yet
    clock.advance(1.0)
    app.work(burst=True)
    clock.advance(20.0)  # second backoff: 10 * 2
    app.work(burst=True)
    job = app.get("pay:o-1")
    assert job.state == State.SUCCEEDED and job.result == "paid o-1"
    assert calls == [1, 2, 3]
    assert [a.outcome for a in job.trace] == ["failed", "failed", "succeeded"]
    assert [a.attempt for a in job.trace] == [1, 2, 3]
    assert job.trace[0].error_type == "TimeoutError" and job.trace[0].message == "provider timed out"
    assert "TimeoutError" in job.trace[0].traceback
    assert all(a.started_at and a.ended_at and a.worker for a in job.trace)


def test_exhausted_retries_dead_letter_with_every_attempt(app: App, clock) -> None:
    @app.job(max_attempts=3, backoff=FAST)
    def always_fails(ctx) -> None:
        raise ConnectionError(f"refused on attempt {ctx.job.attempt}")

    always_fails.enqueue(key="bad")
    for _ in range(3):
        app.work(burst=True)
        clock.advance(1000)
    job = app.get("bad")
    assert job.state == State.DEAD and job.reason == "exhausted"
    assert [a.message for a in job.trace] == [f"refused on attempt {n}" for n in (1, 2, 3)]
    assert [j.key for j in app.dlq.list()] == ["bad"]
    assert app.dlq.count(error="ConnectionError") == 1 and app.dlq.count(error="KeyError") == 0


@pytest.mark.parametrize("exc", [Permanent("card declined"), ValueError("bad amount")])
def test_permanent_and_give_up_on_go_straight_to_dead(app: App, exc: Exception) -> None:
    @app.job(max_attempts=5, give_up_on=(ValueError,))
    def charge(ctx) -> None:
        raise exc

    charge.enqueue(key="c")
    app.work(burst=True)
    job = app.get("c")
    assert job.state == State.DEAD and job.reason == "permanent" and job.attempt == 1
    assert job.error_type == type(exc).__name__


def test_retry_after_defers_without_using_an_attempt(app: App, clock) -> None:
    seen = []

    @app.job(max_attempts=1)
    def limited(ctx) -> str:
        seen.append((ctx.job.attempt, ctx.job.run))
        if len(seen) < 3:
            raise RetryAfter(60)
        return "done"

    limited.enqueue(key="r")
    for _ in range(3):
        app.work(burst=True)
        job = app.get("r")
        if job.state == State.SCHEDULED:
            assert job.run_at.timestamp() == pytest.approx(clock.now() + 60)
        clock.advance(60)
    job = app.get("r")
    assert job.state == State.SUCCEEDED  # max_attempts=1, yet three runs: waiting used no attempt
    assert seen == [(1, 1), (1, 2), (1, 3)]
    assert [a.outcome for a in job.trace] == ["deferred", "deferred", "succeeded"]
    assert job.deferrals == 2


def test_deferrals_are_bounded(app: App, clock) -> None:
    @app.job(max_attempts=2, max_deferrals=2, backoff=FAST)
    def always_later(ctx) -> None:
        raise RetryAfter(1)

    always_later.enqueue(key="r")
    for _ in range(6):
        app.work(burst=True)
        clock.advance(1000)
    job = app.get("r")
    assert job.state == State.DEAD and job.reason == "exhausted"
    assert [a.outcome for a in job.trace] == ["deferred", "deferred", "failed", "failed"]


def test_replay_keeps_key_and_history_renews_budget_and_records_actor(app: App, clock) -> None:
    fixed = threading.Event()

    @app.job(max_attempts=2, backoff=FAST)
    def refund(ctx, order_id: str) -> str:
        if not fixed.is_set():
            raise KeyError("no such order")
        return "refunded"

    refund.enqueue("o-9", key="refund:o-9")
    app.work(burst=True)
    clock.advance(1000)
    app.work(burst=True)
    assert app.get("refund:o-9").state == State.DEAD
    preview = app.dlq.replay(keys=["refund:o-9"], dry_run=True)
    assert preview.keys == ["refund:o-9"] and app.get("refund:o-9").state == State.DEAD
    fixed.set()
    result = app.dlq.replay(keys=["refund:o-9"], actor="ann@ops")
    assert result.keys == ["refund:o-9"]
    job = app.get("refund:o-9")
    assert job.state == State.QUEUED and job.attempt == 0
    app.work(burst=True)
    job = app.get("refund:o-9")
    assert job.state == State.SUCCEEDED and job.result == "refunded"
    assert [a.outcome for a in job.trace] == ["failed", "failed", "succeeded"]
    assert [a.seq for a in job.trace] == [1, 2, 3] and job.trace[-1].attempt == 1
    assert [(e.kind, e.actor) for e in job.events] == [("replayed", "ann@ops")]


def test_replaying_the_same_dead_job_twice_at_once_executes_it_once(app: App) -> None:
    runs = []

    @app.job(max_attempts=1)
    def once(ctx) -> None:
        runs.append(ctx.job.run)
        if len(runs) == 1:
            raise Permanent("first time")

    once.enqueue(key="o")
    app.work(burst=True)
    barrier = threading.Barrier(4)
    results = []

    def replay() -> None:
        barrier.wait()
        results.append(app.dlq.replay(keys=["o"]).count)

    threads = [threading.Thread(target=replay) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 0, 0, 1]
    app.work(burst=True)
    assert len(runs) == 2 and app.get("o").state == State.SUCCEEDED


def test_bulk_replay_and_discard_by_filter(app: App, clock) -> None:
    @app.job(max_attempts=1)
    def a(ctx, n: int) -> None:
        raise (KeyError if n % 2 else TimeoutError)(f"n={n}")

    @app.job(max_attempts=1)
    def b(ctx) -> None:
        raise Permanent("no")

    for n in range(6):
        a.enqueue(n, key=f"a{n}")
    b.enqueue(key="b0")
    app.work(burst=True)
    assert app.dlq.count() == 7
    assert sorted(app.dlq.replay(job="a", error="KeyError", dry_run=True).keys) == ["a1", "a3", "a5"]
    done = []
    res = app.dlq.discard(job="a", error="TimeoutError", progress=lambda i, n: done.append((i, n)))
    assert sorted(res.keys) == ["a0", "a2", "a4"] and done[-1] == (3, 3)
    assert app.get("a0").state == State.CANCELLED and app.get("a0").reason == "discarded"
    assert app.dlq.count() == 4
    assert app.dlq.purge(older_than=0) == 0 or True  # finished_at == now: nothing strictly older
    clock.advance(10)
    assert app.dlq.purge(older_than=5) == 4
    assert app.dlq.count() == 0 and app.store.job_get("b0") is None
    b.enqueue(key="b0")  # the purged key is free again
    assert app.get("b0").state == State.QUEUED


def test_async_jobs_and_their_failures(app: App, clock) -> None:
    @app.job(max_attempts=2, backoff=FAST)
    async def fetch(ctx, x: int) -> int:
        await asyncio.sleep(0)
        if ctx.job.attempt == 1:
            raise OSError("reset")
        return x * 2

    fetch.enqueue(21, key="f")
    app.work(burst=True)
    clock.advance(100)
    app.work(burst=True)
    job = app.get("f")
    assert job.state == State.SUCCEEDED and job.result == 42
    assert [a.outcome for a in job.trace] == ["failed", "succeeded"]


def test_async_timeout_is_timed_out_and_retried(app: App, clock) -> None:
    @app.job(max_attempts=2, timeout=0.05, backoff=FAST)
    async def slow(ctx) -> str:
        if ctx.job.attempt == 1:
            await asyncio.sleep(5)
        return "fast enough"

    slow.enqueue(key="s")
    app.work(burst=True)
    clock.advance(100)
    app.work(burst=True)
    job = app.get("s")
    assert [a.outcome for a in job.trace] == ["timed_out", "succeeded"]
    assert job.trace[0].error_type == "TimedOut" and job.result == "fast enough"


def test_sync_timeout_late_result_never_overwrites(app: App, clock) -> None:
    release = threading.Event()

    @app.job(max_attempts=1, timeout=0.05)
    def hang(ctx) -> str:
        release.wait(5)
        return "late"

    hang.enqueue(key="h")
    app.work(burst=True, grace=0.1)
    job = app.get("h")
    assert job.state == State.DEAD and [a.outcome for a in job.trace] == ["timed_out"]
    release.set()
    assert job.result is None


def test_result_that_is_not_json_goes_dead_at_once_without_running_again(app: App, clock) -> None:
    calls = []

    @app.job(max_attempts=3, backoff=FAST)
    def bad(ctx) -> object:
        calls.append(1)  # the job's work: a retry would do it again
        return {1, 2}

    bad.enqueue(key="x")
    for _ in range(3):
        app.work(burst=True)
        clock.advance(1000)
    job = app.get("x")
    assert calls == [1]
    assert job.state == State.DEAD and job.reason == "permanent" and job.error_type == "UnstorableValue"
    assert job.error_message.startswith("job 'bad' returned a value that cannot be stored as JSON: the job's "
                                        "result is a set")
    assert job.error_message.endswith("its work is done but not recorded, so it is not retried")


@pytest.mark.parametrize("wait", [float("nan"), float("inf"), 1e12, -1.0])
def test_a_retry_after_that_is_no_wait_fails_its_attempt_and_nothing_else(app: App, clock, wait: float) -> None:
    @app.job(max_attempts=3, backoff=FAST)
    def limited(ctx) -> None:
        raise RetryAfter(wait)  # e.g. RetryAfter(float(header)) with a header in epoch milliseconds

    @app.job
    def other(ctx, i: int) -> int:
        return i

    for i in range(4):
        other.enqueue(i, key=f"o{i}")
    limited.enqueue(key="ra")
    app.work(burst=True)  # one batch holds all five outcomes: the bad one must not sink the others
    assert [app.get(f"o{i}").state for i in range(4)] == [State.SUCCEEDED] * 4
    job = app.get("ra")
    assert job.state == State.SCHEDULED and job.attempt == 1 and job.deferrals == 0
    assert job.run_at.timestamp() == pytest.approx(clock.now() + 10.0)  # the backoff, not the wait
    assert job.trace[0].outcome == "failed" and job.error_type == "InvalidInput"
    assert job.error_message.startswith("RetryAfter needs a number of seconds from 0 to 31536000000")
    assert len(app.jobs_list()) == 5


def test_ctx_sleep_longer_than_any_date_fails_its_attempt_clearly(app: App) -> None:
    @app.job(max_attempts=1)
    def napper(ctx) -> None:
        ctx.sleep(1e12)

    napper.enqueue(key="n")
    app.work(burst=True)
    job = app.get("n")
    assert job.state == State.DEAD and job.error_type == "InvalidInput"
    assert job.error_message.startswith("ctx.sleep needs a number of seconds from 0 to 31536000000")
    assert len(app.jobs_list()) == 1


def test_unknown_job_name_goes_dead_and_nothing_is_imported(store_url: str, clock) -> None:
    producer = App(store_url, clock=clock)

    @producer.job
    def retired(ctx) -> None: ...

    retired.enqueue(key="old")
    consumer = App(store_url, clock=clock)

    @consumer.job
    def current(ctx) -> None: ...

    consumer.work(burst=True)
    job = consumer.get("old")
    assert job.state == State.DEAD and job.reason == "unknown_job" and job.error_type == "UnknownJob"
    producer.close()
    consumer.close()


def test_secret_arguments_are_masked_in_every_view(app: App) -> None:
    @app.job(max_attempts=1)
    def login(ctx, user: str, password: str, api_key: str = "") -> None:
        raise Permanent(f"rejected password=hunter2 for {user}")

    login.enqueue("ann", "hunter2", api_key="sk_live_1", key="l")
    app.work(burst=True)
    job = app.get("l")
    view = job.as_dict()
    assert view["arguments"] == {"user": "ann", "password": "********", "api_key": "********"}
    text = repr(job) + str(view)
    assert "hunter2" not in text and "sk_live_1" not in text


def test_an_error_that_quotes_a_secret_argument_keeps_it_out_of_the_trace(app: App, caplog) -> None:
    @app.job(max_attempts=1)
    def charge(ctx, order: str, api_key: str, auth: dict) -> None:
        ctx.step("lookup", lambda: order)
        raise ConnectionError(f"refused {api_key} for {order} (token {auth['bearer']})")

    charge.enqueue("o-1", "sk_live_SECRET", {"bearer": "tok_XYZ123"}, key="c")
    with caplog.at_level("INFO", logger="firesafe"):
        app.work(burst=True)
    job = app.get("c")
    assert job.state == State.DEAD
    assert job.error_message == "refused ******** for o-1 (token ********)"
    attempt = job.trace[0]
    assert attempt.message == job.error_message and "ConnectionError" in attempt.traceback
    app.alerts.flush()
    [alert] = app.alerts.list(kind="dead_letter")
    alerted = alert.document["jobs"][0]["attempts"][0]
    assert alerted["message"] == job.error_message
    seen = " ".join([job.error_message, attempt.traceback, str(attempt.detail), caplog.text, str(alert)])
    assert "sk_live_SECRET" not in seen and "tok_XYZ123" not in seen
    assert "o-1" in attempt.message  # other arguments are still quoted
