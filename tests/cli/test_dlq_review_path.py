"""`firesafe dlq ls` lists the last death first, pages by offset or cursor, filters by reason and
carries the total in --json; the dashboard's dead-letter page keeps the same order. Both stores."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import click
import httpx
import pytest
from click.testing import CliRunner

from firesafe import App, FakeClock, Permanent
from firesafe.cli.main import cli
from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer
from firesafe.store.sqlite import Q
from firesafe.stores import open_store

#: Keys in the order they died: the first one enqueued (created first) dies last.
DEATHS = [f"pay:{i}" for i in range(1, 8)] + ["pay:0"]


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def dead(store_url: str) -> Iterator[App]:
    """Eight dead payments that died in another order than they were created, and two declined
    cards (reason permanent) that died first of all."""
    clock = FakeClock()
    app = App(store_url, clock=clock)

    @app.job(max_attempts=1)
    def pay(ctx, n: int) -> None:
        raise RuntimeError(f"provider down {n}")

    @app.job()
    def declined(ctx, n: int) -> None:
        raise Permanent("card declined")

    declined.enqueue(1, key="declined:1")
    declined.enqueue(2, key="declined:2")
    app.work(burst=True)
    for i in range(8):
        clock.advance(1)
        pay.enqueue(i, key=f"pay:{i}")
    for key in DEATHS:  # each dies a second after the one before
        clock.advance(1)
        _run_one(app, key)
    yield app
    app.close()


def _run_one(app: App, key: str) -> None:
    """Run the one job ``key`` to its death now (the others wait for a later time)."""
    from firesafe.store.base import JobFilter

    waiting = [j for j in app.store.job_list(JobFilter(state="queued", limit=100)) if j.key != key]
    for j in waiting:  # hold the others back: cancelled for the run, queued again after it
        app.store.job_cancel(j.id, "test")
    app.work(burst=True)
    app.store.job_replay_many([j.id for j in waiting], "test")


def keys(result: click.testing.Result) -> list[str]:
    return [j["key"] for j in json.loads(result.stdout)["items"]]


def test_ls_lists_the_last_death_first_and_pages_by_cursor_and_offset(dead: App) -> None:
    url = dead.store_url
    newest = [*DEATHS[::-1], "declined:2", "declined:1"]
    first = run("dlq", "ls", "--limit", "4", "--json", "--store", url)
    page = json.loads(first.stdout)
    assert page["total"] == 10 and keys(first) == newest[:4] and page["next"]
    second = run("dlq", "ls", "--limit", "4", "--after", page["next"], "--json", "--store", url)
    assert keys(second) == newest[4:8]
    third = run("dlq", "ls", "--limit", "4", "--after", json.loads(second.stdout)["next"], "--json", "--store", url)
    assert keys(third) == newest[8:] and json.loads(third.stdout)["next"] is None
    assert keys(run("dlq", "ls", "--limit", "4", "--offset", "4", "--json", "--store", url)) == newest[4:8]
    table = run("dlq", "ls", "--limit", "4", "--store", url).output
    assert table.index("pay:0") < table.index("pay:7") and "4 of 10 dead job(s)" in table
    assert f"--after {page['next']}" in table


def test_ls_filters_by_reason_and_counts_the_filtered_total(dead: App) -> None:
    url = dead.store_url
    declined = json.loads(run("dlq", "ls", "--reason", "permanent", "--json", "--store", url).stdout)
    assert declined["total"] == 2 and [j["key"] for j in declined["items"]] == ["declined:2", "declined:1"]
    exhausted = json.loads(run("dlq", "ls", "--reason", "exhausted", "--limit", "3", "--json", "--store", url).stdout)
    assert exhausted["total"] == 8 and len(exhausted["items"]) == 3
    bad = run("dlq", "ls", "--after", "yesterday", "--store", url)
    assert bad.exit_code == 1 and "not a page cursor" in bad.output and "Traceback" not in bad.output


def test_replay_by_reason_filter_touches_only_those(dead: App) -> None:
    result = run("dlq", "replay", "--dead-reason", "permanent", "--yes", "--json", "--store", dead.store_url)
    assert sorted(json.loads(result.stdout)["keys"]) == ["declined:1", "declined:2"]
    assert dead.dlq.count() == 8


def test_the_dashboard_dead_page_lists_the_last_death_first_and_filters_by_reason(dead: App) -> None:
    with BackgroundServer(create_app(dead)) as server, httpx.Client(base_url=server.url, timeout=10) as c:
        html = c.get("/dead", params={"size": "10"}).text
        order = re.findall(r"key=((?:pay|declined)%3A\d)", html)
        listed = list(dict.fromkeys(k.replace("%3A", ":") for k in order))
        assert listed == [*DEATHS[::-1], "declined:2", "declined:1"]
        only = c.get("/dead", params={"dead_reason": "permanent"}).text
        assert "declined:1" in only and "pay:3" not in only


def test_a_page_reads_the_dead_index_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "plan.db"
    open_store(f"sqlite:///{path}").migrate()
    with sqlite3.connect(path) as conn:
        params = {n: None for n in re.findall(r":(\w+)", Q["dead_list"])}
        params.update(after_at=1e9, after_id=5, limit=50, offset=0)
        plan = " ".join(r[-1] for r in conn.execute("EXPLAIN QUERY PLAN " + Q["dead_list"], params))
    assert "INDEX firesafe_jobs_finished (state=? AND finished_at<?)" in plan and "TEMP B-TREE" not in plan, plan
