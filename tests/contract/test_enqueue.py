"""Contract: idempotent enqueue (invariant 1). Runs on every store."""

from __future__ import annotations

import pytest

from firesafe import App, IdempotencyConflict, InvalidInput, State
from firesafe.store.base import JobFilter


def declare(app: App):
    @app.job(max_attempts=3)
    def refund(ctx, order_id: str, amount: int) -> dict:
        return {"order": order_id, "amount": amount}

    return refund


def test_enqueue_creates_then_returns_the_same_job(app: App) -> None:
    refund = declare(app)
    first = refund.enqueue("o-1", 100, key="refund:o-1")
    again = refund.enqueue("o-1", 100, key="refund:o-1")
    assert first.created and not again.created
    assert first.id == again.id and again.key == "refund:o-1"
    assert app.store.job_count(JobFilter()) == 1


def test_same_key_other_arguments_is_a_conflict_naming_the_key(app: App) -> None:
    refund = declare(app)
    refund.enqueue("o-1", 100, key="refund:o-1")
    with pytest.raises(IdempotencyConflict, match="refund:o-1"):
        refund.enqueue("o-1", 999, key="refund:o-1")
    assert app.get("refund:o-1").args == ["o-1", 100]


def test_enqueue_of_a_finished_job_returns_its_result_and_runs_nothing(app: App) -> None:
    refund = declare(app)
    refund.enqueue("o-1", 100, key="k")
    app.work(burst=True)
    again = refund.enqueue("o-1", 100, key="k")
    assert not again.created and again.state == State.SUCCEEDED
    assert again.result == {"order": "o-1", "amount": 100}
    stats = app.work(burst=True)
    assert stats.claimed == 0


def test_enqueue_many_is_idempotent_per_key_and_all_or_nothing(app: App) -> None:
    refund = declare(app)
    jobs = refund.enqueue_many([{"args": ["o-1", 1], "key": "a"}, {"args": ["o-2", 2], "key": "b"},
                                {"args": ["o-1", 1], "key": "a"}])
    assert [j.created for j in jobs] == [True, True, False]  # the repeat is the job its first item created
    assert jobs[0].id == jobs[2].id and sum(j.created for j in jobs) == 2
    again = refund.enqueue_many([{"args": ["o-1", 1], "key": "a"}, {"args": ["o-3", 3], "key": "c"}])
    assert [j.created for j in again] == [False, True]
    with pytest.raises(IdempotencyConflict):
        refund.enqueue_many([{"args": ["o-4", 4], "key": "d"}, {"args": ["o-2", 999], "key": "b"}])
    assert app.store.job_get("d") is None  # nothing of the failed batch was stored


@pytest.mark.parametrize(
    "call",
    [
        lambda r: r.enqueue(object(), 1, key="x"),
        lambda r: r.enqueue("o", float("nan"), key="x"),
        lambda r: r.enqueue("o", 1, key=""),
        lambda r: r.enqueue("o", 1, key="k" * 256),
        lambda r: r.enqueue("o", 1, key="bad\nkey"),
        lambda r: r.enqueue("o" * 300_000, 1, key="x"),
        lambda r: r.enqueue("o", key="x"),  # missing argument
        lambda r: r.enqueue("o", 1, 2, key="x"),  # too many
        lambda r: r.enqueue("o", 1, key="x", delay=-1),
    ],
)
def test_bad_input_is_a_clear_error_and_stores_nothing(app: App, call) -> None:
    refund = declare(app)
    with pytest.raises(InvalidInput):
        call(refund)
    assert app.store.job_get("x") is None


def test_delay_makes_a_scheduled_job_that_runs_when_due(app: App, clock) -> None:
    refund = declare(app)
    job = refund.enqueue("o-2", 5, key="later", delay=30)
    assert job.state == State.SCHEDULED
    assert app.work(burst=True).claimed == 0
    clock.advance(31)
    assert app.work(burst=True).succeeded == 1
    assert app.get("later").state == State.SUCCEEDED
