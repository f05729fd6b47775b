"""The PostgreSQL store behind PgBouncer in transaction mode (``?pooler=transaction``): each
transaction may run on another server connection, so nothing may rely on session state. Without the
option, psycopg prepares a statement after five executions and the pooler hands that name to
another client's connection (``prepared statement "_pg3_0" already exists``)."""

from __future__ import annotations

import collections
import signal
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from firesafe.errors import ConfigError
from firesafe.stores import open_store
from tests.conftest import PG_URL, drop_schema
from tests.limits import test_processes as limits_processes
from tests.limits.conftest import fleet, provider  # noqa: F401  (the limiter test's fixtures)
from tests.postgres.conftest import Pg, wait_until
from tests.postgres.pgbouncer import Bouncer
from tests.postgres.procs import build_app, read_effects
from tests.postgres.test_processes import counts, drain_in_processes
from tests.schedules import test_processes as schedules_processes

pytestmark = pytest.mark.postgres


def test_hundreds_of_single_enqueues_then_a_drain_through_the_pooler(pgb: Pg) -> None:
    """Given two apps (two web processes, say) behind the pooler, when they enqueue 300 jobs one by one
    in turn (each statement run far more often than psycopg's prepare threshold, on server connections
    the two share) and a worker drains them, then every job is stored and runs once."""
    apps = [build_app(pgb.url), build_app(pgb.url)]
    try:
        created = sum(apps[i % 2].jobs["noop"].enqueue(i, key=f"k{i}").created for i in range(300))
        assert created == 300
        assert not apps[1].jobs["noop"].enqueue(0, key="k0").created  # the stored job, found through the pooler
        stats = apps[0].work(burst=True, concurrency=4)
        assert stats.succeeded == 300
    finally:
        for app in apps:
            app.close()
    assert counts(pgb) == {"succeeded": 300}


@pytest.fixture
def store_url(pgb: Pg) -> str:
    """For the tests taken from tests/limits and tests/schedules: their store, behind the pooler."""
    return pgb.url


# One limiter test and one schedule test of the process-level suites (imported above), run here
# through the pooler: a concurrency limit of 3 across four worker processes, and schedulers in three
# worker processes (one SIGKILLed while it leads) enqueueing each window once.
test_a_limiter_holds_across_processes_through_the_pooler = \
    limits_processes.test_a_concurrency_limit_of_3_holds_across_processes
test_schedulers_enqueue_each_window_once_through_the_pooler = \
    schedules_processes.test_three_worker_processes_enqueue_each_window_once_and_survive_the_leaders_death

__all__ = ["test_a_limiter_holds_across_processes_through_the_pooler",
           "test_schedulers_enqueue_each_window_once_through_the_pooler"]


def test_two_worker_processes_drain_through_the_pooler_each_job_once(pgb: Pg, procs, tmp_path: Path) -> None:
    """Given 2000 jobs behind the pooler, when two worker processes drain them, then each job ran
    exactly once and both processes took part."""
    pids = drain_in_processes(pgb, procs, tmp_path, n=2000, workers=2, concurrency=4, timeout=120,
                              ready_first=True)
    assert len(pids) == 2, "both processes should have run jobs"


