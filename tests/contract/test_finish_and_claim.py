"""Contract: saving a batch's outcomes and claiming the next batch in one transaction. Every store."""

from __future__ import annotations

from firesafe import App, State
from firesafe.states import Outcome
from firesafe.store.base import ClaimParams, FinishParams

Q = ("default",)


def declare(app: App):
    @app.job(max_attempts=3)
    def work(ctx, n: int) -> int:
        return n

    return work


def done(c, state: State = State.SUCCEEDED, outcome: Outcome = Outcome.SUCCEEDED, **kw) -> FinishParams:
    return FinishParams(c.job.id, c.token, c.job.runs, state, outcome, **kw)


def test_outcomes_are_saved_and_the_next_batch_claimed_in_one_call(app: App) -> None:
    work = declare(app)
    for n in range(5):
        work.enqueue(n, key=f"k{n}")
    store = app.store
    first = store.job_claim(ClaimParams(Q, 2, "w", 30.0))
    applied, claimed = store.job_finish_and_claim([done(c, result=str(i)) for i, c in enumerate(first)],
                                                  ClaimParams(Q, 2, "w", 30.0))
    assert applied == [True, True]
    assert [c.job.key for c in claimed] == ["k2", "k3"]  # FIFO, and not the two just finished
    assert all(c.job.state == State.RUNNING and c.job.attempt == 1 for c in claimed)
    assert claimed[0].token != first[0].token
    for i, c in enumerate(first):
        job = app.get(c.job.key)
        assert job.state == State.SUCCEEDED and job.result == i
        assert [a.outcome for a in job.trace] == ["succeeded"]
    assert [a.outcome for a in app.get("k2").trace] == [None]  # its attempt is open: no outcome yet


def test_a_fenced_outcome_changes_nothing_and_the_claim_still_happens(app: App, clock) -> None:
    work = declare(app)
    work.enqueue(1, key="a")
    work.enqueue(2, key="b")
    store = app.store
    [stale] = store.job_claim(ClaimParams(Q, 1, "w1", 30.0))
    clock.advance(31)
    app.worker(burst=True)._rescue()  # w1's lease expired: "a" goes back to waiting
    applied, claimed = store.job_finish_and_claim([done(stale, result='"late"')], ClaimParams(Q, 10, "w1", 30.0))
    assert applied == [False]
    assert [c.job.key for c in claimed] == ["b"]  # "a" was lost once: a suspect, only claimed alone
    assert app.get("a").result is None and app.get("a").state != State.SUCCEEDED


def test_a_job_retried_without_delay_can_be_claimed_again_by_the_same_call(app: App) -> None:
    work = declare(app)
    work.enqueue(1, key="again")
    store = app.store
    [c] = store.job_claim(ClaimParams(Q, 1, "w", 30.0))
    retry = done(c, State.SCHEDULED, Outcome.FAILED, delay=0.0, error_type="Timeout", message="try again")
    applied, claimed = store.job_finish_and_claim([retry], ClaimParams(Q, 1, "w", 30.0))
    assert applied == [True]
    [again] = claimed  # the claim sees what the finish wrote, in the same transaction
    assert again.job.key == "again" and again.job.attempt == 2 and again.job.runs == 2
    assert [a.outcome for a in app.get("again").trace] == ["failed", None]


def test_a_dead_outcome_alerts_as_job_finish_many_does(app: App) -> None:
    work = declare(app)
    work.enqueue(1, key="dead")
    store = app.store
    [c] = store.job_claim(ClaimParams(Q, 1, "w", 30.0))
    fin = done(c, State.DEAD, Outcome.FAILED, error_type="Denied", message="no", reason="permanent")
    assert store.job_finish_and_claim([fin], ClaimParams(Q, 1, "w", 30.0)) == ([True], [])
    assert app.get("dead").state == State.DEAD
    [event] = store.alert_pending(10)  # in the outbox, written by the same transaction
    assert (event.kind, event.job_name, event.keys) == ("dead_letter", "work", ["dead"])


def test_with_no_outcomes_it_is_a_claim(app: App) -> None:
    work = declare(app)
    work.enqueue(1, key="only")
    applied, claimed = app.store.job_finish_and_claim([], ClaimParams(Q, 5, "w", 30.0))
    assert applied == [] and [c.job.key for c in claimed] == ["only"]
