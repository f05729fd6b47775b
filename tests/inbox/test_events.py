"""The inbox's guarantees at the edges, on both stores: every accepted event gets a valid job key of
its own, nothing is stored as handled without its job, and a redelivery is a no-op however late."""

from __future__ import annotations

import pytest

from firesafe import App, ConfigError, FakeClock, InvalidInput, State
from firesafe.errors import StoreError
from firesafe.inbox.events import MAX_DEPTH, event_key
from firesafe.store.base import JobFilter


def jobs(app: App) -> int:
    return app.store.job_count(JobFilter())


def nested(depth: int) -> list:
    data: list = []
    for _ in range(depth - 1):
        data = [data]
    return data


def test_a_key_past_255_characters_is_shortened_and_the_event_runs_once(app: App) -> None:
    source, ran = "s" * 60, []

    @app.on_event(source)
    def on_any(ctx, event) -> None:
        ran.append(event.id)

    first = app.ingest(source, event_id="x" * 200, type="t", data={})
    again = app.ingest(source, event_id="x" * 200, type="t", data={})
    other = app.ingest(source, event_id="x" * 199 + "y", type="t", data={})  # the same first 190 characters
    assert first.created and not again.created and other.created
    assert len(first.key) == 255 and first.key == again.key == event_key(source, "x" * 200) != other.key
    assert first.key[:190] == f"{source}:{'x' * 200}"[:190] and first.key[190] == "#"
    app.work(burst=True)
    assert sorted(ran) == sorted(["x" * 200, "x" * 199 + "y"])
    assert app.get(first.key).state == State.SUCCEEDED
    assert [e["handled"] for e in app.inbox.list()] == [True, True]


def test_an_id_shaped_like_a_shortened_key_cannot_take_that_key(app: App) -> None:
    source, ran = "s" * 60, []

    @app.on_event(source)
    def on_any(ctx, event) -> None:
        ran.append(event.id)

    taken = event_key(source, "x" * 200)  # 190 characters, "#", 64 hex digits
    mimic = taken[len(source) + 1:]  # an id of 194 characters: source + ":" + mimic is that very key
    assert f"{source}:{mimic}" == taken
    first = app.ingest(source, event_id=mimic, type="t", data={})  # the mimic comes first
    real = app.ingest(source, event_id="x" * 200, type="t", data={})
    assert first.created and real.created and first.key != taken == real.key
    app.work(burst=True)
    assert sorted(ran) == sorted([mimic, "x" * 200])


def test_sources_with_a_colon_do_not_share_keys_with_other_sources(app: App) -> None:
    ran = []

    @app.on_event("a")
    def on_a(ctx, event) -> None:
        ran.append(("a", event.id))

    @app.on_event("a:b")
    def on_ab(ctx, event) -> None:
        ran.append(("a:b", event.id))

    one = app.ingest("a", event_id="b:c", type="t", data={})
    two = app.ingest("a:b", event_id="c", type="t", data={})
    assert one.created and two.created
    assert one.key == "a:b:c" and two.key == "a%3Ab:c"  # plain sources keep their keys
    app.work(burst=True)
    assert sorted(ran) == [("a", "b:c"), ("a:b", "c")]
    assert event_key("x%3Ay", "1") != event_key("x:y", "1")  # '%' cannot appear in a source; escaped anyway


def test_a_redelivery_after_the_job_was_pruned_runs_nothing(store_url: str) -> None:
    clock = FakeClock()
    app = App(store_url, clock=clock)
    ran = []

    @app.on_event("stripe", "charge.refunded")
    def on_refund(ctx, event) -> None:
        ran.append(event.id)

    app.ingest("stripe", event_id="evt_1", type="charge.refunded", data={"amount": 5})
    app.inbox.ingest_many("stripe", [("evt_2", "charge.refunded", {"amount": 6})])
    app.work(burst=True)
    clock.advance(app.retention.keys + 60)
    assert app.prune()["succeeded"] == 2 and jobs(app) == 0
    assert app.ingest("stripe", event_id="evt_1", type="charge.refunded", data={"amount": 5}) is None
    assert app.inbox.ingest_many("stripe", [("evt_2", "charge.refunded", {"amount": 6}),
                                            ("evt_1", "charge.refunded", {"amount": 5})]) == [None, None]
    assert jobs(app) == 0
    app.work(burst=True)
    assert sorted(ran) == ["evt_1", "evt_2"]
    assert [(e["event_id"], e["handled"]) for e in app.inbox.list()] == [("evt_1", True), ("evt_2", True)]
    app.close()


