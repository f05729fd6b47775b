"""Contract: job priorities. Every store.

Within a queue a claim takes the lowest rank first, ``run_at - 60 x priority`` (a point of priority
counts as a minute of waiting; firesafe.models.claim_rank), then run_at, then id: a higher priority
runs first among jobs that became due within a minute a point of each other, equal priorities keep
their order, and no job is passed for ever. Priority is scheduling, not identity: it is not part of
the fingerprint. A bad value is one InvalidInput (ConfigError when a job is declared with it).
"""

from __future__ import annotations

import pytest

from firesafe import App, State
from firesafe.errors import ConfigError, InvalidInput
from firesafe.models import PRIORITY_STEP
from firesafe.states import Outcome
from firesafe.store.base import ClaimParams, FinishParams
from tests.contract.test_finish_and_claim import Q, declare, done  # one job, and a success to save


def claim(app: App, limit: int = 100, *, suspects: bool = False) -> list:
    return app.store.job_claim(ClaimParams(Q, limit, "w", 30.0, suspects=suspects))


def keys(claimed: list) -> list[str]:
    return [c.job.key for c in claimed]


def test_higher_priority_is_claimed_first_and_equal_priorities_keep_their_order(app: App) -> None:
    work = declare(app)
    for n, p in enumerate([0, 5, -3, 5, 0, 100, -100, 0]):
        work.options(key=f"k{n}-p{p}", priority=p).enqueue(n)
    assert keys(claim(app)) == ["k5-p100", "k1-p5", "k3-p5", "k0-p0", "k4-p0", "k7-p0", "k2-p-3", "k6-p-100"]


def test_a_claim_of_a_few_takes_the_highest_and_the_next_claim_the_rest_in_order(app: App) -> None:
    work = declare(app)
    for n in range(6):
        work.options(key=f"k{n}", priority=n % 3).enqueue(n)
    store = app.store
    first = claim(app, 2)
    assert keys(first) == ["k2", "k5"]
    applied, claimed = store.job_finish_and_claim([done(c) for c in first], ClaimParams(Q, 3, "w", 30.0))
    assert applied == [True, True]
    assert keys(claimed) == ["k1", "k4", "k0"]  # finish-and-claim orders as job_claim does
    assert [c.job.priority for c in claimed] == [1, 1, 0]


def test_the_job_declares_a_default_an_enqueue_overrides_it_and_enqueue_many_takes_one_per_item(app: App) -> None:
    @app.job(priority=7)
    def urgent(ctx, n: int) -> int:
        return n

    work = declare(app)
    assert urgent.enqueue(1, key="declared").priority == 7
    assert urgent.options(key="lowered", priority=-1).enqueue(2).priority == -1
    assert work.enqueue(3, key="plain").priority == 0
    made = work.enqueue_many([{"args": [4], "key": "m-high", "priority": 9}, {"args": [5], "key": "m-plain"}])
    assert [j.priority for j in made] == [9, 0]
    assert [app.get(k).priority for k in ("declared", "lowered", "plain", "m-high", "m-plain")] == [7, -1, 0, 9, 0]
    assert keys(claim(app)) == ["m-high", "declared", "plain", "m-plain", "lowered"]
    assert app.get("declared").as_dict()["priority"] == 7


def test_a_job_may_still_take_an_argument_named_priority(app: App) -> None:
    @app.job()
    def ticket(ctx, priority: str) -> str:
        return priority

    job = ticket.options(key="t", priority=3).enqueue("urgent")
    assert (job.priority, job.kwargs or job.args) == (3, ["urgent"])
    assert ticket.enqueue(priority="low", key="t2").priority == 0  # an argument, not the option


def test_the_same_key_with_another_priority_is_the_same_job_not_a_conflict(app: App) -> None:
    work = declare(app)
    first = work.options(key="same", priority=1).enqueue(1)
    again = work.options(key="same", priority=50).enqueue(1)
    assert first.created and not again.created
    assert again.id == first.id and again.priority == 1  # the stored job, as it was stored
    assert app.get("same").priority == 1


@pytest.mark.parametrize("bad", [101, -101, 1.5, "high", True])
def test_a_bad_priority_is_one_invalid_input_and_nothing_is_stored(app: App, bad) -> None:
    work = declare(app)
    with pytest.raises(InvalidInput, match=r"^priority must be a whole number from -100 to 100 \(higher runs "
                                           r"first\), not "):
        work.options(key="bad", priority=bad).enqueue(1)
    with pytest.raises(InvalidInput, match=r"^priority must be a whole number from -100 to 100"):
        work.enqueue_many([{"args": [1], "key": "ok"}, {"args": [2], "key": "bad", "priority": bad}])
    assert app.store.job_get("bad") is None and app.store.job_get("ok") is None


def test_a_job_declared_with_a_bad_priority_is_a_config_error(app: App) -> None:
    with pytest.raises(ConfigError, match=r"^job 'loud': priority must be a whole number from -100 to 100"):
        @app.job(priority=1000)
        def loud(ctx) -> None:
            pass


