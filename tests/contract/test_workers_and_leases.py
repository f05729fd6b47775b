"""Contract: leases, fencing, rescue, cancel, prune, stats. Runs on every store."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from firesafe import App, Retention, State
from firesafe.states import Outcome
from firesafe.store.base import ClaimParams, FinishParams, JobFilter


def declare(app: App):
    @app.job(max_attempts=3)
    def work(ctx, n: int) -> int:
        return n

    return work


def test_claim_takes_a_lease_and_a_stale_token_changes_nothing(app: App, clock) -> None:
    work = declare(app)
    work.enqueue(1, key="k")
    store = app.store
    [first] = store.job_claim(ClaimParams(("default",), 10, "w1", 30.0))
    assert first.job.state == State.RUNNING and first.job.attempt == 1
    assert store.job_claim(ClaimParams(("default",), 10, "w2", 30.0)) == []  # leased: nobody else gets it
    clock.advance(31)
    [expired] = store.job_list_expired(10)
    assert expired.token == first.token
    from firesafe.store.base import RescueParams

    assert store.job_rescue_many([RescueParams(expired.id, expired.token, expired.runs, State.SCHEDULED, 0.0,
                                               None, "lost")]) == [True]
    [second] = store.job_claim(ClaimParams(("default",), 10, "w2", 30.0, suspects=True))  # it was lost once
    assert second.token != first.token and second.job.runs == 2
    late = FinishParams(first.job.id, first.token, first.job.runs, State.SUCCEEDED, Outcome.SUCCEEDED,
                        result='"stale"')
    assert store.job_finish_many([late]) == [False]  # fenced: the stale worker changes nothing
    ok = FinishParams(second.job.id, second.token, second.job.runs, State.SUCCEEDED, Outcome.SUCCEEDED,
                      result='"fresh"')
    assert store.job_finish_many([ok]) == [True]
    assert store.job_finish_many([ok]) == [False]  # a second completion of the same attempt is void
    job = app.get("k")
    assert job.result == "fresh" and [a.outcome for a in job.trace] == ["lost", "succeeded"]


def test_heartbeat_extends_only_leases_still_held(app: App, clock) -> None:
    work = declare(app)
    work.enqueue(1, key="k")
    store = app.store
    [c] = store.job_claim(ClaimParams(("default",), 1, "w", 30.0))
    clock.advance(20)
    assert store.job_heartbeat_many([(c.job.id, c.token)], 30.0) == {c.job.id: False}
    clock.advance(20)  # 40 s after the claim, 20 after the beat: still held
    assert store.job_list_expired(10) == []
    assert store.job_heartbeat_many([(c.job.id, "not-the-token")], 30.0) == {}


def test_a_killed_worker_job_is_rescued_as_lost_and_retried(app: App, clock) -> None:
    work = declare(app)
    work.enqueue(7, key="k")
    app.store.job_claim(ClaimParams(("default",), 1, "dead-worker", 30.0))  # then the worker "dies"
    assert app.work(burst=True).claimed == 0  # still leased
    clock.advance(31)
    stats = app.work(burst=True)
    assert stats.rescued == 1
    assert app.get("k").state == State.SCHEDULED  # retried after a backoff, like any failure
    clock.advance(1000)
    app.work(burst=True)
    job = app.get("k")
    assert job.state == State.SUCCEEDED and job.lost == 1
    assert (job.trace[0].outcome, job.trace[0].worker) == ("lost", "dead-worker")


def test_a_worker_process_known_gone_has_its_leases_ended_now_and_only_its_own(app: App, clock) -> None:
    work = declare(app)
    work.enqueue_many([{"args": [i], "key": f"k{i}"} for i in range(5)])
    store = app.store
    # Two loops of the process, then an earlier process with the same pid, another pid, another host
    for worker in ("h:12:t1.0.a1", "h:12:t1.1.b2", "h:12:t0.0.c3", "h:123:t1.0.d4", "other:12:t1.0.e5"):
        store.worker_beat(worker, worker.split(":")[0], int(worker.split(":")[1]), ("default",))
        store.job_claim(ClaimParams(("default",), 1, worker, 30.0))
    leaders = (("isolator:default", "h:12:t1.0.a1"), ("scheduler", "h:12:t1.1.b2"), ("pruner", "h:123:t1.0.d4"))
    for name, holder in leaders:
        assert store.leader_acquire(name, holder, 60.0)
    clock.advance(1)

    # The process is gone: both of its attempts can be rescued now, 29 s before their leases end
    how = {"process": 2, "pid": 12, "exit": "signal 9 (SIGKILL)"}
    assert store.worker_process_gone("h:12:t1.", how) == 2
    clock.advance(0.5)
    expired = store.job_list_expired(10)
    jobs = store.job_list(JobFilter(limit=10))
    worker_of = {j.id: j.worker for j in jobs}
    assert sorted(worker_of[e.id] for e in expired) == ["h:12:t1.0.a1", "h:12:t1.1.b2"]
    # each of the two says why in its events, the others have none
    events = {j.worker: [(e.kind, e.actor, e.detail) for e in app.get(j.key).events] for j in jobs if j.worker}
    assert events == {"h:12:t1.0.a1": [("lease_ended", "supervisor", how)],
                      "h:12:t1.1.b2": [("lease_ended", "supervisor", how)],
                      "h:12:t0.0.c3": [], "h:123:t1.0.d4": [], "other:12:t1.0.e5": []}
    # Its workers are forgotten; the others keep theirs
    assert {w["id"] for w in store.worker_list()} == {"h:12:t0.0.c3", "h:123:t1.0.d4", "other:12:t1.0.e5"}
    assert store.job_list_expired(10) == expired
    # and its leader leases are free for others; the one another process holds is not
    assert store.leader_acquire("isolator:default", "h:12:t0.0.c3", 60.0)
    assert store.leader_acquire("scheduler", "h:12:t0.0.c3", 60.0)
    assert not store.leader_acquire("pruner", "h:12:t0.0.c3", 60.0)

    # Once rescued, a second call finds nothing of it; a lease already over is left as it is
    app.worker(burst=True, concurrency=1)._rescue()
    rescued = [j for j in store.job_list(JobFilter(limit=10)) if j.id in worker_of and j.id in {e.id for e in expired}]
    assert [(j.state, j.lost) for j in rescued] == [(State.SCHEDULED, 1)] * 2
    assert store.job_list_expired(10) == []
    assert store.worker_process_gone("h:12:t1.") == 0
    clock.advance(31)
    before = store.job_list_expired(10)
    assert len(before) == 3 and store.worker_process_gone("h:123:t1.") == 0
    assert store.job_list_expired(10) == before
    # A prefix that does not name one process is refused (an empty one would name every worker)
    for bad in ("", "h:", "h:12:", "h:12:t1", ":12:t1.", "h:x:t1."):
        with pytest.raises(ValueError, match="not the id prefix of one worker process"):
            store.worker_process_gone(bad)


def test_a_job_that_keeps_killing_its_worker_goes_dead_as_worker_lost(app: App, clock) -> None:
    work = declare(app)
    work.enqueue(7, key="k")
    store = app.store
    for n in range(3):
        assert store.job_pending(("default",)).suspects == (1 if n else 0)
        [c] = store.job_claim(ClaimParams(("default",), 1, "victim", 30.0, suspects=n > 0))
        assert c.job.key == "k"
        clock.advance(31)
        app.worker(burst=True, batch=1, concurrency=1)._rescue()
        clock.advance(1000)  # past any backoff
    job = app.get("k")
    assert job.state == State.DEAD and job.reason == "worker_lost" and job.lost == 3
    other = [work.enqueue(i, key=f"o{i}") for i in range(3)]
    app.work(burst=True)
    assert all(app.get(o.key).state == State.SUCCEEDED for o in other)


def test_cancel_waiting_at_once_and_running_on_request(app: App) -> None:
    started, stop_seen = threading.Event(), threading.Event()

    @app.job
    def long(ctx) -> str:
        started.set()
        for _ in range(500):
            if ctx.cancelled:
                stop_seen.set()
                raise RuntimeError("stopping as asked")
            threading.Event().wait(0.01)
        return "finished"

    long.enqueue(key="waiting", delay=60)
    assert app.cancel("waiting", actor="ops") == "cancelled"
    assert app.get("waiting").state == State.CANCELLED
    long.enqueue(key="running")
    w = app.worker(concurrency=1, burst=True, lease=0.3)
    t = threading.Thread(target=w.run)
    t.start()
    assert started.wait(5)
    assert app.cancel("running", actor="ops") == "requested"
    t.join(10)
    job = app.get("running")
    assert stop_seen.is_set()
    assert job.state == State.CANCELLED and job.trace[-1].outcome == "cancelled"
    assert [e.kind for e in job.events] == ["cancel_requested"]
    assert app.cancel("running") == "finished"


def test_prune_frees_keys_after_retention(store_url: str, clock) -> None:
    # Keys kept no longer than the history: pruning a job frees its key at once (no record).
    app = App(store_url, clock=clock, retention=Retention(succeeded=60, cancelled=60, dead=600, keys=60))
    work = declare(app)
    work.enqueue(1, key="done")
    work.enqueue(3, key="young")
    app.work(burst=True)
    assert app.prune() == {"succeeded": 0, "cancelled": 0, "dead": 0, "keys_freed": 0}
    clock.advance(30)
    work.enqueue(4, key="younger")
    app.work(burst=True)
    assert _trace_entries(app) == 3
    clock.advance(31)
    assert app.prune()["succeeded"] == 2
    # Their trace entries went with them (on PostgreSQL no declared reference cascades to them), and
    # only theirs: the younger job keeps its entry.
    assert _trace_entries(app) == 1 and len(app.get("younger").trace) == 1
    again = work.enqueue(2, key="done")  # the key is free: other arguments are fine now
    assert again.created
    app.close()


def test_stats_and_listing(app: App) -> None:
    work = declare(app)

    @app.job(queue="payments")
    def pay(ctx) -> None: ...

    for i in range(3):
        work.enqueue(i, key=f"w{i}")
    pay.enqueue(key="p")
    stats = {(q, s): n for q, s, n in app.store.job_stats()}
    assert stats == {("default", "queued"): 3, ("payments", "queued"): 1}
    app.work(["payments"], burst=True)
    assert app.get("p").state == State.SUCCEEDED and app.get("w0").state == State.QUEUED
    assert [j.key for j in app.jobs_list(state="queued", limit=2)] == ["w2", "w1"]
    assert app.store.job_count(JobFilter(queue="payments", state="succeeded")) == 1


def test_leader_lease_has_one_holder_until_it_expires(app: App, clock) -> None:
    store = app.store
    assert store.leader_acquire("scheduler", "a", 10)
    assert not store.leader_acquire("scheduler", "b", 10)
    assert store.leader_acquire("scheduler", "a", 10)  # renew
    clock.advance(11)
    assert store.leader_acquire("scheduler", "b", 10)
    assert not store.leader_acquire("scheduler", "a", 10)


def test_suspects_are_claimed_only_when_asked_for(app: App, clock) -> None:
    work = declare(app)
    work.enqueue(1, key="suspect")
    store = app.store
    assert len(store.job_claim(ClaimParams(("default",), 1, "w", 30.0))) == 1
    clock.advance(31)
    app.worker(burst=True)._rescue()  # lost once: now a suspect of killing its worker
    clock.advance(1000)
    work.enqueue(2, key="clean")
    assert [x.job.key for x in store.job_claim(ClaimParams(("default",), 10, "w", 30.0))] == ["clean"]
    assert [x.job.key for x in store.job_claim(ClaimParams(("default",), 10, "w", 30.0, suspects=True))] == [
        "suspect"]


def test_a_running_attempt_is_in_the_trace_until_its_entry_is_written_at_the_end(app: App, clock) -> None:
    """An attempt's entry is written once, when it ends; while it runs the trace shows it from the job."""
    work = declare(app)
    work.enqueue(1, key="k")
    store = app.store
    t0 = clock.now()
    [c] = store.job_claim(ClaimParams(("default",), 1, "w1", 30.0))
    clock.advance(5)
    [running] = app.get("k").trace
    assert (running.seq, running.attempt, running.worker, running.outcome, running.ended_at) == (
        1, 1, "w1", None, None)
    assert running.started_at.timestamp() == t0
    assert ("work", "running", 1) in store.attempt_counts()
    # A deferral gives the attempt back (the job's count drops to 0); its entry keeps attempt 1.
    assert store.job_finish_many([FinishParams(c.job.id, c.token, c.job.runs, State.SCHEDULED, Outcome.DEFERRED,
                                               delay=0.0, given_back=1, error_type="Busy")]) == [True]
    [deferred] = app.get("k").trace
    assert (deferred.seq, deferred.attempt, deferred.worker, deferred.outcome, deferred.error_type) == (
        1, 1, "w1", "deferred", "Busy")
    assert (deferred.started_at.timestamp(), deferred.ended_at.timestamp()) == (t0, t0 + 5)
    assert ("work", "running", 1) not in store.attempt_counts()
    clock.advance(1)
    [again] = store.job_claim(ClaimParams(("default",), 1, "w2", 30.0))
    assert (again.job.attempt, again.job.runs) == (1, 2)
    clock.advance(2)
    store.job_finish_many([FinishParams(again.job.id, again.token, 2, State.SUCCEEDED, Outcome.SUCCEEDED,
                                        result="1")])
    trace = app.get("k").trace
    assert [(a.seq, a.attempt, a.worker, a.outcome) for a in trace] == [
        (1, 1, "w1", "deferred"), (2, 1, "w2", "succeeded")]
    assert (trace[1].started_at.timestamp(), trace[1].ended_at.timestamp()) == (t0 + 6, t0 + 8)
    assert sorted(store.attempt_counts()) == [("work", "deferred", 1), ("work", "succeeded", 1)]


