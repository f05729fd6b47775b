"""A job whose stored arguments no longer decode does not take the dashboard down with it.

Given a job whose payload was written (by an older version, or by hand) nested ~985 levels deep, which
Python's JSON decoder cannot read back, beside ordinary jobs; when the dashboard's pages are requested
over real HTTP; then every page answers 200, the listing shows that job among the others, and its own
page says its arguments cannot be read instead of failing; after a worker ends it `dead`
(`undecodable_payload`), the dead-letter page lists it the same way.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from firesafe import App
from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer
from tests.contract.test_hostile_data import set_column

DEEP = '{"args":[' + "[" * 985 + "]" * 985 + '],"kwargs":{}}'


@pytest.fixture
def served(store_url: str) -> Iterator[tuple[App, str]]:
    app = App(store_url)

    @app.job(max_attempts=1)
    def echo(ctx: object, value: object) -> object:
        return value

    for i in range(3):
        echo.enqueue(i, key=f"fine:{i}")
    echo.enqueue("placeholder", key="deep")
    set_column(app, "deep", "payload", DEEP)
    with BackgroundServer(create_app(app)) as server:
        yield app, server.url
    app.close()


def test_pages_answer_with_an_unreadable_job_among_the_others(served: tuple[App, str]) -> None:
    app, url = served
    with httpx.Client(base_url=url, timeout=10) as http:
        for path in ("/", "/jobs", "/jobs?state=queued", "/dead", "/alerts", "/schedules"):
            r = http.get(path)
            assert r.status_code == 200, (path, r.status_code, r.text[:300])
        listing = http.get("/jobs").text
        assert all(f"fine:{i}" in listing for i in range(3)) and ">deep<" in listing
        page = http.get("/job", params={"key": "deep"})
        assert page.status_code == 200 and "deep" in page.text

        app.work(burst=True)  # the worker ends it dead, the others done
        assert app.get("deep").reason == "undecodable_payload"
        assert all(app.get(f"fine:{i}").state.value == "succeeded" for i in range(3))
        dead = http.get("/dead")
        assert dead.status_code == 200 and ">deep<" in dead.text
        page = http.get("/job", params={"key": "deep"})
        assert page.status_code == 200 and "undecodable" in page.text.lower()