def test_a_worker_killed_behind_the_pooler_has_its_jobs_rescued_by_another(pgb: Pg, procs, tmp_path: Path) -> None:
    """Given a worker process draining slow jobs behind the pooler, when it is SIGKILLed mid-run and a
    second worker starts, then the second rescues the jobs the first held (their trace says lost,
    then succeeded) and every job succeeds; only a rescued job may have run twice."""
    n = 20
    effects = str(tmp_path / "effects.log")
    app = build_app(pgb.url, effects)
    try:
        app.jobs["effect"].enqueue_many([{"args": [i], "key": f"e{i}"} for i in range(n)])
        first = procs("w1", "worker", pgb.url, "--effects", effects, "--concurrency", "4", "--sleep", "1.0",
                      "--lease", "2", "--poll", "0.2")
        # Killed a moment into its second round of jobs (each runs 1 s), so it surely holds some.
        wait_until(lambda: len(read_effects(effects)) >= 4 and counts(pgb).get("running", 0) >= 1, 60,
                   "the first worker to finish some jobs and start more")
        first.signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        held = {j.key for j in app.jobs_list(state="running", limit=1000)}
        assert held, "the killed worker should have held jobs"
        second = procs("w2", "worker", pgb.url, "--effects", effects, "--concurrency", "4", "--lease", "2",
                       "--poll", "0.2")
        wait_until(lambda: counts(pgb) == {"succeeded": n}, 120, "every job to succeed")
        second.signal(signal.SIGTERM)
        assert second.wait(60) == 0, second.stderr()[-3000:]
        for key in held:
            assert [a.outcome for a in app.get(key).trace] == ["lost", "succeeded"], key
    finally:
        app.close()
    ran = collections.Counter(key for key, _, _ in read_effects(effects))
    assert set(ran) == {f"e{i}" for i in range(n)}
    assert {k for k, c in ran.items() if c > 1} <= held
    assert "rescued" in second.stderr()


def test_without_a_direct_url_workers_poll_and_migrations_run_through_the_pooler(bouncer: Bouncer) -> None:
    """Given ``?pooler=transaction`` and no ``direct=``, then the store says it cannot LISTEN (one
    clear line if asked to), ``migrate`` runs through the pooler (it holds only transaction-scoped
    state), and a worker drains by polling."""
    schema = f"fs_test_{uuid.uuid4().hex[:12]}"
    url = bouncer.url(f"schema={schema}&pooler=transaction")
    try:
        store = open_store(url)
        try:
            assert store.migrate() != []
        finally:
            store.close()
        app = build_app(url)
        try:
            assert app.store.supports_listen is False
            with pytest.raises(ConfigError, match=r"no \?direct= URL .* workers poll instead"):
                app.store.listen(["default"])  # type: ignore[attr-defined]
            app.jobs["noop"].enqueue_many([{"args": [i], "key": f"k{i}"} for i in range(50)])
            assert app.work(burst=True, concurrency=2, poll_interval=0.1).succeeded == 50
        finally:
            app.close()
    finally:
        drop_schema(schema)


def test_with_a_direct_url_an_idle_worker_wakes_on_enqueue_through_the_pooler(pgb: Pg) -> None:
    """Given ``direct=``, then LISTEN runs on the server itself and an enqueue through the pooler
    (its NOTIFY is sent at commit, whichever server connection runs it) wakes the listener."""
    app = build_app(pgb.url)
    try:
        app.store.migrate()
        assert app.store.supports_listen is True
        with app.store._connect_direct() as direct:  # type: ignore[attr-defined]
            assert direct.info.port == 5432 and direct.info.host == "127.0.0.1"  # not the pooler's
        listener = app.store.listen(["default"])  # type: ignore[attr-defined]
        try:
            assert listener.ready(10)
            listener.wait(0)  # the wake-up every (re)connect gives
            app.jobs["noop"].enqueue(1, key="k1")
            assert listener.wait(10)
        finally:
            listener.close()
    finally:
        app.close()


@pytest.mark.parametrize(("query", "error"), [
    ("pooler=session", r"invalid \?pooler= 'session'"),
    ("direct=" + quote(PG_URL, safe=""), r"\?direct= in the store URL is for \?pooler=transaction"),
    ("pooler=transaction&direct=mysql%3A%2F%2Fdb", r"must be a %-escaped postgresql:// URL"),
    ("pooler=transaction&direct=" + quote(PG_URL + "?schema=x", safe=""), "takes no schema"),
    ("pooler=transaction&pooler=transaction", r"gives \?pooler= 2 times"),
    ("pooler=transaction&direct=postgresql%3A%2F%2Fapp%3As3cret%40db%2Fshop", "must name no password"),
])
def test_a_bad_pooler_option_is_one_clear_line(query: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error) as caught:
        open_store(f"postgresql://postgres@127.0.0.1:1/test?{query}")
    assert "s3cret" not in str(caught.value) and "\n" not in str(caught.value)
