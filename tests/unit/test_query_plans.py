"""The SQLite store's hot and large-table queries read the index meant for them, not the whole table.

A partial index is only used when the query's WHERE names its condition; these tests fail if a query
edit (or an index edit in a migration) silently turns a lookup into a scan of every job.
"""

from __future__ import annotations

import re
import sqlite3

import pytest

from firesafe.store.sqlite import _CLAIM, Q, _sha256
from firesafe.stores import open_store


@pytest.fixture()
def conn(tmp_path):
    path = tmp_path / "plans.db"
    open_store(f"sqlite:///{path}").migrate()
    c = sqlite3.connect(path)
    c.create_function("firesafe_sha256", 1, _sha256)  # as the store's connections define it
    yield c
    c.close()


def plan(conn: sqlite3.Connection, sql: str) -> str:
    params = {name: 0 for name in re.findall(r":(\w+)", sql)}
    params.update({k: "[]" for k in ("queues", "keys", "ids") if k in params})
    return "\n".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))


@pytest.mark.parametrize(("sql", "index"), [
    (_CLAIM[False], "firesafe_jobs_runnable"),
    (_CLAIM[True], "firesafe_jobs_suspects"),
    (Q["job_delete_finished"], "firesafe_jobs_finished"),
    (Q["dash_dead_groups"], "firesafe_jobs_finished"),
    (Q["job_reserve_finished"], "firesafe_jobs_finished"),
    (Q["job_delete_reserved"], "firesafe_jobs_finished"),
    (Q["reserved_delete_expired"], "firesafe_keys_finished"),
], ids=["claim", "claim suspects", "prune", "dead groups", "reserve keys", "prune reserved", "free keys"])
def test_query_reads_its_index(conn: sqlite3.Connection, sql: str, index: str) -> None:
    text = plan(conn, sql)
    assert f"INDEX {index}" in text, text
    assert not re.search(r"SCAN firesafe_jobs(?! USING)", text), text


@pytest.mark.parametrize("name", ["job_children_settle", "job_children_unsettle", "alert_outbox_dead", "job_replay",
                                  "job_discard", "job_cancel_waiting", "job_rerun"])
def test_a_query_of_jobs_by_id_in_a_state_reads_them_by_id(conn: sqlite3.Connection, name: str) -> None:
    # Not the index of that state: it holds the store's whole history of ended jobs (a child's
    # count-down, a dead job's alert), and reading it for a batch cost one entry per ended job.
    text = plan(conn, Q[name])
    assert "INTEGER PRIMARY KEY" in text, text
    assert not re.search(r"INDEX firesafe_jobs_(finished|parent|runnable)", text), text


def test_suspects_count_reads_the_suspects_index(conn: sqlite3.Connection) -> None:
    text = plan(conn, Q["job_pending"])
    assert "INDEX firesafe_jobs_suspects" in text, text


def test_ending_the_leases_of_a_process_gone_reads_running_jobs_only(conn: sqlite3.Connection) -> None:
    # The leases index (running jobs) or the (state, finished_at) one searched on state: either way
    # only running jobs are read, never every job.
    text = plan(conn, Q["job_expire_process"])
    assert re.search(r"SEARCH firesafe_jobs USING INDEX firesafe_jobs_(leases|finished) \((state=\?|lease_expires>\?)",
                     text), text