def _trace_entries(app: App) -> int:
    """Every row of the trace table, whether or not its job still exists."""
    store: Any = app.store
    if store.dialect == "sqlite":
        with store._tx() as c:
            return c.execute("SELECT count(*) FROM firesafe_attempts").fetchone()[0]
    with store._conn() as c:
        return c.execute(f"SELECT count(*) AS n FROM {store.schema}.firesafe_attempts").fetchone()["n"]


def _open_entry_as_before(app: App, job_id: int, seq: int, worker: str, at: float) -> None:
    """What a claim by a firesafe before schema version 9 wrote: an open trace entry."""
    sql = ("INSERT INTO firesafe_attempts (job_id, seq, attempt, worker, started_at) "
           "VALUES ({p}, {p}, 1, {p}, {p})")
    store: Any = app.store
    if store.dialect == "sqlite":
        with store._tx() as c:
            c.execute(sql.format(p="?"), (job_id, seq, worker, at))
    else:
        with store._conn() as c:
            c.execute(sql.replace("firesafe_attempts", f"{store.schema}.firesafe_attempts").format(p="%s"),
                      (job_id, seq, worker, at))


def test_entries_an_earlier_firesafe_opened_at_the_claim_are_completed_not_doubled(app: App, clock) -> None:
    work = declare(app)
    work.enqueue(1, key="finished")
    work.enqueue(2, key="lost")
    store = app.store
    t0 = clock.now()
    claimed = {c.job.key: c for c in store.job_claim(ClaimParams(("default",), 2, "w1", 30.0))}
    for c in claimed.values():
        _open_entry_as_before(app, c.job.id, c.job.runs, "older-worker", t0 - 1)
    [shown] = app.get("finished").trace  # the open entry, not a second one from the job's row
    assert (shown.worker, shown.outcome, shown.started_at.timestamp()) == ("older-worker", None, t0 - 1)
    assert store.attempt_counts() == [("work", "running", 2)]
    c = claimed["finished"]
    assert store.job_finish_many([FinishParams(c.job.id, c.token, c.job.runs, State.SUCCEEDED,
                                               Outcome.SUCCEEDED, result="1")]) == [True]
    [done] = app.get("finished").trace
    assert (done.worker, done.outcome, done.started_at.timestamp()) == ("older-worker", "succeeded", t0 - 1)
    clock.advance(31)
    from firesafe.store.base import RescueParams

    [expired] = store.job_list_expired(10)
    assert store.job_rescue_many([RescueParams(expired.id, expired.token, expired.runs, State.SCHEDULED, 0.0,
                                               None, "lost")]) == [True]
    [lost] = app.get("lost").trace
    assert (lost.worker, lost.outcome, lost.error_type) == ("older-worker", "lost", "WorkerLost")
    assert sorted(store.attempt_counts()) == [("work", "lost", 1), ("work", "succeeded", 1)]


