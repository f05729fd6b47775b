"""Contract: a finished job's key stays reserved after its history is pruned (Retention.keys), by a
compact record that answers duplicates as the job's row did. Runs on every store."""

from __future__ import annotations

import hashlib
import json

import pytest

from firesafe import App, Retention, State
from firesafe.app import RESERVE_SETTLE
from firesafe.errors import IdempotencyConflict, InvalidInput
from firesafe.idempotency.keys import canonical_json
from firesafe.models import RESERVED_RESULT_MAX
from firesafe.store.base import JobFilter
from tests.contract.test_workers_and_leases import _trace_entries

HOUR = 3600.0


def declare(app: App):
    @app.job(max_attempts=1)
    def echo(ctx, value: object) -> object:
        return value

    @app.job(max_attempts=1)
    def boom(ctx, n: int) -> None:
        raise RuntimeError(f"boom {n}")

    return echo, boom


@pytest.fixture
def kept(store_url: str, clock):
    """An app keeping succeeded jobs an hour, dead ones two, and keys a day."""
    app = App(store_url, clock=clock, retention=Retention(succeeded=HOUR, cancelled=HOUR, dead=2 * HOUR,
                                                          keys=24 * HOUR))
    yield app
    app.close()


def _rows(app: App) -> int:
    return app.store.job_count(JobFilter())


def prune_settled(app: App, clock, age: float = HOUR) -> dict[str, int]:
    """Prune the jobs that finished before ``age`` from now in the two passes a worker's pruner
    makes: the keys' records, then (once they have settled) the rows. The second pass's counts."""
    clock.advance(age + 1)
    app.prune()
    clock.advance(RESERVE_SETTLE + 1)
    return app.prune()


def test_a_pruned_jobs_key_stays_reserved_and_answers_duplicates(kept: App, clock) -> None:
    echo, _ = declare(kept)
    first = echo.enqueue({"total": 5}, key="order-1")
    kept.work(burst=True)
    clock.advance(HOUR + 1)
    # The record is written first; the row goes once the record has settled.
    assert kept.prune()["succeeded"] == 0
    assert kept.store.reserved_get(["order-1"])["order-1"].pruned
    assert not kept.get("order-1").pruned  # the full row still answers while it exists
    clock.advance(RESERVE_SETTLE + 1)
    assert kept.prune() == {"succeeded": 1, "cancelled": 0, "dead": 0, "keys_freed": 0}
    assert _rows(kept) == 0

    job = kept.get("order-1")
    assert job.pruned and job.state == State.SUCCEEDED and job.result == {"total": 5}
    assert job.id == first.id and job.name == echo.name and job.fingerprint == first.fingerprint
    assert job.args == [] and job.trace == [] and job.finished_at is not None

    again = echo.enqueue({"total": 5}, key="order-1")  # the same call: the stored outcome, nothing runs
    assert not again.created and again.pruned and again.result == {"total": 5}
    assert _rows(kept) == 0
    with pytest.raises(IdempotencyConflict):
        echo.enqueue({"total": 6}, key="order-1")  # other arguments still conflict
    # In a batch, beside new keys: each reserved key answered from its record, the new ones created.
    jobs = echo.enqueue_many([{"args": [{"total": 5}], "key": "order-1"}, {"args": [1], "key": "order-2"}])
    assert [(j.key, j.created, j.pruned) for j in jobs] == [("order-1", False, True), ("order-2", True, False)]
    with pytest.raises(IdempotencyConflict):
        echo.enqueue_many([{"args": [2], "key": "order-3"}, {"args": [{"total": 7}], "key": "order-1"}])
    assert kept.store.job_get("order-3") is None  # the conflict undid the whole batch


def test_the_key_is_free_once_its_record_expires(kept: App, clock) -> None:
    echo, _ = declare(kept)
    echo.enqueue(1, key="k")
    kept.work(burst=True)
    prune_settled(kept, clock)
    assert kept.get("k").pruned
    clock.advance(24 * HOUR)
    assert kept.prune()["keys_freed"] == 1
    again = echo.enqueue(2, key="k")  # free: other arguments are fine, and it runs
    assert again.created and not again.pruned


