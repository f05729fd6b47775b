"""The dashboard's job page shows a job's family over real HTTP (uvicorn on 127.0.0.1), on SQLite and
PostgreSQL: a parent counts its children by state with a link to each, a child links its parent."""

from __future__ import annotations

from urllib.parse import quote

from firesafe import FakeClock
from tests.cli.test_show_children import _family
from tests.dashboard.test_trace_page import between, page_of


def test_the_dashboards_job_page_links_the_parent_and_each_child(store_url: str, clock: FakeClock) -> None:
    """Over real HTTP (uvicorn on 127.0.0.1): the parent's page counts its children by state and links
    each one; a child's page links its parent."""
    app = _family(store_url, clock)
    try:
        parent = page_of(app, f"/job?key={quote('order:7')}")
        child = page_of(app, f"/job?key={quote('order:7/spawn-0/2')}")
    finally:
        app.close()
    kids = between(parent, 'id="job-children">', "</dd>")
    assert kids.startswith("4 ")
    assert 'class="children-dead"><span class="badge s-dead">dead</span> 1:' in kids
    assert f'href="/job?key={quote("order:7/spawn-0/2", safe="")}"' in kids
    assert kids.count('class="key"') == 4  # a link to each child
    up = between(child, 'id="job-parent">', "</dd>")
    assert 'href="/job?key=order%3A7"' in up and "s-scheduled" in up
