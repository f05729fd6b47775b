"""Fixtures of the dashboard tests: a populated app, its dashboard served on 127.0.0.1, a browser."""

from __future__ import annotations

import os
from collections.abc import Iterator
from html.parser import HTMLParser
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


def form_of(html: str, action: str = "/dead/apply") -> dict[str, list[str]]:
    """The fields of the page's form that posts to ``action`` (hidden inputs included), as a
    browser would submit them: what a confirmation page carries to the apply step."""
    fields: dict[str, list[str]] = {}
    inside = False

    class Parser(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            nonlocal inside
            a = dict(attrs)
            if tag == "form":
                inside = (a.get("action") or "").endswith(action)
            elif tag == "input" and inside and a.get("name"):
                fields.setdefault(a["name"] or "", []).append(a.get("value") or "")

        def handle_endtag(self, tag: str) -> None:
            nonlocal inside
            if tag == "form":
                inside = False

    Parser().feed(html)
    assert fields, f"no form posting to {action} in the page"
    return fields


def need_browser() -> None:
    if os.path.exists(CHROMIUM):
        return
    if os.environ.get("CI") == "true" or os.environ.get("FIRESAFE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium", pytrace=False)
    pytest.skip(f"{CHROMIUM} is missing (make browser installs it)")


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    """One Playwright per module (a second one cannot start beside it)."""
    need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Any) -> Iterator[Any]:
    b = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
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