def test_a_batch_naming_one_attempt_twice_applies_it_once(app: App, clock) -> None:
    work = declare(app)
    work.enqueue(1, key="finished")
    work.enqueue(2, key="lost")
    store = app.store
    claimed = {c.job.key: c for c in store.job_claim(ClaimParams(("default",), 2, "w", 30.0))}
    c = claimed["finished"]
    done = FinishParams(c.job.id, c.token, c.job.runs, State.SUCCEEDED, Outcome.SUCCEEDED, result="1")
    assert store.job_finish_many([done, done]) == [True, False]
    assert [a.outcome for a in app.get("finished").trace] == ["succeeded"]
    clock.advance(31)
    from firesafe.store.base import RescueParams

    [e] = store.job_list_expired(10)
    lost = RescueParams(e.id, e.token, e.runs, State.SCHEDULED, 0.0, None, "lost")
    assert store.job_rescue_many([lost, lost]) == [True, False]
    assert [a.outcome for a in app.get("lost").trace] == ["lost"]
    clock.advance(1)
    [again] = store.job_claim(ClaimParams(("default",), 1, "w", 30.0, suspects=True))
    twice = FinishParams(again.job.id, again.token, again.job.runs, State.SUCCEEDED, Outcome.SUCCEEDED, result="2")
    applied, _ = store.job_finish_and_claim([twice, twice], ClaimParams(("default",), 1, "w", 30.0))
    assert applied == [True, False]
    assert [a.outcome for a in app.get("lost").trace] == ["lost", "succeeded"]