def test_dead_and_cancelled_jobs_keep_their_final_state(kept: App, clock) -> None:
    echo, boom = declare(kept)
    boom.enqueue(1, key="dead-1")
    echo.enqueue(1, key="cancelled-1", delay=10 * HOUR)
    kept.work(burst=True)
    assert kept.cancel("cancelled-1") == "cancelled"
    removed = prune_settled(kept, clock, 2 * HOUR)
    assert (removed["dead"], removed["cancelled"]) == (1, 1)
    dead, cancelled = kept.get("dead-1"), kept.get("cancelled-1")
    assert (dead.state, dead.pruned, dead.result) == (State.DEAD, True, None)
    assert (cancelled.state, cancelled.pruned) == (State.CANCELLED, True)
    assert boom.enqueue(1, key="dead-1").state == State.DEAD  # a duplicate does not bring it back
    with pytest.raises(InvalidInput, match="history was pruned"):
        kept.rerun("dead-1")


def test_a_long_result_is_kept_as_its_digest(kept: App, clock) -> None:
    echo, _ = declare(kept)
    big = {"text": "x" * RESERVED_RESULT_MAX, "tricky": "\u0000 \ud7ff \U0001f600"}
    echo.enqueue(big, key="big")
    echo.enqueue("small", key="small")
    kept.work(burst=True)
    assert kept.store.job_get("big").result == big
    prune_settled(kept, clock)
    job, small = kept.get("big"), kept.get("small")
    assert job.result is None and small.result == "small" and small.result_digest is None
    # The digest is the SHA-256 of the stored result's JSON text, the same on every store.
    assert job.result_digest == hashlib.sha256(canonical_json(big, limit=None).encode()).hexdigest()
    assert echo.enqueue(big, key="big").result_digest == job.result_digest


def test_reserving_walks_every_finished_job_once_by_its_cursor(kept: App, clock) -> None:
    echo, _ = declare(kept)
    for i in range(7):
        echo.enqueue(i, key=f"j{i}")
    kept.work(burst=True)
    clock.advance(HOUR + 1)
    store, seen, after = kept.store, [], None
    while batch := store.job_reserve_finished(State.SUCCEEDED, HOUR, 24 * HOUR, after, limit=3):
        assert len(batch) <= 3
        seen += batch
        after = batch[-1][0]
    assert len(seen) == 7 and seen == sorted(seen) and len({i for _, i in seen}) == 7
    # Recorded keys are not recorded again; a job older than the keys' window gets no record.
    assert store.job_reserve_finished(State.SUCCEEDED, HOUR, 24 * HOUR) == []
    assert store.job_reserve_finished(State.SUCCEEDED, HOUR, HOUR + 0.5) == []
    # Rows wait for their records to settle, then go with their trace; the records stay.
    assert store.job_delete_reserved(State.SUCCEEDED, HOUR, RESERVE_SETTLE) == 0
    clock.advance(RESERVE_SETTLE + 1)
    assert store.job_delete_reserved(State.SUCCEEDED, HOUR, RESERVE_SETTLE, limit=5) == 5
    assert store.job_delete_reserved(State.SUCCEEDED, HOUR, RESERVE_SETTLE) == 2
    assert _rows(kept) == 0 and len(store.reserved_get([f"j{i}" for i in range(9)])) == 7
    assert _trace_entries(kept) == 0  # their trace went with them
    assert store.reserved_delete_expired(24 * HOUR) == 0
    clock.advance(24 * HOUR)
    assert store.reserved_delete_expired(24 * HOUR, limit=4) == 4
    assert store.reserved_delete_expired(24 * HOUR) == 3


