"""Every dead letter reaches the hooks, on both stores: jobs that never ran and jobs a rescue made dead.

Given an app with a hook, when a worker claims a job it cannot run (a name this app does not declare,
stored arguments that cannot be read) or rescues a job whose worker died too often, then the hook's
``job_dead`` is told, after the store recorded the dead letter, with the job's key, name and queue.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

from firesafe import App, AttemptEnded, Hook, JobDead, State
from firesafe.store.base import ClaimParams


class Dead(Hook):
    """The dead letters and the ended attempts told, with the thread each came on."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.events: list[tuple[str, Any, str]] = []
        self.lock = threading.Lock()

    def attempt_ended(self, attempt: AttemptEnded) -> None:
        with self.lock:
            self.events.append(("attempt_ended", attempt, threading.current_thread().name))

    def job_dead(self, job: JobDead) -> None:
        # told after the commit: the store already holds the dead letter
        stored = self.app.get(job.key).state
        with self.lock:
            self.events.append(("job_dead", (job, stored), threading.current_thread().name))

    def of(self, kind: str) -> list[Any]:
        with self.lock:
            return [v for k, v, _ in self.events if k == kind]


def set_payload(app: App, key: str, text: str) -> None:
    """Write a job's stored arguments by hand, as an older version or an operator might have."""
    store: Any = app.store
    if store.dialect == "sqlite":
        conn = sqlite3.connect(store.path)
        with conn:
            conn.execute("UPDATE firesafe_jobs SET payload = ? WHERE key = ?", (text, key))
        conn.close()
        return
    import psycopg
    from psycopg import sql

    with psycopg.connect(store.conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {}.firesafe_jobs SET payload = %s WHERE key = %s").format(
            sql.Identifier(store.schema)), (text, key))


def test_jobs_that_never_ran_are_told_as_dead_letters(app: App, store_url: str, clock: Any) -> None:
    # Given a job another deployment declared, and a job whose stored arguments cannot be read
    other = App(store_url, clock=clock)

    @other.job(name="ghost", queue="default")
    def ghost(ctx: Any) -> None: ...

    try:
        ghost.enqueue(key="ghost:1")
    finally:
        other.close()

    @app.job(queue="default")
    def echo(ctx: Any, value: int) -> int:
        return value

    echo.enqueue(1, key="bad:1")
    echo.enqueue(2, key="fine:2")
    set_payload(app, "bad:1", '{"args": [1, 2')
    dead = app.add_hook(Dead(app))

    # When a worker drains the queue
    worker = app.worker(burst=True, concurrency=2)
    stats = worker.run()

    # Then both dead letters are told, each after its attempt's end, with the store already saying dead
    assert stats.succeeded == 1 and stats.dead == 2
    told = {job.key: (job, stored) for job, stored in dead.of("job_dead")}
    assert set(told) == {"ghost:1", "bad:1"}
    ghost_dead, ghost_state = told["ghost:1"]
    assert (ghost_dead.name, ghost_dead.queue, ghost_dead.reason, ghost_dead.error_type, ghost_dead.worker) == \
        ("ghost", "default", "unknown_job", "UnknownJob", worker.id)
    bad_dead, bad_state = told["bad:1"]
    assert (bad_dead.name, bad_dead.queue, bad_dead.reason, bad_dead.error_type) == \
        ("echo", "default", "undecodable_payload", "UndecodablePayload")
    assert ghost_state == bad_state == State.DEAD
    assert ghost_dead.job_id == app.get("ghost:1").id and bad_dead.job_id == app.get("bad:1").id
    ended = {a.key: a for a in dead.of("attempt_ended")}
    assert set(ended) == {"ghost:1", "bad:1", "fine:2"}
    assert (ended["ghost:1"].outcome, ended["ghost:1"].state, ended["ghost:1"].duration) == ("failed", "dead", 0.0)
    order = [(k, v.key if k == "attempt_ended" else v[0].key) for k, v, _ in dead.events]
    for key in ("ghost:1", "bad:1"):
        assert order.index(("attempt_ended", key)) < order.index(("job_dead", key))


def test_a_job_whose_worker_died_too_often_is_told_dead_by_its_rescuer(app: App, clock: Any) -> None:
    # Given two jobs whose worker died while running them (claimed, then no heartbeat past the lease)
    @app.job(queue="payments", max_attempts=5)
    def charge(ctx: Any, order: str) -> None: ...

    charge.enqueue("o-1", key="charge:o-1")
    charge.enqueue("o-2", key="charge:o-2")
    store = app.store
    assert len(store.job_claim(ClaimParams(("payments",), 2, "gone:1:", 30.0))) == 2
    clock.advance(31)
    expired = {e.key: e for e in store.job_list_expired(10)}
    assert {k: e.queue for k, e in expired.items()} == {"charge:o-1": "payments", "charge:o-2": "payments"}
    dead = app.add_hook(Dead(app))

    # When a worker that tolerates one loss per job rescues them (and one of them was lost before)
    set_lost(store, "charge:o-1", 1)
    worker = app.worker(["payments"], burst=True, max_lost=2, concurrency=1)
    worker.run()  # its first turn rescues: the job lost twice goes dead, the other is retried

    # Then only the job lost too often is told, by the worker that rescued it, once its rescue committed
    [(told, stored)] = dead.of("job_dead")
    assert (told.key, told.name, told.queue, told.attempt, told.reason, told.error_type, told.worker) == \
        ("charge:o-1", "charge", "payments", 1, "worker_lost", "WorkerLost", worker.id)
    assert told.job_id == app.get("charge:o-1").id and stored == State.DEAD
    assert "stopped heartbeating" in (told.message or "")
    assert app.get("charge:o-2").state != State.DEAD
    # the attempt's worker is gone: nobody saw it end
    assert [a for a in dead.of("attempt_ended") if a.key == "charge:o-1"] == []


def set_lost(store: Any, key: str, lost: int) -> None:
    """Count earlier losses of a job by hand (as earlier rescues would have)."""
    if store.dialect == "sqlite":
        conn = sqlite3.connect(store.path)
        with conn:
            conn.execute("UPDATE firesafe_jobs SET lost = ? WHERE key = ?", (lost, key))
        conn.close()
        return
    import psycopg
    from psycopg import sql

    with psycopg.connect(store.conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {}.firesafe_jobs SET lost = %s WHERE key = %s").format(
            sql.Identifier(store.schema)), (lost, key))
