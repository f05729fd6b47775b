"""A grant checked again just before its job starts, and a Retry-After stored the moment it is met
(issue 29): the store's side on both stores (the fake clock decides), and the worker's clock reading."""

from __future__ import annotations

import time

import pytest

from firesafe import App
from firesafe.limits.gate import StoreTime
from firesafe.limits.store import Acquire, Report
from firesafe.store.base import ClaimParams


def test_a_renewal_takes_a_token_but_not_a_second_slot(app: App, clock) -> None:
    app.limiter("x", rate=10, burst=2, concurrency=1)

    @app.job(limiter="x")
    def job(ctx) -> None:
        pass

    job.enqueue(key="a")
    store = app.store
    [a] = store.job_claim(ClaimParams(("default",), 1, "w", 30.0))
    specs = {"x": app.limiters["x"].spec}
    first = Acquire(a.job.id, a.token, a.job.runs, ("x",))
    assert store.limiter_acquire_many(specs, [first])[0].granted
    # The job holds the only slot: as a renewal it is not refused by its own slot, and takes a token.
    renew = Acquire(a.job.id, a.token, a.job.runs, ("x",), defer=False, renew=True)
    assert store.limiter_acquire_many(specs, [renew])[0].granted
    status = app.limiters["x"].status()
    assert status.in_flight == 1 and status.tokens == pytest.approx(0.0)
    refused = store.limiter_acquire_many(specs, [renew])[0]  # no token left: its turn in the line
    assert not refused.granted and refused.why == "rate" and refused.delay == pytest.approx(0.1, abs=0.05)
    assert app.get("a").state == "running"  # a renewal refused gives nothing back by itself


def test_a_renewal_sees_a_pause_stored_after_the_grant(app: App, clock) -> None:
    app.limiter("x", rate=100, burst=10)

    @app.job(limiter="x")
    def job(ctx) -> None:
        pass

    job.enqueue(key="a")
    store = app.store
    [a] = store.job_claim(ClaimParams(("default",), 1, "w", 30.0))
    specs = {"x": app.limiters["x"].spec}
    assert store.limiter_acquire_many(specs, [Acquire(a.job.id, a.token, a.job.runs, ("x",))])[0].granted
    until = store.limiter_retry_after(specs, ["x"], 3.0, job_id=a.job.id, key="a")
    assert until == pytest.approx(store.now() + 3.0)
    grant = store.limiter_acquire_many(specs, [Acquire(a.job.id, a.token, a.job.runs, ("x",), defer=False,
                                                       renew=True)])[0]
    assert not grant.granted and grant.why == "paused" and grant.delay >= 3.0


def test_a_retry_after_stored_at_once_is_not_stored_twice(app: App, clock) -> None:
    app.limiter("x", rate=100, burst=10)
    specs = {"x": app.limiters["x"].spec}
    store = app.store
    store.limiter_sync(list(specs.values()))
    until = store.limiter_retry_after(specs, ["x"], 5.0, job_id=None, key="k1")
    clock.advance(0.5)
    # A shorter pause met meanwhile does not shorten it, and records nothing.
    assert store.limiter_retry_after(specs, ["x"], 1.0) == pytest.approx(until)
    # The attempt's report, saved later with its batch, names the pause it met: nothing moves.
    [v] = store.limiter_report_many(specs, [Report(0, "t", 1, ("x",), "ok", pause_for=5.0, pause_until=until)])
    assert v.waits and v.delay >= until - store.now()
    assert app.limiters["x"].status().paused_until.timestamp() == pytest.approx(until)
    events = store.limiter_event_list()
    assert [(e.kind, e.detail.get("job"), e.detail.get("seconds")) for e in events] == [("paused", "k1", 5.0)]


def test_the_store_time_learnt_from_grants_errs_late() -> None:
    class DatabaseClock:  # a store whose clock is the database's: none injected
        clock = None

    st = StoreTime(DatabaseClock())
    assert st.now() is None
    sent = time.time()
    offset = 100.0  # the database's clock runs 100 s ahead of this process's
    st.learn(sent, sent + offset + 0.030)  # a grant decided 30 ms after the request left
    st.learn(sent, sent + offset + 0.002)  # one decided 2 ms after: the better estimate
    st.learn(sent, sent + offset + 0.050)
    now = st.now()
    assert now is not None and 0.0015 <= now - (time.time() + offset) < 0.012  # 2 ms late, less the time passed


def test_an_injected_clock_is_read_as_it_is(clock) -> None:
    class Store:
        pass

    store = Store()
    store.clock = clock  # type: ignore[attr-defined]
    st = StoreTime(store)
    st.learn(0.0, 1.0)
    assert st.now() == clock.now()
