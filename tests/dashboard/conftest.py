"""Fixtures of the dashboard tests: a populated app, its dashboard served on 127.0.0.1, a browser."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer
from tests.dashboard.appdef import make_app, populate

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TOKEN = "ops:correct-horse-battery-staple"


@pytest.fixture
def story(store_url: str) -> Iterator[tuple[Any, dict[str, bool]]]:
    """A populated app on each store (SQLite and PostgreSQL)."""
    app, fix = make_app(store_url)
    populate(app)
    yield app, fix
    app.close()


@pytest.fixture
def served(story: tuple[Any, dict[str, bool]]) -> Iterator[tuple[Any, dict[str, bool], str]]:
    """The story's dashboard served without a token on 127.0.0.1: (app, fix, base url)."""
    app, fix = story
    with BackgroundServer(create_app(app)) as server:
        yield app, fix, server.url


def need_browser() -> None:
    if os.path.exists(CHROMIUM):
        return
    if os.environ.get("CI") == "true" or os.environ.get("FIRESAFE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium", pytrace=False)
    pytest.skip(f"{CHROMIUM} is missing (make browser installs it)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(15_000)
    pg = context.new_page()
    pg.dialogs = []  # type: ignore[attr-defined]
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))  # type: ignore[attr-defined]
    yield pg
    context.close()
