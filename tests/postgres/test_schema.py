"""Migrations: the schema built by replaying every PostgreSQL migration is the one the code expects.

"Expected" is checked three ways, so that drift anywhere fails here: (1) every named query of
``postgres.sql`` parses and plans against the migrated schema; (2) the migrated tables, columns,
nullability, kinds of type and indexes equal those of the SQLite migrations (one contract, two
dialects); (3) both dialects have the same migration versions and the same query names.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from importlib.resources import files
from typing import Any

import psycopg
import pytest

from firesafe import App
from firesafe.errors import ConfigError, StoreError
from firesafe.store import queries
from firesafe.store.base import ClaimParams
from firesafe.stores import open_store
from firesafe.stores.postgres import PostgresStore
from tests.postgres.conftest import Pg

#: How a SQLite column type maps onto the PostgreSQL types a migration may use for it.
TYPES = {"INTEGER": {"integer", "bigint", "boolean"}, "REAL": {"double precision"}, "TEXT": {"text"}}


def migrated(pg: Pg) -> PostgresStore:
    store = open_store(pg.url)
    assert isinstance(store, PostgresStore)
    store.migrate()
    return store


def numbered(text: str) -> tuple[str, list[str]]:
    """A query with its ``%(name)s`` placeholders as ``$1, $2, ...`` (the server's own), and the names."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)[sb]", number, text), names


def claim_texts(store: PostgresStore) -> dict[str, str]:
    """The two texts the store writes from the job_claim template: a claim of 8, a claim of suspects."""
    return {"claim": store._claim_sql(ClaimParams(("default",), 8, "w", 30.0)),
            "claim suspects": store._claim_sql(ClaimParams(("default",), 1, "w", 30.0, suspects=True))}


def test_every_named_query_plans_against_the_migrated_schema(pg: Pg) -> None:
    store = migrated(pg)
    try:
        texts = {**store.q, **claim_texts(store)}  # job_claim is a template: plan what the store writes
        del texts["job_claim"]
        with psycopg.connect(pg.url.split("?")[0]) as conn:
            for name, text in texts.items():
                query, _ = numbered(text)
                result = conn.pgconn.prepare(b"", query.encode())  # parse and plan only: nothing runs
                assert result.status == psycopg.pq.ExecStatus.COMMAND_OK, (
                    f"query {name!r} does not fit the migrated schema: "
                    f"{result.error_message.decode(errors='replace')}")
    finally:
        store.close()


def _sqlite_schema(tmp_path) -> dict[str, dict]:
    path = tmp_path / "ref.db"
    open_store(f"sqlite:///{path}").migrate()
    conn = sqlite3.connect(path)
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    out = {}
    for t in tables:
        cols = {r[1]: (r[2].upper(), bool(r[3]) or bool(r[5])) for r in conn.execute(f"PRAGMA table_info({t})")}
        indexes = {r[1] for r in conn.execute(f"PRAGMA index_list({t})") if r[3] == "c"}
        uniques = {tuple(c[2] for c in conn.execute(f"PRAGMA index_info({r[1]})"))
                   for r in conn.execute(f"PRAGMA index_list({t})") if r[2] and r[3] != "c"}
        out[t] = {"columns": cols, "indexes": indexes, "uniques": uniques}
    conn.close()
    return out


def _pg_schema(pg: Pg) -> dict[str, dict]:
    with pg.admin() as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (pg.schema,))]
        out = {}
        for t in tables:
            cols = {}
            for name, dtype, nullable, pk in conn.execute(
                    "SELECT c.column_name, c.data_type, c.is_nullable, "
                    "  EXISTS (SELECT 1 FROM information_schema.key_column_usage k "
                    "          JOIN information_schema.table_constraints tc USING (constraint_schema, constraint_name) "
                    "          WHERE tc.constraint_type = 'PRIMARY KEY' AND k.table_schema = c.table_schema "
                    "            AND k.table_name = c.table_name AND k.column_name = c.column_name) "
                    "FROM information_schema.columns c WHERE c.table_schema = %s AND c.table_name = %s",
                    (pg.schema, t)):
                cols[name] = (dtype, nullable == "NO" or pk)
            constraint_indexes = {r[0] for r in conn.execute(
                "SELECT conindid::regclass::text FROM pg_constraint WHERE conrelid = %s::regclass",
                (f'"{pg.schema}".{t}',))}
            indexes = {r[0] for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s", (pg.schema, t))}
            indexes -= {i.split(".")[-1].strip('"') for i in constraint_indexes}
            uniques = {tuple(r[0]) for r in conn.execute(
                "SELECT array_agg(a.attname ORDER BY k.n) FROM pg_constraint c "
                "CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) "
                "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum "
                "WHERE c.conrelid = %s::regclass AND c.contype IN ('u', 'p') GROUP BY c.oid",
                (f'"{pg.schema}".{t}',))}
            out[t] = {"columns": cols, "indexes": indexes, "uniques": uniques}
    return out


def test_migrated_schema_matches_the_sqlite_schema(pg: Pg, tmp_path) -> None:
    migrated(pg).close()
    lite, post = _sqlite_schema(tmp_path), _pg_schema(pg)
    assert set(post) == set(lite), "both dialects must create the same tables"
    for table, want in lite.items():
        got = post[table]
        assert set(got["columns"]) == set(want["columns"]), f"columns of {table}"
        for col, (ltype, lnotnull) in want["columns"].items():
            ptype, pnotnull = got["columns"][col]
            assert ptype in TYPES[ltype], f"{table}.{col}: {ptype} does not stand for SQLite's {ltype}"
            assert pnotnull == lnotnull, f"{table}.{col}: NOT NULL differs between the dialects"
        assert got["indexes"] == want["indexes"], f"indexes of {table}"
        assert got["uniques"] >= want["uniques"], f"unique keys of {table}"


def _pg_query_comments() -> dict[str, str]:
    """The comment lines under each ``-- name:`` of every PostgreSQL query file."""
    root = files("firesafe.store") / "sql"
    texts = [(root / "postgres.sql").read_text()]
    if (root / "postgres").is_dir():
        texts += [e.read_text() for e in (root / "postgres").iterdir() if e.name.endswith(".sql")]
    out: dict[str, str] = {}
    for text in texts:
        name = None
        for line in text.splitlines():
            if line.startswith("-- name:"):
                name = line.split(":", 1)[1].strip()
                out[name] = ""
            elif name is not None and line.startswith("--"):
                out[name] += line
            else:
                name = None if line.strip() else name
    return out


def test_both_dialects_have_the_same_migrations_and_query_names() -> None:
    assert [v for v, _ in queries.migrations("postgres")] == [v for v, _ in queries.migrations("sqlite")]
    lite, post = set(queries.load("sqlite")), set(queries.load("postgres"))
    assert lite - post == set(), "queries missing from postgres.sql"
    comments = _pg_query_comments()
    unexplained = sorted(n for n in post - lite if "PostgreSQL" not in comments[n])
    assert unexplained == [], "a PostgreSQL-only query must say why in its comment ('PostgreSQL only/differs')"
    names = [p.name for p in (files("firesafe.store") / "migrations" / "postgres").iterdir() if p.name.endswith(".sql")]
    assert all(re.fullmatch(r"\d{4}_[a-z0-9_]+\.sql", n) for n in names), names


def test_migrate_is_idempotent_and_reports_the_version(pg: Pg) -> None:
    store = open_store(pg.url)
    try:
        assert store.schema_version() == 0
        latest = max(v for v, _ in queries.migrations("postgres"))
        assert store.migrate()[-1] == latest
        assert store.migrate() == []
        assert store.schema_version() == latest
    finally:
        store.close()


def test_concurrent_migrations_apply_each_version_once(pg: Pg) -> None:
    stores = [open_store(pg.url) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    results: list[list[int] | BaseException] = [[] for _ in stores]

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = stores[i].migrate()
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for s in stores:
        s.close()
    assert not [r for r in results if isinstance(r, BaseException)], results
    applied = [v for r in results for v in r]  # type: ignore[union-attr]
    assert sorted(applied) == [v for v, _ in queries.migrations("postgres")]
    assert pg.scalar(f'SELECT count(*) FROM "{pg.schema}".firesafe_migrations') == len(applied)


def test_tables_live_in_their_own_schema(pg: Pg) -> None:
    app = App(pg.url)

    @app.job
    def noop(ctx) -> None: ...

    noop.enqueue(key="k")
    app.close()
    tables = set(pg.scalar("SELECT string_agg(table_name, ',') FROM information_schema.tables "
                           "WHERE table_schema = %s", (pg.schema,)).split(","))
    assert {"firesafe_jobs", "firesafe_attempts", "firesafe_migrations"} <= tables
    assert all(t.startswith("firesafe_") for t in tables)
    assert pg.scalar(f'SELECT count(*) FROM "{pg.schema}".firesafe_jobs') == 1


@pytest.mark.parametrize("bad", ["Upper", "1abc", "pg_catalog", "a-b", "x" * 49, "a;drop"])
def test_a_bad_schema_name_is_a_clear_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="invalid schema"):
        open_store(f"postgresql://postgres@127.0.0.1:5432/test?schema={bad}")


@pytest.mark.parametrize("url", ["postgresql://%a0@127.0.0.1:5432/test", "postgresql://postgres@127.0.0.1/t%ff",
                                 "postgresql://postgres@127.0.0.1/test?application_name=%c3%28&schema=ok"])
def test_an_escape_that_is_not_utf8_is_a_clear_error_before_any_connection(url: str) -> None:
    with pytest.raises(ConfigError, match="does not decode to UTF-8"):
        open_store(url)


def test_an_unreachable_server_is_a_clear_store_error() -> None:
    store = open_store("postgresql://postgres@127.0.0.1:1/test", timeout=1.0)
    try:
        with pytest.raises(StoreError, match=r"127\.0\.0\.1:1/test .*unreachable"):
            store.migrate()
    finally:
        store.close()


def test_an_unreachable_server_is_reported_at_once_with_its_reason_and_no_retry_noise(caplog) -> None:
    store = open_store("postgresql://postgres@127.0.0.1:1/test", timeout=30.0)
    try:
        with caplog.at_level("DEBUG"):
            started = time.monotonic()
            with pytest.raises(StoreError, match=r"unreachable: connection failed: .*port 1 failed: Connection "
                                                 r"refused$"):
                store.migrate()
            waited = time.monotonic() - started
        assert waited < 10.0  # it did not sit out the pool's 30 s of retries before saying so
        assert [r for r in caplog.records if r.name.startswith("psycopg")] == []
    finally:
        store.close()


def test_a_parameter_libpq_does_not_know_is_a_config_error_before_any_connection() -> None:
    with pytest.raises(ConfigError, match=r'^the store URL is not a valid PostgreSQL URL: invalid URI query '
                                          r'parameter: "sslmod"$'):
        open_store("postgresql://postgres@127.0.0.1:1/test?sslmod=disable")


@pytest.mark.parametrize(("kind", "index"), [("claim", "firesafe_jobs_runnable"),
                                             ("claim suspects", "firesafe_jobs_suspects"),
                                             ("pending", "firesafe_jobs_suspects"),
                                             ("dead groups", "firesafe_jobs_finished")])
def test_partial_indexes_are_usable_by_their_queries(pg: Pg, kind: str, index: str) -> None:
    """Each query names the condition of its partial index, so the planner may use it (with sequential
    scans off, an unusable index would leave a sequential scan in the plan), also under the generic
    plan a worker's finish-and-claim uses."""
    store = migrated(pg)
    try:
        text = {**claim_texts(store), "pending": store.q["job_pending"],
                "dead groups": store.q["dash_dead_groups"]}[kind]
        query, names = numbered(text)
        with psycopg.connect(pg.url.split("?")[0], autocommit=True) as conn, conn.transaction():
            conn.execute("SET LOCAL enable_seqscan = off")
            conn.execute(store.q["plan_generic"])
            conn.execute(f"PREPARE q AS {query}")
            plan = "\n".join(r[0] for r in conn.execute(
                f"EXPLAIN EXECUTE q({', '.join(['NULL'] * len(names))})"))
        assert index in plan, plan
        assert "Seq Scan on firesafe_jobs" not in plan, plan
    finally:
        store.close()


def test_a_process_recovers_when_a_migration_changes_a_table_under_it(pg: Pg) -> None:
    """A newer firesafe adds a column while this process runs: the statements its connections
    prepared return the old columns and the server refuses them. The process renews its
    connections at the first refusal, which is one clear StoreError; the calls after it work."""
    store = PostgresStore(pg.url, pool_min=2, pool_max=2)
    store.migrate()
    app = App(store)

    @app.job()
    def work(ctx, n: int) -> int:
        return n

    work.enqueue(1, key="k")
    for _ in range(20):  # psycopg prepares a statement from its 5th execution on a connection
        assert store.job_get("k") is not None
    with pg.admin() as conn:
        conn.execute(f'ALTER TABLE "{pg.schema}".firesafe_jobs ADD COLUMN added_later integer')
    failures = []
    for _ in range(6):
        try:
            assert store.job_get("k").key == "k"
        except StoreError as exc:
            failures.append(str(exc))
    assert len(failures) <= 1, failures
    assert all("changed under this process" in f and "a retry works" in f for f in failures), failures
    app.close()


def with_a_job(pg: Pg) -> tuple[PostgresStore, App, Any]:
    """A migrated store, an app on it, and its one job."""
    store = migrated(pg)
    app = App(store)

    @app.job()
    def work(ctx, n: int) -> int:
        return n

    return store, app, work


def generic_plans(pg: Pg, store: PostgresStore, names: list[str]) -> dict[str, str]:
    """Each named statement's plan under the generic plan a worker's finish-and-claim uses."""
    plans = {}
    with psycopg.connect(pg.url.split("?")[0], autocommit=True) as conn:
        for name in names:
            query, params = numbered(store.q[name])
            with conn.transaction():
                conn.execute(store.q["plan_generic"])
                conn.execute(f"PREPARE q AS {query}")
                plans[name] = "\n".join(r[0] for r in conn.execute(
                    f"EXPLAIN EXECUTE q({', '.join(['NULL'] * len(params))})"))
                conn.execute("DEALLOCATE q")
    return plans


#: Statements that reach running jobs by id: they name the running state by the lease token (see the
#: header of postgres.sql), so none can read the partial leases index.
BY_ID = ["job_finish", "job_finish_plain", "job_heartbeat", "job_rescue", "job_cancel_running", "attempts_of_job",
         "step_record", "limiter_slots_prune", "limiter_job_live", "limiter_job_wait", "limiter_list",
         "job_spawn_parent", "job_children_wait", "step_divergence_event"]


def test_statements_that_reach_running_jobs_by_id_never_read_the_leases_index(pg: Pg) -> None:
    """The statistics are taken while nothing runs (as an autovacuum's ANALYZE of an idle queue would),
    then 512 jobs run. With state = 'running' in these statements the planner read the leases index
    for them (it holds every running job's entry, and the statistics say there are none) instead of
    looking each job up by id: a finish of 128 jobs compared 128 x 128 pairs. Checked under the generic
    plan a worker's finish-and-claim uses."""
    store, app, work = with_a_job(pg)
    try:
        work.enqueue_many([{"args": [i]} for i in range(3000)])
        with pg.admin() as conn:
            conn.execute(f'ANALYZE "{pg.schema}".firesafe_jobs')
        assert len(store.job_claim(ClaimParams(("default",), 512, "w", 30.0))) == 512
        plans = generic_plans(pg, store, BY_ID)
        assert [n for n, plan in plans.items() if "firesafe_jobs_leases" in plan] == [], plans
        assert all("firesafe_jobs_pkey" in plans[n] for n in ("job_finish", "job_heartbeat", "step_record")), plans
    finally:
        app.close()


#: Statements that reach waiting, ended or child jobs by id (a batch of ids, or one): they name those
#: conditions so that no partial index (runnable, finished, children's) can serve them (see the header
#: of postgres.sql).
BY_ID_IN_A_STATE = ["job_children_settle", "job_children_unsettle", "alert_outbox_dead", "job_replay",
                    "job_discard", "job_cancel_waiting", "job_rerun"]


def test_statements_that_reach_waiting_or_ended_jobs_by_id_read_them_by_id(pg: Pg) -> None:
    """The statistics are taken while every job runs (none waits, none has ended), as an ANALYZE of a
    young store would see it. With state = 'dead' (or IN the ended or waiting states) in these
    statements the planner read the whole finished (or runnable) index for them, which it believed
    empty, instead of looking each job up by its id: a child's count-down read one index entry per
    ended job of the store's history, and a replay of a batch one per dead job. Checked under the
    generic plan a worker's finish-and-claim uses."""
    store, app, work = with_a_job(pg)
    try:
        work.enqueue_many([{"args": [i]} for i in range(3000)])
        while store.job_claim(ClaimParams(("default",), 1000, "w", 30.0)):
            pass
        with pg.admin() as conn:
            conn.execute(f'ANALYZE "{pg.schema}".firesafe_jobs')
            assert conn.execute(f'SELECT DISTINCT state FROM "{pg.schema}".firesafe_jobs').fetchall() == [("running",)]
        plans = generic_plans(pg, store, BY_ID_IN_A_STATE)
        partial = re.compile(r"firesafe_jobs_(finished|runnable|parent)")
        assert [n for n, plan in plans.items() if partial.search(plan)] == [], plans
        assert [n for n, plan in plans.items() if "firesafe_jobs_pkey" not in plan] == [], plans
    finally:
        app.close()


def test_a_job_running_without_a_lease_token_or_waiting_with_one_is_refused(pg: Pg) -> None:
    _store, app, work = with_a_job(pg)
    try:
        work.enqueue(1, key="k")
        table = f'"{pg.schema}".firesafe_jobs'
        with pg.admin() as conn:
            for change in ("state = 'running'", "lease_token = 'a-token'"):
                with pytest.raises(psycopg.errors.CheckViolation, match="firesafe_jobs_leased_while_running"):
                    conn.execute(f"UPDATE {table} SET {change} WHERE key = 'k'")
            conn.execute(f"UPDATE {table} SET state = 'running', lease_token = 't' WHERE key = 'k'")
            with pytest.raises(psycopg.errors.CheckViolation, match="firesafe_jobs_leased_while_running"):
                conn.execute(f"UPDATE {table} SET state = 'succeeded' WHERE key = 'k'")
    finally:
        app.close()
