"""The dashboard's job page reads true, over real HTTP (uvicorn on 127.0.0.1), on SQLite and PostgreSQL.

Given a job that failed twice, was held back three times by a paused limiter and then succeeded
(tests/trace_story.py); when its page is opened; then its timeline holds the three attempts, its
waits are counted and timed apart, the header agrees, and it says it recovered, not in red.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from firesafe import App, FakeClock
from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer
from tests.trace_story import KEY, WAITED, held_back_app


def page_of(app: App, path: str) -> str:
    with BackgroundServer(create_app(app)) as server:
        response = httpx.get(server.url + path, timeout=10)
    assert response.status_code == 200, response.text
    return response.text


def between(html: str, start: str, end: str) -> str:
    return html.split(start, 1)[1].split(end, 1)[0]


@pytest.fixture
def recovered(store_url: str, clock: FakeClock) -> Iterator[App]:
    app = held_back_app(store_url, clock)
    yield app
    app.close()


def test_the_job_page_shows_attempts_and_waits_apart(recovered: App) -> None:
    html = page_of(recovered, f"/job?key={quote(KEY)}")
    timeline = between(html, 'id="timeline"', "</ol>")
    assert re.findall(r'class="attempt o-(\w+)"', timeline) == ["succeeded", "failed", "failed"]  # newest first
    assert "waiting for limiter" not in timeline and "o-deferred" not in timeline
    assert "3 wait(s)" in html and "6 run(s)" in html and "deferral" not in html
    waits = between(html, 'id="waits"', "</section>")
    total = f"3, {WAITED:.2f} s in all"
    assert total in between(html, 'id="job-waits">', "</dd>") and total in waits  # the header agrees
    assert waits.count('<tr class="wait">') == 3
    assert waits.count("<td><bdi>limiter &#39;psp&#39; (paused)</bdi></td>") == 3


def test_a_job_that_recovered_says_so_and_no_red_last_error(recovered: App) -> None:
    html = page_of(recovered, f"/job?key={quote(KEY)}")
    head = between(html, 'class="panel job-head"', "</section>")
    assert "last error" not in head and 'class="err"' not in head
    assert re.search(r'<dd class="ok-text" id="job-recovered">succeeded after 2 failed attempts', head)
    jobs = page_of(recovered, "/jobs")
    row = between(jobs, "<tbody>", "</tbody>")
    assert '<span class="ok-text">succeeded after 2 failed attempts</span>' in row and "err" not in row


def test_a_waiting_job_shows_its_last_failure_not_the_wait(store_url: str, clock: FakeClock) -> None:
    app = held_back_app(store_url, clock, finish=False)
    try:
        html = page_of(app, f"/job?key={quote(KEY)}")
        jobs = page_of(app, "/jobs")
    finally:
        app.close()
    head = between(html, 'class="panel job-head"', "</section>")
    last = between(head, 'id="job-last-error">', "</dd>")
    assert "HTTPStatusError" in last and "500 Internal Server Error" in last and "waiting for limiter" not in last
    assert "3 wait(s)" in head and "5 run(s)" in head
    row = between(jobs, "<tbody>", "</tbody>")
    assert "500 Internal Server Error" in row and "waiting for limiter" not in row


def test_in_the_browser_the_recovery_is_not_red(sqlite_url: str, clock: FakeClock, page: Any) -> None:
    app = held_back_app(sqlite_url, clock)
    try:
        with BackgroundServer(create_app(app)) as server:
            page.goto(f"{server.url}/job?key={quote(KEY)}")
            page.wait_for_selector("#job-recovered")
            assert "succeeded after 2 failed attempts" in page.inner_text("#job-recovered")
            color = page.eval_on_selector("#job-recovered", "e => getComputedStyle(e).color")
            red = page.evaluate("""() => { const e = document.createElement('span'); e.className = 'err';
                document.body.appendChild(e); const c = getComputedStyle(e).color; e.remove(); return c; }""")
            assert color != red
            assert page.locator("#timeline li.attempt").count() == 3
            assert page.locator("#waits tr.wait").count() == 3
    finally:
        app.close()
