"""The dashboard in a real browser: Playwright driving Debian's headless Chromium (never downloaded).

Each test serves the dashboard with uvicorn on 127.0.0.1 and uses a SQLite store in tmp_path.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer
from firesafe.states import State
from tests.dashboard.appdef import XSS_IMG, XSS_SCRIPT, make_app, populate, worker_thread
from tests.dashboard.conftest import CHROMIUM, CHROMIUM_ARGS, TOKEN
from tests.dashboard.procs import dashboard, write_app


@pytest.fixture
def story(sqlite_url: str) -> Iterator[tuple[Any, dict[str, bool]]]:
    app, fix = make_app(sqlite_url)
    populate(app)
    yield app, fix
    app.close()


def watch_console(page: Any) -> list[str]:
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    return problems


def test_open_dead_letters_inspect_the_trace_replay_and_see_it_succeed(story: Any, page: Any) -> None:
    app, fix = story
    problems = watch_console(page)
    with BackgroundServer(create_app(app)) as server, worker_thread(app):
        page.goto(server.url + "/dead")
        assert "provider timed out refunding r-0" in page.inner_text("#results")
        page.click("a.key:text-is('refund:r-0')")
        page.wait_for_selector("#timeline")
        timeline = page.inner_text("#timeline")
        errors = page.locator("#timeline p.err").all_inner_texts()  # every attempt, newest first
        assert errors == ["TimeoutError: provider timed out refunding r-0"] * 3
        assert "run 3" in timeline and "run 1" in timeline
        assert "Traceback (most recent call last)" in page.inner_text("#timeline details[open] pre")
        assert "dead" in page.inner_text("#job-state")

        fix["refunds"] = True  # the provider is fixed
        page.click("#replay-button")
        page.wait_for_selector("#confirm-panel")
        panel = page.inner_text("#confirm-panel")
        assert "Replay 1 job?" in panel and "Dry run: nothing has changed yet" in panel
        assert app.get("refund:r-0").state == State.DEAD  # the preview changed nothing
        page.click("#confirm-button")
        page.wait_for_selector("#result")
        assert "Replayed 1 job" in page.inner_text("#result")
        page.click("#back-to-job")
        deadline = time.monotonic() + 15
        while "succeeded" not in page.inner_text("#job-state"):
            assert time.monotonic() < deadline, "the replayed job did not succeed"
            page.wait_for_timeout(100)
            page.reload()
        assert '"refunded": 40' in page.inner_text("#result")
        assert "replayed" in page.inner_text("#events") and "dashboard@127.0.0.1" in page.inner_text("#events")
        assert "succeeded" in page.inner_text("#timeline")
    assert app.get("refund:r-1").state == State.DEAD
    assert page.dialogs == [] and problems == [], problems


def test_script_payloads_render_as_text(story: Any, page: Any) -> None:
    app, _ = story
    problems = watch_console(page)
    key = f"render:{XSS_IMG}"
    with BackgroundServer(create_app(app)) as server:
        for path in ("/dead", "/jobs", "/", f"/job?key={quote(key)}"):
            page.goto(server.url + path)
            page.wait_for_load_state("networkidle")
            assert page.evaluate("window.__pwned") is None, path
            assert page.locator("img").count() == 0, path
            assert page.locator("script").count() == 2, path  # htmx and ours, both from /static
        assert json.dumps(XSS_SCRIPT + XSS_IMG, ensure_ascii=False) in page.inner_text("#arguments")
        assert f"ValueError: cannot render {XSS_SCRIPT}{XSS_IMG}" in page.inner_text("#timeline")
        assert key in page.inner_text("h1.key-title")
        page.goto(server.url + "/dead")
        assert f"cannot render {XSS_SCRIPT}" in page.inner_text("#results")
        page.get_by_label(f"select {key}", exact=True).check()  # the payload as a form value, posted back
        page.click("#selection button[value=replay]")
        page.wait_for_selector("#confirm-panel")
        assert key in page.inner_text("#confirm-panel")
        assert page.evaluate("window.__pwned") is None
    assert page.dialogs == [] and problems == [], problems


def test_a_cross_origin_post_without_the_csrf_token_changes_nothing(story: Any, page: Any) -> None:
    app, _ = story
    key = "charge:bad-0"
    with BackgroundServer(create_app(app)) as server:
        target = server.url + "/dead/apply"

        def evil(request: Any) -> HTMLResponse:  # another origin (another port) attacking the dashboard
            csrf = request.query_params.get("csrf", "")
            field = f'<input name="csrf" value="{csrf}">' if csrf else ""
            return HTMLResponse(f"""<!doctype html><title>prize</title>
