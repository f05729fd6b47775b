"""Dead-letter review by key: every key asked for is either acted on or reported as skipped, with why.

Runs on every store. A key whose job is running, succeeded, still waiting (or, for discard, already
cancelled) is left alone and listed in ``skipped`` with its state as the reason; a key with no job at
all is an error and nothing moves; a job that moves on between the read and the move is skipped with
the state it moved to.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from firesafe import App, InvalidInput, Permanent, State


def _jobs(app: App) -> dict[str, Any]:
    @app.job(max_attempts=1)
    def broken(ctx) -> None:
        raise Permanent("downstream is broken")

    @app.job
    def fine(ctx) -> str:
        return "ok"

    return {"broken": broken, "fine": fine}


@pytest.mark.parametrize("action", ["replay", "discard"])
def test_a_succeeded_job_asked_for_by_key_is_skipped_as_succeeded(app: App, action: str) -> None:
    # Given a job that succeeded
    _jobs(app)["fine"].enqueue(key="done")
    app.work(burst=True)
    act = getattr(app.dlq, action)
    # When it is replayed or discarded by key, for real or as a dry run
    for dry_run in (True, False):
        result = act(keys=["done"], dry_run=dry_run)
        # Then nothing moves, and the key is reported as skipped because it succeeded
        assert result.keys == [] and result.count == 0
        assert result.skipped == ["done"] and result.reasons == {"done": "succeeded"}
    job = app.get("done")
    assert job.state == State.SUCCEEDED and job.events == []


@pytest.mark.parametrize("action", ["replay", "discard"])
def test_a_running_job_asked_for_by_key_is_skipped_as_running(app: App, action: str) -> None:
    # Given a job that asks for its own replay (or discard) while its attempt holds the lease
    seen: list[Any] = []

    @app.job
    def busy(ctx) -> str:
        seen.append(getattr(app.dlq, action)(keys=[ctx.job.key], actor="ann@ops"))
        return "ok"

    busy.enqueue(key="busy")
    app.work(burst=True)
    # Then the running job was left alone and reported as skipped because it was running
    (result,) = seen
    assert result.keys == [] and result.skipped == ["busy"] and result.reasons == {"busy": "running"}
    job = app.get("busy")
    assert job.state == State.SUCCEEDED and job.events == []


def test_replay_and_discard_of_waiting_and_cancelled_jobs_say_which_state_kept_them(app: App) -> None:
    jobs = _jobs(app)
    jobs["fine"].enqueue(key="waiting")  # never worked: queued
    jobs["broken"].enqueue(key="d1")
    jobs["broken"].enqueue(key="d2")
    app.work(burst=True)
    jobs["fine"].enqueue(key="queued")
    app.dlq.discard(keys=["d2"])  # d2 is cancelled now
    # Discard only takes dead jobs: the cancelled and the queued one are skipped, in the order asked
    result = app.dlq.discard(keys=["queued", "d2"], dry_run=True)
    assert result.keys == [] and result.skipped == ["queued", "d2"]
    assert result.reasons == {"queued": "queued", "d2": "cancelled"}
    # Replay takes dead and cancelled jobs; the queued one is skipped
    result = app.dlq.replay(keys=["d1", "queued", "d2"], actor="ann@ops")
    assert result.keys == ["d1", "d2"] and result.skipped == ["queued"] and result.reasons == {"queued": "queued"}
    assert app.get("d1").state == app.get("d2").state == State.QUEUED


@pytest.mark.parametrize("action", ["replay", "discard"])
def test_a_dead_job_asked_for_by_key_is_still_moved_and_nothing_is_skipped(app: App, action: str) -> None:
    jobs = _jobs(app)
    jobs["broken"].enqueue(key="dead")
    jobs["fine"].enqueue(key="done")
    app.work(burst=True)
    act = getattr(app.dlq, action)
    preview = act(keys=["dead", "done"], dry_run=True)
    assert preview.keys == ["dead"] and preview.skipped == ["done"] and preview.reasons == {"done": "succeeded"}
    result = act(keys=["dead", "dead"], actor="ann@ops")  # a key given twice is acted on once
    assert result.keys == ["dead"] and result.skipped == [] and result.reasons == {}
    job = app.get("dead")
    assert job.state == (State.QUEUED if action == "replay" else State.CANCELLED)
    assert [(e.kind, e.actor) for e in job.events] == [("replayed" if action == "replay" else "discarded",
                                                        "ann@ops")]


@pytest.mark.parametrize("action", ["replay", "discard"])
def test_an_unknown_key_is_an_error_and_nothing_moves(app: App, action: str) -> None:
    jobs = _jobs(app)
    jobs["broken"].enqueue(key="dead")
    app.work(burst=True)
    with pytest.raises(InvalidInput, match=r"^no job with key\(s\): nope$"):
        getattr(app.dlq, action)(keys=["dead", "nope"])
    assert app.get("dead").state == State.DEAD and app.get("dead").events == []


@pytest.mark.parametrize("action", ["replay", "discard"])
def test_a_job_that_moves_on_before_the_move_is_skipped_with_its_new_state(app: App, monkeypatch,
                                                                         action: str) -> None:
    # Given a dead job that someone else replays (or discards) between our read and our move
    _jobs(app)["broken"].enqueue(key="dead")
    app.work(burst=True)
    name = "job_replay_many" if action == "replay" else "job_discard_many"
    real = getattr(app.store, name)

    def someone_else_first(ids: list[int], actor: str) -> list[int]:
        assert real(ids, "someone-else")
        return real(ids, actor)

    monkeypatch.setattr(app.store, name, someone_else_first)
    result = getattr(app.dlq, action)(keys=["dead"], actor="ann@ops")
    # Then our call moved nothing and says what the job had become
    assert result.keys == [] and result.skipped == ["dead"]
    assert result.reasons == {"dead": "queued" if action == "replay" else "cancelled"}


def test_a_job_deleted_before_the_move_is_skipped_as_not_found(app: App, clock, monkeypatch) -> None:
    _jobs(app)["broken"].enqueue(key="dead")
    app.work(burst=True)
    real = app.store.job_replay_many

    def purged_first(ids: list[int], actor: str) -> list[int]:
        clock.advance(10)
        assert app.dlq.purge(older_than=5) == 1
        return real(ids, actor)

    monkeypatch.setattr(app.store, "job_replay_many", purged_first)
    result = app.dlq.replay(keys=["dead"])
    assert result.keys == [] and result.skipped == ["dead"] and result.reasons == {"dead": "not found"}


def test_concurrent_replays_of_one_key_each_report_it_moved_or_skipped(app: App) -> None:
    # Given one dead job, replayed by four callers at once
    _jobs(app)["broken"].enqueue(key="o")
    app.work(burst=True)
    barrier = threading.Barrier(4)
    results: list[Any] = []

    def replay() -> None:
        barrier.wait()
        results.append(app.dlq.replay(keys=["o"]))

    threads = [threading.Thread(target=replay) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then one moved it, and every other one lists it as skipped because it was already queued
    assert sorted(r.count for r in results) == [0, 0, 0, 1]
    for r in results:
        assert (r.keys, r.skipped, r.reasons) in ((["o"], [], {}), ([], ["o"], {"o": "queued"}))
