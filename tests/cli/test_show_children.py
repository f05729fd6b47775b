"""`firesafe show` tells a job's family: a child names its parent, a parent counts its children by
state and names them (each one `firesafe show KEY` away); `--json` carries the same. Both stores."""

from __future__ import annotations

import json

import click
from click.testing import CliRunner

from firesafe import App, FakeClock
from firesafe.cli.main import cli


def run(*args: str) -> click.testing.Result:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def _family(store_url: str, clock: FakeClock) -> App:
    app = App(store_url, clock=clock)
    app.store.migrate()

    @app.job(queue="kids", max_attempts=1)
    def kid(ctx, i: int) -> int:
        if i == 2:
            raise ValueError("row 2 is bad")
        return i

    @app.job(queue="parents")
    def parent(ctx) -> list:
        return ctx.wait_children(ctx.spawn_many(kid, [[i] for i in range(4)]), on_dead="collect")

    parent.enqueue(key="order:7")
    app.work(burst=True, queues=["parents"])
    # One child is cancelled, one dies, two succeed.
    app.store.job_cancel(app.get("order:7/spawn-0/3").id, "test")
    app.work(burst=True, queues=["kids"])
    return app


def test_show_names_the_parent_and_counts_the_children(store_url: str, clock: FakeClock) -> None:
    app = _family(store_url, clock)
    try:
        parent = run("show", "order:7", "--store", store_url).output
        child = run("show", "order:7/spawn-0/2", "--store", store_url).output
        d = json.loads(run("show", "order:7", "--json", "--store", store_url).stdout)
        c = json.loads(run("show", "order:7/spawn-0/0", "--json", "--store", store_url).stdout)
    finally:
        app.close()
    assert "children" in parent and "4: 2 succeeded, 1 dead, 1 cancelled" in parent
    assert "order:7/spawn-0/2" in parent  # the dead one, named
    assert "parent" in child and "order:7" in child
    assert d["children"]["by_state"] == {"succeeded": 2, "dead": 1, "cancelled": 1}
    assert d["children"]["keys"]["dead"] == ["order:7/spawn-0/2"]
    assert d["children"]["total"] == 4 and d["children"]["pending"] == 0
    assert d["parent"] is None
    assert c["parent"] == {"key": "order:7", "name": "parent", "state": d["state"]}
    assert c["children"]["total"] == 0