<form id="f" method="post" action="{target}">
  <input name="action" value="replay"><input name="scope" value="keys">
  <input name="key" value="{key}"><input name="expect" value="1">{field}
</form>
<script>
  fetch("{target}", {{method: "POST", mode: "no-cors", credentials: "include",
    headers: {{"Content-Type": "application/x-www-form-urlencoded"}},
    body: "action=replay&scope=keys&key={quote(key)}&expect=1"}})
    .finally(function () {{ document.getElementById("f").submit(); }});
</script>""")

        with BackgroundServer(Starlette(routes=[Route("/", evil)])) as attacker:
            assert attacker.url != server.url
            page.goto(server.url + "/dead")  # the victim has the dashboard open: its cookie is set
            for query in ("", "?csrf=" + "a" * 64):
                statuses: list[int] = []
                page.on("response", lambda r, s=statuses: s.append(r.status) if r.url == target else None)
                with page.expect_navigation(url=target):
                    page.goto(attacker.url + "/" + query)
                page.wait_for_load_state()
                assert "nothing changed" in page.inner_text("body")
                assert statuses and set(statuses) == {403}, statuses
    job = app.get(key)
    assert job.state == State.DEAD and job.events == []


def statuses_of(page: Any, url: str) -> set[int]:
    """The statuses the browser got navigating to ``url`` (Chromium ends a navigation answered by an
    auth challenge it has no credentials for with ERR_INVALID_AUTH_CREDENTIALS; the 401 is still seen)."""
    from playwright.sync_api import Error

    seen: list[int] = []

    def record(response: Any) -> None:
        if response.url == url:
            seen.append(response.status)

    page.on("response", record)
    try:
        response = page.goto(url)
        if response is not None:
            seen.append(response.status)
    except Error as exc:
        if "ERR_INVALID_AUTH_CREDENTIALS" not in str(exc):
            raise
    finally:
        page.remove_listener("response", record)
    return set(seen)


def test_without_the_token_every_page_answers_401_on_a_non_loopback_bind(tmp_path: Path, browser: Any) -> None:
    target = write_app(tmp_path, f"sqlite:///{tmp_path}/jobs.db")
    secret = TOKEN.split(":", 1)[1]
    with dashboard([target, "--host", "0.0.0.0"], tmp_path, FIRESAFE_DASHBOARD_TOKEN=TOKEN) as d:
        anonymous = browser.new_context()
        page = anonymous.new_page()
        for path in ("/", "/jobs", "/dead", "/job?key=x", "/schedules", "/alerts", "/metrics", "/healthz",
                     "/static/dashboard.js", "/nowhere"):
            assert statuses_of(page, d.url + path) == {401}, path
        anonymous.close()
        authorised = browser.new_context(http_credentials={"username": "ops", "password": secret})
        page = authorised.new_page()
        response = page.goto(d.url + "/")
        assert response is not None and response.status == 200
        assert page.inner_text("h1") == "Overview"
        authorised.close()


def test_screenshots_of_the_main_pages(tmp_path: Path, browser: Any) -> None:
    from tests.dashboard.screenshots import take

    saved = take(tmp_path, browser, minutes=8)
    assert len(saved) == 7
    for path in saved:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, path



PUBLIC_NAME = "ops.example.com"


@pytest.fixture(scope="module")
def proxied_browser(playwright: Any) -> Iterator[Any]:
    """Chromium resolving ops.example.com to 127.0.0.1, where the TLS proxy listens."""
    b = playwright.chromium.launch(executable_path=CHROMIUM,
                                   args=[*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {PUBLIC_NAME} 127.0.0.1"])
    yield b
    b.close()


def try_replay(browser: Any, base: str) -> dict[str, Any]:
    """An operator replays refund:r-0 from its page at ``base``: the statuses of the preview and
    the confirmation (None if it never came to that), the result, and the cookies kept."""
    secret = TOKEN.split(":", 1)[1]
    context = browser.new_context(ignore_https_errors=True, http_credentials={"username": "ops", "password": secret})
    context.set_default_timeout(15_000)
    page = context.new_page()
    out: dict[str, Any] = {"preview": None, "apply": None, "text": ""}
    try:
        response = page.goto(f"{base}/job?key={quote('refund:r-0')}")
        assert response is not None and response.status == 200 and "dead" in page.inner_text("#job-state")
        with page.expect_response(lambda r: r.url.endswith("/dead/preview")) as preview:
            page.click("#replay-button")
        out["preview"], out["text"] = preview.value.status, preview.value.text()
        if out["preview"] == 200:
            page.wait_for_selector("#confirm-panel")
            with page.expect_response(lambda r: r.url.endswith("/dead/apply")) as apply:
                page.click("#confirm-button")
            out["apply"] = apply.value.status
            page.wait_for_selector("#result")
            out["text"] = page.inner_text("#result")
        out["cookies"] = {c["name"]: c for c in context.cookies()}
        return out
    finally:
        context.close()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_behind_a_tls_proxy_that_rewrites_host_actions_work_with_the_public_url(
        story: Any, proxied_browser: Any, tmp_path: Path) -> None:
    """Given the dashboard behind a TLS proxy that passes ``Host: 127.0.0.1:PORT`` upstream
    (nginx's default); when an operator replays a job at https://ops.example.com:PORT; then the
    strict default refuses the https origin, and with ``public_url`` the replay is done, recorded
    with its actor, and the CSRF cookie is Secure."""
    from tests.dashboard.tlsproxy import TLSProxy, self_signed

    app, _ = story
    cert, key = self_signed(tmp_path, PUBLIC_NAME)
    with TLSProxy(cert, key, rewrite_host=True) as proxy:
        public = f"https://{PUBLIC_NAME}:{proxy.port}"
        with BackgroundServer(create_app(app, token=TOKEN)) as plain:
            proxy.upstream_port = port_of(plain.url)
            refused = try_replay(proxied_browser, public)
        assert refused["preview"] == 403 and "Origin does not match" in refused["text"]
        assert app.get("refund:r-0").state == State.DEAD
        with BackgroundServer(create_app(app, token=TOKEN, public_url=public)) as dashboard_server:
            proxy.upstream_port = port_of(dashboard_server.url)
            done = try_replay(proxied_browser, public)
        assert (done["preview"], done["apply"]) == (200, 200) and "Replayed 1 job" in done["text"], done
        assert done["cookies"]["firesafe_csrf"]["secure"] is True
        assert all(b"host: 127.0.0.1:" in head.lower() for head in proxy.requests)  # Host was rewritten
    assert app.get("refund:r-0").state == State.QUEUED
    assert ("replayed", "ops (dashboard@127.0.0.1)") in [(e.kind, e.actor) for e in app.get("refund:r-0").events]


def test_behind_a_tls_proxy_actions_work_with_its_forwarded_headers_when_trusted(
        story: Any, proxied_browser: Any, tmp_path: Path) -> None:
    """Given a TLS proxy that keeps the browser's Host and adds X-Forwarded-Proto/-For; then they
    are ignored by default (refused: the scheme is not the browser's), and believed from the
    proxies named in ``forwarded_allow_ips``: the replay is done, its actor is the browser's
    address as the proxy gave it, and the cookie is Secure."""
    from tests.dashboard.tlsproxy import TLSProxy, self_signed

    app, _ = story
    cert, key = self_signed(tmp_path, PUBLIC_NAME)
    with TLSProxy(cert, key, forwarded_for="198.51.100.7") as proxy:
        public = f"https://{PUBLIC_NAME}:{proxy.port}"
        with BackgroundServer(create_app(app, token=TOKEN)) as plain:
            proxy.upstream_port = port_of(plain.url)
            ignored = try_replay(proxied_browser, public)
        assert ignored["preview"] == 403 and "Origin does not match" in ignored["text"]
        assert ignored["cookies"]["firesafe_csrf"]["secure"] is False
        with BackgroundServer(create_app(app, token=TOKEN), forwarded_allow_ips="127.0.0.1") as trusted:
            proxy.upstream_port = port_of(trusted.url)
            done = try_replay(proxied_browser, public)
        assert (done["preview"], done["apply"]) == (200, 200) and "Replayed 1 job" in done["text"], done
    assert app.get("refund:r-0").state == State.QUEUED
    assert ("replayed", "ops (dashboard@198.51.100.7)") in [(e.kind, e.actor) for e in app.get("refund:r-0").events]