def test_a_job_that_ran_again_under_its_key_is_not_deleted_by_an_old_record(kept: App, clock) -> None:
    """The row goes only with a record of the same job (key and id): a key freed and taken again
    while an old record lingered is not confused with it."""
    echo, _ = declare(kept)
    echo.enqueue(1, key="k")
    kept.work(burst=True)
    clock.advance(HOUR + 1)
    store = kept.store
    assert len(store.job_reserve_finished(State.SUCCEEDED, HOUR, 24 * HOUR)) == 1
    kept.rerun("k")  # the row is alive again: waiting, not finished
    clock.advance(RESERVE_SETTLE + 1)
    assert store.job_delete_reserved(State.SUCCEEDED, HOUR, RESERVE_SETTLE) == 0
    assert kept.get("k").state == State.QUEUED
    kept.work(burst=True)  # it finishes again, later: the old record is not this finish's
    clock.advance(RESERVE_SETTLE + 1)
    assert store.job_delete_reserved(State.SUCCEEDED, 0, RESERVE_SETTLE) == 0
    assert len(store.job_reserve_finished(State.SUCCEEDED, 0, 24 * HOUR)) == 1  # replaced by this finish's
    clock.advance(RESERVE_SETTLE + 1)
    assert store.job_delete_reserved(State.SUCCEEDED, 0, RESERVE_SETTLE) == 1
    record = kept.get("k")
    assert record.pruned and record.finished_at is not None
    assert record.finished_at.timestamp() > clock.now() - 2 * RESERVE_SETTLE - 5


def test_a_large_batch_meets_a_reserved_key(kept: App, clock) -> None:
    """A batch large enough for PostgreSQL's bulk path (keys expected new) still finds the one that is
    reserved, and answers it from its record."""
    echo, _ = declare(kept)
    echo.enqueue(0, key="bulk-0")
    kept.work(burst=True)
    assert prune_settled(kept, clock)["succeeded"] == 1
    jobs = echo.enqueue_many([{"args": [i], "key": f"bulk-{i}"} for i in range(200)])
    assert [j.created for j in jobs] == [False] + [True] * 199
    assert jobs[0].pruned and jobs[0].result == 0
    assert _rows(kept) == 199


def test_show_tells_a_pruned_job_from_a_kept_one(kept: App, clock, store_url: str) -> None:
    from click.testing import CliRunner

    from firesafe.cli.main import cli

    echo, _ = declare(kept)
    echo.enqueue("<b>done</b>", key="shown")
    echo.enqueue("x" * (RESERVED_RESULT_MAX + 1), key="long")
    kept.work(burst=True)
    prune_settled(kept, clock)
    runner = CliRunner()
    text = runner.invoke(cli, ["show", "shown", "--store", store_url], catch_exceptions=False)
    assert text.exit_code == 0, text.output
    assert "history" in text.output and "pruned" in text.output and "<b>done</b>" in text.output
    assert "no attempts yet" not in text.output  # not mistaken for a job that never ran
    data = runner.invoke(cli, ["show", "long", "--json", "--store", store_url], catch_exceptions=False)
    got = json.loads(data.output)
    assert got["pruned"] is True and got["result"] is None and len(got["result_digest"]) == 64
    assert got["state"] == "succeeded" and got["attempts"] == [] and got["events"] == []


def test_the_dashboard_shows_a_pruned_job_without_actions(kept: App, clock) -> None:
    from urllib.parse import quote

    from tests.dashboard.test_trace_page import page_of

    _, boom = declare(kept)
    boom.enqueue(1, key="gone/dead")
    kept.work(burst=True)
    assert prune_settled(kept, clock, 2 * HOUR)["dead"] == 1
    html = page_of(kept, f"/job?key={quote('gone/dead')}")
    assert 'id="job-pruned"' in html and "History pruned" in html
    assert 'id="replay-button"' not in html and 'id="discard-button"' not in html  # nothing left to replay


def test_two_prunes_at_once_record_each_key_once(store_url: str, clock) -> None:
    """Two processes prune at the same time (a worker's and `app.prune()`): every key gets one
    record, every row is deleted once, and neither fails."""
    import threading

    apps = [App(store_url, clock=clock, retention=Retention(succeeded=HOUR, keys=24 * HOUR)) for _ in range(2)]
    try:
        echo, _ = declare(apps[0])
        echo.enqueue_many([{"args": [i], "key": f"k{i}"} for i in range(2500)])
        apps[0].work(burst=True, concurrency=16)
        clock.advance(HOUR + 1)
        results: list[dict[str, int]] = []
        errors: list[BaseException] = []

        def prune(app: App) -> None:
            try:
                results.append(app.prune())
            except BaseException as exc:  # reported below
                errors.append(exc)

        for _ in range(2):  # records, then (once settled) rows
            threads = [threading.Thread(target=prune, args=(a,)) for a in apps]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            clock.advance(RESERVE_SETTLE + 1)
        assert not errors, errors
        assert sum(r["succeeded"] for r in results) == 2500 and _rows(apps[0]) == 0
        assert len(apps[0].store.reserved_get([f"k{i}" for i in range(2500)])) == 2500
    finally:
        for a in apps:
            a.close()


