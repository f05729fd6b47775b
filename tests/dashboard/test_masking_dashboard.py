"""Secrets never reach a dashboard page or its start-up line (invariant 9), over real HTTP.

Given jobs whose error, arguments and result carry secrets, and a store URL with a password; when
the dashboard serves them (uvicorn on 127.0.0.1, in this process or as `firesafe dashboard`); then no
page and no log line holds a secret.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from firesafe import App
from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer
from tests.conftest import PG_URL, drop_schema, need_postgres
from tests.dashboard.procs import dashboard, write_app

SECRETS = ["abc.def", "pw-sekrit", "two words", "dsn-sekrit", "res-sekrit"]
MESSAGE = ('refused: Authorization: Bearer abc.def via postgresql://app:pw-sekrit@db.internal/x; '
           'password: "two words"')
PAGES = ["/", "/jobs", "/dead", "/job?key=leak%3A1", "/job?key=fine%3A1"]


def no_secret(text: str, where: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{leaked} in {where}"


def leaky_app(url: str) -> App:
    app = App(url)

    @app.job(max_attempts=1)
    def leak(ctx: Any, dsn: str) -> None:
        raise RuntimeError(MESSAGE)

    @app.job()
    def fine(ctx: Any, order_id: str) -> dict[str, str]:
        return {"order": order_id, "note": "Authorization: Bearer res-sekrit"}

    leak.enqueue("postgresql://svc:dsn-sekrit@db/y", key="leak:1")
    fine.enqueue("o-1", key="fine:1")
    app.work(burst=True, wait_scheduled=True)
    return app


def test_no_page_shows_a_secret(store_url: str) -> None:
    app = leaky_app(store_url)
    try:
        with BackgroundServer(create_app(app)) as server, httpx.Client(base_url=server.url, timeout=10) as c:
            for path in PAGES:
                r = c.get(path)
                assert r.status_code == 200, (path, r.text[:300])
                no_secret(r.text, path)
            job = c.get("/job", params={"key": "leak:1"}).text
            assert "Bearer ********" in job and "postgresql://app:********@db.internal/x" in job
            assert "Bearer ********" in c.get("/job", params={"key": "fine:1"}).text
    finally:
        app.close()


@pytest.fixture
def pg_with_password() -> Iterator[str]:
    """A PostgreSQL store URL with a password in the user part and the query (trust auth takes any)."""
    need_postgres()
    schema = f"fs_test_{uuid.uuid4().hex[:12]}"
    host = PG_URL.split("://", 1)[1].split("@", 1)[-1]
    try:
        yield f"postgresql://postgres:pw-sekrit@{host}?schema={schema}&password=pw-sekrit"
    finally:
        drop_schema(schema)


def test_page_headers_do_not_show_the_store_password(pg_with_password: str) -> None:
    app = leaky_app(pg_with_password)
    try:
        with BackgroundServer(create_app(app)) as server, httpx.Client(base_url=server.url, timeout=10) as c:
            for path in PAGES:
                page = c.get(path).text
                no_secret(page, path)
                assert "postgres:********@" in page and "password=********" in page, path
    finally:
        app.close()


def test_the_start_up_line_does_not_show_the_store_password(pg_with_password: str, tmp_path: Path) -> None:
    leaky_app(pg_with_password).close()
    with dashboard([write_app(tmp_path, pg_with_password)], tmp_path) as d:
        assert httpx.get(d.url + "/", timeout=10).status_code == 200
        log = d.log.read_text()
    no_secret(log, "the dashboard's output")
    assert "store postgresql://postgres:********@" in log and "password=********" in log
