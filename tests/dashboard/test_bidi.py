"""The dashboard over real HTTP isolates bidirectional overrides in data and escapes its markup.

Given jobs whose keys (written by hand), names, errors, tracebacks, arguments, results and events
hold right-to-left overrides, isolates and HTML; when the pages are requested; then every piece of
text that holds a bidi control sits in a <bdi> (or, in the <title>, is isolated and stripped of its
controls), so it cannot reorder the text around it, and the markup in data arrives escaped.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from html.parser import HTMLParser

import httpx
import pytest

from firesafe import App
from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer

RLO = "\u202e"
#: What an attacker writes so that "gpj.exe" reads "exe.jpg", plus an isolate left open and HTML.
HOSTILE = f"invoice {RLO}gpj.exe \u2067open <script>alert(1)</script> [bold]"
BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Isolation(HTMLParser):
    """The text nodes of a page that hold a bidi control outside any <bdi>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.loose: list[tuple[str, str]] = []
        self.isolated = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.open:
            while self.open.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if not BIDI.search(data):
            return
        if "bdi" in self.open:
            self.isolated += 1
        elif self.open and self.open[-1] == "title" and re.fullmatch(
                "[^\u202a-\u202e\u2066-\u2069]*\u2068[^\u202a-\u202e\u2066-\u2069]*\u2069[^\u202a-\u202e\u2066-\u2069]*",
                data):
            self.isolated += 1  # the title's data: FSI ... PDI around it, its own controls dropped
        else:
            self.loose.append(("/".join(self.open), data))


def isolation(html: str) -> Isolation:
    parser = Isolation()
    parser.feed(html)
    parser.close()
    return parser


@pytest.fixture
def hostile(store_url: str) -> Iterator[tuple[App, str]]:
    app = App(store_url)

    @app.job(max_attempts=1, queue="payments")
    def charge(ctx, note: str) -> None:
        raise RuntimeError(HOSTILE)

    @app.job(queue="payments")
    def refund(ctx, note: str) -> dict:
        return {"note": HOSTILE}

    charge.enqueue(HOSTILE, key="charge:1")
    charge.enqueue("x", key="charge:2")
    refund.enqueue(HOSTILE, key="refund:1")
    app.work(burst=True)
    app.dlq.replay(["charge:1"], actor=f"ops {RLO}nimda")
    app.work(burst=True)
    if store_url.startswith("sqlite:///"):  # a key the API refuses, written into the store by hand
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            db.execute("UPDATE firesafe_jobs SET key = ?, reason = ? WHERE key = 'charge:2'",
                       (f"charge:{RLO}3", f"exhausted {RLO}"))
    with BackgroundServer(create_app(app)) as server:
        yield app, server.url
    app.close()


def test_every_page_isolates_bidi_overrides_and_escapes_markup(hostile: tuple[App, str]) -> None:
    app, url = hostile
    pages = ["/", "/jobs", "/jobs?state=dead", "/dead", "/job?key=charge%3A1", "/job?key=refund%3A1"]
    with httpx.Client(base_url=url, timeout=10) as c:
        for path in pages:
            r = c.get(path)
            assert r.status_code == 200, (path, r.text[:300])
            found = isolation(r.text)
            assert not found.loose, (path, found.loose)
            assert "<script>alert(1)" not in r.text, path
            assert path == "/" or ("&lt;script&gt;alert(1)" in r.text and "[bold]" in r.text), path
        job = c.get("/job", params={"key": "charge:1"}).text
        assert isolation(job).isolated >= 5  # arguments, last error, attempts, traceback, the actor
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in job
        assert re.search("<title>Job \u2068charge:1\u2069 ·", job)
        if app.store_url.startswith("sqlite:///"):
            listing = c.get("/dead").text
            assert re.search(f"<bdi><a class=\"key\" [^>]*>charge:{RLO}3</a></bdi>", listing)
            assert f"<bdi>exhausted {RLO}</bdi>" in listing


def test_a_title_drops_bidi_controls_and_isolates_the_rest() -> None:
    from firesafe.dashboard.web import isolate

    assert isolate(f"k{RLO}1\u2069") == "\u2068k1\u2069"