def test_a_redelivery_before_pruning_returns_the_stored_job(app: App) -> None:
    @app.on_event("q", "paid")
    def paid(ctx, event) -> int:
        return event.data["n"]

    first = app.inbox.ingest_many("q", [("e1", "paid", {"n": 1}), ("e2", "other", {})])
    app.work(burst=True)
    single = app.ingest("q", event_id="e1", type="paid", data={"n": 1})
    [batch, none] = app.inbox.ingest_many("q", [("e1", "paid", {"n": 1}), ("e2", "other", {})])
    assert first[0].created and not single.created and not batch.created and none is None
    assert single.key == batch.key == "q:e1" and single.state == State.SUCCEEDED and single.result == 1


def test_an_event_stored_before_a_crash_gets_its_job_from_the_redelivery(app: App, monkeypatch) -> None:
    ran = []

    @app.on_event("git", "push")
    def on_push(ctx, event) -> None:
        ran.append(event.id)

    real = on_push.enqueue
    monkeypatch.setattr(on_push, "enqueue", lambda *a, **k: (_ for _ in ()).throw(StoreError("crash")))
    with pytest.raises(StoreError):
        app.ingest("git", event_id="d-1", type="push", data={})
    assert [e["handled"] for e in app.inbox.list()] == [False]  # stored, no job: not marked handled
    monkeypatch.setattr(on_push, "enqueue", real)
    job = app.ingest("git", event_id="d-1", type="push", data={})
    assert job is not None and job.created
    app.work(burst=True)
    assert ran == ["d-1"] and [e["handled"] for e in app.inbox.list()] == [True]


@pytest.mark.parametrize("bad", ["a\x00b", "a\nb", "\ud800", ""])
def test_a_type_that_is_not_printable_is_refused_before_anything_is_stored(app: App, bad: str) -> None:
    @app.on_event("shop")
    def any_event(ctx, event) -> None: ...

    with pytest.raises(InvalidInput, match="event type"):
        app.ingest("shop", event_id="e1", type=bad, data={})
    with pytest.raises(InvalidInput, match="event type"):
        app.inbox.ingest_many("shop", [("e2", "ok", {}), ("e3", bad, {})])
    assert app.inbox.list() == [] and jobs(app) == 0


def test_a_handler_for_an_unprintable_type_is_refused_at_declaration(app: App) -> None:
    with pytest.raises(ConfigError, match="printable"):
        app.on_event("shop", "a\x00b")


def test_an_event_whose_job_would_not_fit_is_refused_before_it_is_stored(app: App) -> None:
    @app.on_event("s")
    def on_any(ctx, event) -> None: ...

    wide = "\U0001f600" * 200  # 200 characters, 800 bytes of UTF-8: the id and the type
    room = app.max_payload - 1024 - len('{"p":""}')
    with pytest.raises(InvalidInput, match="bytes"):
        app.ingest("s", event_id=wide, type=wide, data={"p": "a" * room})
    assert app.inbox.list() == [] and jobs(app) == 0
    job = app.ingest("s", event_id=wide, type=wide, data={"p": "a" * (room - 3000)})
    assert job.created and app.work(burst=True).succeeded == 1


def test_data_nested_near_the_encoders_limit_is_refused_whole_or_gets_its_job(app: App) -> None:
    @app.on_event("s")
    def on_any(ctx, event) -> None: ...

    for depth in range(850, 1000):
        try:
            job = app.ingest("s", event_id=f"d{depth}", type="t", data=nested(depth))
        except InvalidInput:
            assert app.inbox.list() == [], depth  # refused: nothing stored
        else:
            assert job is not None and job.created, depth
    with pytest.raises(InvalidInput, match=f"more than {MAX_DEPTH} levels"):
        app.ingest("s", event_id="deep", type="t", data=nested(MAX_DEPTH + 1))
    assert app.ingest("s", event_id="ok", type="t", data=nested(MAX_DEPTH)).created


def test_rejects_keep_any_text(app: App) -> None:
    app.inbox.reject("orders", "bad \x00 reason \ud800", "body \x00 \udcff")
    [r] = app.store.inbox_reject_list(None, 10)
    assert r["reason"] == "bad \\x00 reason \\ud800" and r["body"] == "body \\x00 \\udcff"
