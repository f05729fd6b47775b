"""Bulk enqueue on PostgreSQL: chunked, pipelined, FIFO, and what it returns is what it stored."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from firesafe import App, IdempotencyConflict, State
from firesafe.store.base import ClaimParams, JobFilter
from firesafe.stores.postgres import PostgresStore
from tests.postgres.conftest import Pg


@pytest.fixture
def app(pg: Pg) -> Iterator[App]:
    a = App(pg.url)  # the database's clock
    yield a
    a.close()


def declare(app: App):
    @app.job(max_attempts=4)
    def pay(ctx, order: str, amount: int = 0, *, note: str = "") -> None: ...

    return pay


def test_the_jobs_a_bulk_enqueue_returns_equal_the_stored_ones(app: App) -> None:
    pay = declare(app)
    pay.enqueue("o-old", key="old")  # already stored: returned as it is, not created
    store = app.store
    assert isinstance(store, PostgresStore)
    n = store.INSERT_CHUNK * 2 + 7  # several chunks in one pipeline
    later = datetime.now(UTC) + timedelta(hours=1)
    items: list[dict] = [{"args": [f"o-{i}", i], "key": f"k{i}"} for i in range(n)]
    items[3] = {"args": ["o-3"], "kwargs": {"note": "kw"}, "key": "k3", "queue": "vip"}
    items[5] = {"args": ["o-5"], "key": "k5", "delay": 30}
    items[8] = {"args": ["o-8"], "key": "k8", "run_at": later}
    items[9] = {"args": [{"sku": ["a", 1.5]}, 2], "key": "k9"}  # nested: decoded, not the plain path
    items.append({"args": ["o-old"], "key": "old"})
    items.append(dict(items[0]))  # the same key twice in one batch: one job
    jobs = pay.enqueue_many(items)
    assert len(jobs) == len(items)
    assert [j.created for j in jobs[-2:]] == [False, False] and jobs[0].created  # the first item created it
    assert jobs[-1].id == jobs[0].id
    for job in jobs:
        stored = store.job_get(job.key)
        assert stored is not None
        assert (job.id, job.fingerprint) == (stored.id, stored.fingerprint)
        assert job.as_dict(with_trace=False) == stored.as_dict(with_trace=False), job.key
    by_key = {j.key: j for j in jobs}
    assert by_key["k3"].queue == "vip" and by_key["k3"].kwargs == {"note": "kw"}
    assert by_key["k5"].state == State.SCHEDULED and by_key["k8"].state == State.SCHEDULED
    assert by_key["k8"].run_at is not None and abs((by_key["k8"].run_at - later).total_seconds()) < 1e-3
    assert by_key["k0"].state == State.QUEUED and by_key["k9"].args == [{"sku": ["a", 1.5]}, 2]
    assert store.job_count(JobFilter()) == n + 1


def test_a_batch_runs_in_enqueue_order_whatever_its_keys(app: App) -> None:
    pay = declare(app)
    keys = [f"key-{i:05d}" for i in range(2500)]
    random.Random(7).shuffle(keys)  # key order is not enqueue order
    jobs = pay.enqueue_many([{"args": [k], "key": k} for k in keys])
    ids = [j.id for j in jobs]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    first = app.store.job_claim(ClaimParams(("default",), 5, "w", 30.0))  # what a worker takes first
    assert [c.job.key for c in first] == keys[:5]


def test_a_conflict_anywhere_in_a_large_batch_stores_nothing_of_it(app: App) -> None:
    pay = declare(app)
    pay.enqueue("o-1", key="k1500")
    items = [{"args": [f"o-{i}"], "key": f"k{i}"} for i in range(3000)]  # k1500 has other arguments
    with pytest.raises(IdempotencyConflict, match="k1500"):
        pay.enqueue_many(items)
    assert app.store.job_count(JobFilter()) == 1


@pytest.mark.parametrize("n", [PostgresStore.FRESH_MIN, PostgresStore.INSERT_CHUNK + 1])  # one chunk, two
def test_new_keys_take_the_plain_insert_and_a_taken_key_the_general_one(app: App, monkeypatch, n: int) -> None:
    pay = declare(app)
    store = app.store
    assert isinstance(store, PostgresStore)
    sent: list[str] = []
    real = store._insert_pipelined
    monkeypatch.setattr(store, "_insert_pipelined", lambda c, query, *a: (sent.append(query), real(c, query, *a)))
    assert all(j.created for j in pay.enqueue_many([{"args": [f"o-{i}"], "key": f"a{i}"} for i in range(n)]))
    assert sent == ["job_insert_new"]
    sent.clear()
    again = pay.enqueue_many([{"args": [f"o-{i}"], "key": f"{p}{i}"} for i in range(n) for p in "ab"])
    assert "ON CONFLICT" not in store.q["job_insert_new"] and "ON CONFLICT" in store.q["job_insert"]
    assert sent == ["job_insert_new", "job_insert"]  # a0 is taken: undone, then inserted again
    assert [j.created for j in again[:2]] == [False, True] and again[0].id < again[1].id
    assert store.job_count(JobFilter()) == 2 * n


@pytest.mark.parametrize("batch", [1, 3])
def test_awkward_text_survives_the_array_literals(app: App, batch: int) -> None:
    pay = declare(app)
    awkward = ['q"uote', "back\\slash", "{br,ace}", "NULL", "ünï cødé ✓", "new\nline", "tab\tand 'single'", " "]
    printable = {"\n": "<nl>", "\t": "<tab>"}  # keys must be printable; arguments may hold anything
    items = [{"args": [text, i], "kwargs": {"note": text[::-1]},
              "key": "".join(printable.get(ch, ch) for ch in f"{text}:{i}")} for i, text in enumerate(awkward)]
    for lo in range(0, len(items), batch):
        pay.enqueue_many(items[lo:lo + batch])
    for it in items:
        job = app.get(it["key"])
        assert job.args == it["args"] and job.kwargs == it["kwargs"]
