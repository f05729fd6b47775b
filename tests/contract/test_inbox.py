"""Contract: the event inbox. Runs on every store."""

from __future__ import annotations

import threading

import pytest

from firesafe import App, InvalidInput, State
from firesafe.inbox import EventConflict
from firesafe.store.base import JobFilter


def test_an_event_delivered_many_times_runs_its_handler_once(app: App) -> None:
    seen: list[tuple[str, str, dict]] = []

    @app.on_event("stripe", "charge.refunded")
    def on_refund(ctx, event) -> str:
        seen.append((event.id, event.type, event.data))
        return f"handled {event.id}"

    first = app.ingest("stripe", event_id="evt_1", type="charge.refunded", data={"amount": 5})
    again = app.ingest("stripe", event_id="evt_1", type="charge.refunded", data={"amount": 5})
    assert first.created and not again.created and first.key == again.key == "stripe:evt_1"
    app.work(burst=True)
    app.ingest("stripe", event_id="evt_1", type="charge.refunded", data={"amount": 5})
    app.work(burst=True)
    assert seen == [("evt_1", "charge.refunded", {"amount": 5})]
    assert app.get("stripe:evt_1").result == "handled evt_1"


def test_concurrent_deliveries_make_one_job(app: App) -> None:
    @app.on_event("shop")
    def any_event(ctx, event) -> None: ...

    barrier = threading.Barrier(8)
    results = []

    def deliver() -> None:
        barrier.wait()
        results.append(app.ingest("shop", event_id="e-42", type="order.paid", data={"n": 1}))

    threads = [threading.Thread(target=deliver) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(j.created for j in results) == 1 and len({j.id for j in results}) == 1


def test_the_same_body_digest_under_another_id_is_the_first_event_again(app: App) -> None:
    """The store keeps one event per (source, body digest) as per (source, event id): a second id
    with a digest stored already stores nothing and gets the first event's row, even concurrently."""
    ran: list[str] = []

    @app.on_event("github", "push")
    def on_push(ctx, event) -> None:
        ran.append(event.id)

    first = app.inbox.receive("github", event_id="d-1", type="push", data={"ref": "main"}, body_digest="ab" * 32)
    assert first.duplicate_of is None and first.job is not None and first.job.created
    barrier = threading.Barrier(6)
    results = []

    def replay(n: int) -> None:
        barrier.wait()
        results.append(app.inbox.receive("github", event_id=f"d-{n}", type="push", data={"ref": "main"},
                                         body_digest="ab" * 32))

    threads = [threading.Thread(target=replay, args=(n,)) for n in range(2, 8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.duplicate_of for r in results] == ["d-1"] * 6
    assert {r.job.key for r in results if r.job} == {"github:d-1"} and not any(r.job.created for r in results if r.job)
    # Another type under a fresh id, same body: still the first event (the type header is not signed).
    assert app.inbox.receive("github", event_id="d-9", type="issues", data={"ref": "main"},
                             body_digest="ab" * 32).duplicate_of == "d-1"
    # The same id again is a plain redelivery; events without a digest never collide with each other.
    assert app.inbox.receive("github", event_id="d-1", type="push", data={"ref": "main"},
                             body_digest="ab" * 32).duplicate_of is None
    for n in (10, 11):
        assert app.inbox.receive("github", event_id=f"d-{n}", type="push", data={"ref": "main"}).duplicate_of is None
    app.work(burst=True)
    assert sorted(ran) == ["d-1", "d-10", "d-11"]
    assert sorted(e["event_id"] for e in app.inbox.list()) == ["d-1", "d-10", "d-11"]


def test_same_id_with_other_data_is_a_counted_duplicate_unless_strict_and_another_type_a_conflict(app: App) -> None:
    @app.on_event("shop")
    def h(ctx, event) -> None: ...

    app.ingest("shop", event_id="e1", type="t", data={"a": 1})
    same = app.inbox.receive("shop", event_id="e1", type="t", data={"a": 1})
    assert same.duplicate and not same.changed and same.job is not None and not same.job.created
    again = app.inbox.receive("shop", event_id="e1", type="t", data={"a": 2})
    assert again.duplicate and again.changed and again.job is not None and again.job.key == "shop:e1"
    shown = app.inbox.show("shop", "e1")
    assert shown is not None and shown["data"] == {"a": 1} and shown["changed_data"] == {"a": 2}
    assert (shown["redeliveries"], shown["changed"]) == (2, 1) and shown["changed_at"] is not None
    with pytest.raises(EventConflict, match="e1"):
        app.ingest("shop", event_id="e1", type="other", data={"a": 1})
    app.event_source("shop", strict=True)
    with pytest.raises(EventConflict, match="strict"):
        app.ingest("shop", event_id="e1", type="t", data={"a": 3})
    assert app.inbox.show("shop", "e1")["changed"] == 3  # refused deliveries are counted too
    assert app.store.job_count(JobFilter(name="h")) == 1


def test_unhandled_events_are_kept_listed_and_replayed_once_a_handler_exists(store_url: str, clock) -> None:
    before = App(store_url, clock=clock)
    assert before.ingest("crm", event_id="c1", type="contact.created", data={"email": "a@b"}) is None
    assert [e["event_id"] for e in before.inbox.list(unhandled=True)] == ["c1"]
    after = App(store_url, clock=clock)
    got = []

    @after.on_event("crm", "contact.created")
    def on_contact(ctx, event) -> None:
        got.append(event.data["email"])

    jobs = after.inbox.replay_unhandled()
    assert [j.key for j in jobs] == ["crm:c1"]
    assert after.inbox.list(unhandled=True) == []
    after.work(burst=True)
    assert got == ["a@b"]
    assert after.inbox.replay_unhandled() == []
    before.close()
    after.close()


def test_event_handlers_retry_and_dead_letter_like_any_job(app: App, clock) -> None:
    @app.on_event("git", "push", max_attempts=2)
    def on_push(ctx, event) -> None:
        raise ConnectionError("CI server down")

    app.ingest("git", event_id="d-1", type="push", data={})
    app.work(burst=True)
    clock.advance(1000)
    app.work(burst=True)
    job = app.get("git:d-1")
    assert job.state == State.DEAD and len(job.trace) == 2


@pytest.mark.parametrize("kwargs", [{"event_id": ""}, {"event_id": "x" * 201}, {"event_id": "a\nb"},
                                    {"event_id": "ok", "type": ""}, {"event_id": "ok", "data": object()}])
def test_bad_events_are_refused_and_nothing_is_stored(app: App, kwargs: dict) -> None:
    kwargs.setdefault("type", "t")
    with pytest.raises(InvalidInput):
        app.ingest("src", **kwargs)
    assert app.inbox.list() == []


def test_rejects_are_kept_with_their_reason(app: App) -> None:
    app.inbox.reject("orders", "no message id", b"\xff not json")
    [r] = app.store.inbox_reject_list(None, 10)
    assert r["source"] == "orders" and r["reason"] == "no message id" and "not json" in r["body"]


def test_ingest_many_stores_a_batch_once_including_repeats_within_it(app: App) -> None:
    @app.on_event("q", "paid")
    def paid(ctx, event) -> int:
        return event.data["n"]

    batch = [("e1", "paid", {"n": 1}), ("e2", "paid", {"n": 2}), ("e1", "paid", {"n": 1}), ("e3", "other", {})]
    jobs = app.inbox.ingest_many("q", batch)
    assert [j.key if j else None for j in jobs] == ["q:e1", "q:e2", "q:e1", None]
    again = app.inbox.ingest_many("q", batch[:2])
    assert [j.created for j in again] == [False, False]
    app.work(burst=True)
    assert app.get("q:e2").result == 2
    assert len(app.inbox.list()) == 3
    changed = app.inbox.ingest_many("q", [("e4", "paid", {"n": 4}), ("e2", "paid", {"n": 99})])
    assert [j.key for j in changed if j] == ["q:e4", "q:e2"] and not changed[1].created
    [e2] = [e for e in app.inbox.list("q") if e["event_id"] == "e2"]
    assert (e2["redeliveries"], e2["changed"]) == (2, 1)
    with pytest.raises(EventConflict):
        app.inbox.ingest_many("q", [("e5", "paid", {"n": 5}), ("e2", "other", {"n": 2})])