def _leases(app: App) -> dict[str, tuple[str, str | None]]:
    """Every job's ``key: (state, lease_token)``, read from its row."""
    store: Any = app.store
    if store.dialect == "sqlite":
        with store._tx() as c:
            rows = c.execute("SELECT key, state, lease_token FROM firesafe_jobs").fetchall()
        return {r[0]: (r[1], r[2]) for r in rows}
    with store._conn() as c:
        rows = c.execute(f"SELECT key, state, lease_token FROM {store.schema}.firesafe_jobs").fetchall()
    return {r["key"]: (r["state"], r["lease_token"]) for r in rows}


def _held_exactly_while_running(app: App) -> dict[str, tuple[str, str | None]]:
    rows = _leases(app)
    wrong = {k: v for k, v in rows.items() if (v[0] == State.RUNNING) != (v[1] is not None)}
    assert wrong == {}, "a job holds a lease token exactly while it runs"
    return rows


def test_a_job_holds_a_lease_token_exactly_while_it_runs(app: App, clock) -> None:
    """Every move into 'running' sets a token and every move out clears it: finishes of each kind,
    deferrals, limiter waits, rescues, cancels, replays and reruns. (PostgreSQL's statements that
    reach running jobs by id rely on it: see the header of postgres.sql.)"""
    from firesafe import Backoff, Permanent, RetryAfter
    from firesafe.store.base import RescueParams

    app.limiter("one", rate=1, burst=1)
    tries: dict[str, int] = {}

    @app.job(max_attempts=3, backoff=Backoff(base=1.0, jitter="none"))  # the hand claim's loss uses one
    def mixed(ctx, what: str) -> str:
        tries[ctx.job.key] = tries.get(ctx.job.key, 0) + 1
        if what == "flaky" and tries[ctx.job.key] == 1:
            raise ConnectionError("down once")
        if what == "doomed":
            raise Permanent("never")
        if what == "later" and tries[ctx.job.key] == 1:
            raise RetryAfter(5)
        return what

    @app.job(limiter="one", max_deferrals=5)
    def limited(ctx, n: int) -> int:
        return n

    for what in ("ok", "flaky", "doomed", "later", "lost", "cancel-me"):
        mixed.enqueue(what, key=what)
    mixed.enqueue("waits", key="waits", delay=60)
    limited.enqueue_many([{"args": [i], "key": f"lim{i}"} for i in range(3)])
    assert all(t is None for _, t in _held_exactly_while_running(app).values())

    store = app.store
    [lost] = [c for c in store.job_claim(ClaimParams(("default",), 10, "w", 30.0)) if c.job.key == "lost"] or [None]
    assert lost is not None  # the others this claim took are given back as interrupted below
    rows = _held_exactly_while_running(app)
    running = [k for k, (s, _) in rows.items() if s == State.RUNNING]
    assert "lost" in running and len(running) > 1
    others = [c for c in store.job_claim(ClaimParams(("default",), 10, "w2", 30.0))]  # nothing left to take
    assert others == []
    store.job_heartbeat_many([(lost.job.id, lost.token)], 30.0)
    _held_exactly_while_running(app)
    assert app.cancel("cancel-me", actor="ops") == "requested"  # running: asked, not moved
    _held_exactly_while_running(app)

    clock.advance(31)  # every lease of that claim runs out: rescued as lost
    expired = store.job_list_expired(100)
    assert store.job_rescue_many([  # as the worker's rescue does: a cancel asked for ends it cancelled
        RescueParams(e.id, e.token, e.runs, State.CANCELLED if e.cancel_requested else State.SCHEDULED,
                     None if e.cancel_requested else 0.0, "cancelled" if e.cancel_requested else None, "lost")
        for e in expired]) == [True] * len(expired)
    _held_exactly_while_running(app)
    assert app.cancel("waits", actor="ops") == "cancelled"  # waiting: moved at once

    for _ in range(12):  # retries, the deferral, the limiter's waits, the cancel, the dead letter
        clock.advance(6)
        app.work(burst=True)
        _held_exactly_while_running(app)
    final = _held_exactly_while_running(app)
    assert final["doomed"][0] == State.DEAD and final["waits"][0] == State.CANCELLED
    assert final["cancel-me"][0] == State.CANCELLED
    assert all(final[k][0] == State.SUCCEEDED for k in ("ok", "flaky", "later", "lost", "lim0", "lim1", "lim2")), final
    assert any(a.outcome == "deferred" and (a.detail or {}).get("why") == "rate"
               for k in ("lim1", "lim2") for a in app.get(k).trace), "a limiter wait took place"

    assert app.dlq.replay(keys=["doomed"], actor="ops").keys == ["doomed"]
    app.rerun("ok", actor="ops")
    _held_exactly_while_running(app)
    app.work(burst=True)
    _held_exactly_while_running(app)
