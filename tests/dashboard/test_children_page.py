"""The dashboard's job page shows a job's family over real HTTP (uvicorn on 127.0.0.1), on SQLite and
PostgreSQL: a parent counts its children by state with a link to each, a child links its parent."""

from __future__ import annotations

from typing import Any
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


def test_in_a_browser_a_parent_leads_to_its_dead_child_and_back(sqlite_url: str, clock: FakeClock,
                                                                 page: Any) -> None:
    """Playwright on the real headless Chromium: from the parent's page, the dead child's link opens
    the child's page, which names the error and links back to its parent."""
    from firesafe.dashboard import create_app
    from firesafe.dashboard.server import BackgroundServer
    from tests.dashboard.test_browser import watch_console

    app = _family(sqlite_url, clock)
    problems = watch_console(page)
    try:
        with BackgroundServer(create_app(app)) as server:
            page.goto(server.url + f"/job?key={quote('order:7')}")
            assert "4" in page.inner_text("#job-children") and "1 not ended" not in page.inner_text("#job-children")
            page.click("#job-children li.children-dead a.key")
            page.wait_for_selector("#job-parent")
            assert "order:7/spawn-0/2" in page.inner_text("h1")
            assert "ValueError" in page.inner_text("#job-last-error")
            page.click("#job-parent a.key")
            page.wait_for_selector("#job-children")
            assert page.inner_text("h1") == "order:7"
    finally:
        app.close()
    assert problems == [], problems