def test_a_point_of_priority_is_worth_a_minute_of_waiting(app: App, clock) -> None:
    work = declare(app)
    work.enqueue(0, key="old-p0")
    clock.advance(PRIORITY_STEP - 1)
    work.options(key="newer-p1", priority=1).enqueue(1)  # due 59 s later, one point higher: first
    clock.advance(2)
    work.options(key="newest-p1", priority=1).enqueue(2)  # due 61 s later: after the old one
    assert keys(claim(app)) == ["newer-p1", "old-p0", "newest-p1"]


def test_a_low_priority_job_is_not_starved_by_a_flood_of_higher_ones(app: App, clock) -> None:
    """Every 10 s five jobs of priority 10 arrive and a worker takes five: the job of priority 0
    waits while they are newer than its 10 minutes' worth of priority, and no longer."""
    work = declare(app)
    work.enqueue(0, key="low")
    work.enqueue_many([{"args": [n], "key": f"high-0-{n}", "priority": 10} for n in range(5)])
    store = app.store
    for tick in range(1, 200):
        clock.advance(10)
        work.enqueue_many([{"args": [n], "key": f"high-{tick}-{n}", "priority": 10} for n in range(5)])
        taken = claim(app, 5)
        store.job_finish_many([done(c) for c in taken])
        if "low" in keys(taken):
            break
    waited = 10 * tick
    assert 10 * PRIORITY_STEP - 10 <= waited <= 10 * PRIORITY_STEP + 10, waited
    assert app.get("low").state == State.SUCCEEDED


def test_a_future_job_is_not_claimed_early_whatever_its_priority(app: App, clock) -> None:
    work = declare(app)
    work.options(key="later-top", delay=30, priority=100).enqueue(1)
    work.options(key="now-bottom", priority=-100).enqueue(2)
    assert keys(claim(app)) == ["now-bottom"]
    clock.advance(31)
    assert keys(claim(app)) == ["later-top"]


def test_a_retried_job_keeps_its_priority(app: App, clock) -> None:
    work = declare(app)
    work.options(key="hi", priority=5).enqueue(1)
    [c] = claim(app)
    retry = FinishParams(c.job.id, c.token, c.job.runs, State.SCHEDULED, Outcome.FAILED, delay=10.0,
                         error_type="Boom", message="again")
    assert app.store.job_finish_many([retry]) == [True]
    clock.advance(5)
    work.enqueue(2, key="plain")
    clock.advance(6)
    assert keys(claim(app)) == ["hi", "plain"]
    assert app.get("hi").priority == 5 and app.get("hi").attempt == 2


def test_suspects_are_claimed_by_priority_too(app: App, clock) -> None:
    work = declare(app)
    for n, p in enumerate([0, 3, 1]):
        work.options(key=f"s{n}", priority=p).enqueue(n)
    assert len(claim(app)) == 3
    clock.advance(31)
    app.worker(burst=True)._rescue()  # the leases expired: each job lost its worker once
    clock.advance(3600)  # past any backoff
    assert keys(claim(app)) == []  # suspects only run alone
    assert keys(claim(app, suspects=True)) == ["s1", "s2", "s0"]


def test_a_large_batch_stores_each_items_priority(app: App) -> None:
    work = declare(app)
    made = work.enqueue_many([{"args": [n], "key": f"b{n:03}", "priority": n % 7 - 3} for n in range(300)])
    assert [j.priority for j in made] == [n % 7 - 3 for n in range(300)]
    claimed: list = []
    while taken := claim(app, 100):  # a store may round a claim's limit down (PostgreSQL: see _claim_limit)
        claimed += taken
    assert [c.job.priority for c in claimed] == sorted((n % 7 - 3 for n in range(300)), reverse=True)
    for p in range(-3, 4):  # each priority in enqueue order
        same = [c.job.key for c in claimed if c.job.priority == p]
        assert same == sorted(same)


def test_jobs_waiting_for_a_limiter_come_back_in_priority_order(app: App, clock) -> None:
    stripe = app.limiter("stripe", rate=10, burst=10)

    @app.job(limiter="stripe")
    def refund(ctx, n: int) -> None:
        pass

    stripe.pause(60, reason="incident")
    for n, p in enumerate([0, 5, -5, 5]):
        refund.options(key=f"r{n}", priority=p).enqueue(n)
    app.work(burst=True)  # claimed in priority order, each given back to wait for the limiter
    assert {j.state for j in app.jobs_list(job="refund")} == {State.SCHEDULED}
    stripe.resume()  # brings them forward a spacing apart, in the order a claim takes them
    waiting = sorted(app.jobs_list(job="refund"), key=lambda j: (j.run_at, j.id))
    assert [j.key for j in waiting] == ["r1", "r3", "r0", "r2"]
    assert len({j.run_at for j in waiting}) == 4
    clock.advance(1)
    app.work(burst=True)
    assert {j.state for j in app.jobs_list(job="refund")} == {State.SUCCEEDED}