def test_a_paced_prune_pauses_and_a_stopped_one_ends_between_batches(store_url: str, clock) -> None:
    import threading

    class Pauses(threading.Event):
        """A stop event that notes each pause the prune takes (and does not sleep it)."""

        def __init__(self) -> None:
            super().__init__()
            self.pauses: list[float] = []

        def wait(self, timeout: float | None = None) -> bool:
            self.pauses.append(float(timeout or 0.0))
            return self.is_set()

    app = App(store_url, clock=clock, retention=Retention(succeeded=HOUR, keys=HOUR))
    try:
        echo, _ = declare(app)
        app.PRUNE_BATCH = 50
        echo.enqueue_many([{"args": [i], "key": f"p{i}"} for i in range(300)])
        app.work(burst=True, concurrency=16)
        clock.advance(HOUR + 1)
        stopped = Pauses()
        stopped.set()
        assert app.prune(pace=0.5, stop=stopped)["succeeded"] == 0  # stopped before the first batch
        paced = Pauses()
        assert app.prune(pace=0.2, stop=paced)["succeeded"] == 300
        # One pause after each of the six batches that deleted rows (none after the empty last one),
        # each four times as long as its batch took (a fifth of the time spent working).
        assert len(paced.pauses) == 6 and all(p > 0 for p in paced.pauses), paced.pauses
        flat_out = Pauses()
        assert app.prune(pace=1.0, stop=flat_out) == {"succeeded": 0, "cancelled": 0, "dead": 0,
                                                      "keys_freed": 0}
        assert flat_out.pauses == []
        with pytest.raises(InvalidInput, match="pace"):
            app.prune(pace=0)
    finally:
        app.close()


def test_one_process_prunes_at_a_time(store_url: str, clock) -> None:
    a = App(store_url, clock=clock, retention=Retention(succeeded=HOUR, keys=HOUR))
    b = App(store_url, clock=clock, retention=Retention(succeeded=HOUR, keys=HOUR))
    try:
        echo, _ = declare(a)
        echo.enqueue(1, key="one")
        a.work(burst=True)
        clock.advance(HOUR + 1)
        assert b.store.leader_acquire("pruner", "elsewhere", 60)
        assert a.prune(leader="here") == {}  # another process holds the pruner's lease
        clock.advance(61)
        assert a.prune(leader="here")["succeeded"] == 1
    finally:
        a.close()
        b.close()


def test_a_running_worker_prunes_in_the_background(store_url: str, clock) -> None:
    """A worker's pruner runs in a thread of its own, under the pruner lease, while the loop claims."""
    import threading

    from tests.processes import wait_until

    app = App(store_url, clock=clock, retention=Retention(succeeded=HOUR, keys=24 * HOUR), prune_interval=0.05)
    echo, _ = declare(app)
    echo.enqueue_many([{"args": [i], "key": f"bg{i}"} for i in range(20)])
    app.work(burst=True)
    clock.advance(HOUR + RESERVE_SETTLE + 2)
    worker = app.worker(concurrency=2, poll_interval=0.02)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        # Records first (one prune), then, once they have settled, the rows (a later one).
        wait_until(lambda: len(app.store.reserved_get([f"bg{i}" for i in range(20)])) == 20, 30, "the keys' records",
                   interval=0.02)
        clock.advance(RESERVE_SETTLE + 1)
        wait_until(lambda: _rows(app) == 0, 30, "the rows pruned", interval=0.02)
        assert _rows(app) == 0
        assert echo.enqueue(3, key="bg3").pruned  # the key still answers from its record
    finally:
        worker.stop()
        thread.join(30)
        app.close()
    assert not thread.is_alive()
