"""The dashboard over real HTTP (uvicorn on 127.0.0.1), on SQLite and PostgreSQL.

Given a store with successes, dead letters, steps and script payloads; when pages and actions are
requested; then they render what the store holds, escape it, validate every parameter, and change
nothing without a same-origin form carrying the CSRF token.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer
from firesafe.states import State
from tests.dashboard.appdef import XSS_IMG, XSS_SCRIPT
from tests.dashboard.conftest import TOKEN, form_of

PAGES = ["/", "/jobs", "/jobs?state=dead", "/dead", "/dead?job=charge&error=RuntimeError",
         "/job?key=sync%3A2026-11-30", "/schedules", "/alerts", "/healthz", "/metrics"]


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert m, "no CSRF field in the page"
    return m.group(1)


def client(url: str, **kw: Any) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=10, **kw)


def events(app: Any, key: str) -> list[tuple[str, str | None]]:
    return [(e.kind, e.actor) for e in app.get(key).events]


def test_every_page_renders_what_the_store_holds(served: tuple[Any, Any, str]) -> None:
    _, _, url = served
    with client(url) as c:
        for path in PAGES:
            r = c.get(path)
            assert r.status_code == 200, (path, r.text[:500])
        overview = c.get("/").text
        assert "Throughput, last hour" in overview and "<svg" in overview
        assert 'class="bar ok"' in overview and 'class="bar failed"' in overview  # the last hour's attempts
        dead = c.get("/dead").text
        assert re.search(r">(<bdi>)?charge(</bdi>)?</a></td>\s*<td><a [^>]*>(<bdi>)?RuntimeError(</bdi>)?</a></td>\s*"
                         r"<td class=\"num\">3</td>", dead)
        job = c.get("/job", params={"key": "sync:2026-11-30"}).text
        assert "the warehouse API rejected the upload (HTTP 422)" in job and "Traceback" in job
        assert re.search(r"<td>(<bdi>)?fetch(</bdi>)?</td>\s*<td><span class=\"step st-done\">done", job)
        assert re.search(r"<td>(<bdi>)?transform(</bdi>)?</td>\s*<td><span class=\"step st-done\">done", job)
        charge = c.get("/job", params={"key": "charge:bad-0"}).text
        assert "card declined" in charge and "api_key" in charge
        for path in ["/jobs", "/dead", "/job?key=charge%3Abad-0", "/job?key=charge%3Ao-1"]:
            assert "sk_live_secret" not in c.get(path).text, path  # secrets masked everywhere


def test_listing_filters_and_a_capped_page_size(served: tuple[Any, Any, str]) -> None:
    _, _, url = served
    with client(url) as c:
        page = c.get("/jobs", params={"state": "succeeded", "size": 5}).text
        assert page.count('class="badge s-succeeded"') == 5 and "1\u20135 of 6" in page
        page2 = c.get("/jobs", params={"state": "succeeded", "size": 5, "page": 2}).text
        assert page2.count('class="badge s-succeeded"') == 1 and "6\u20136 of 6" in page2
        big = c.get("/jobs", params={"size": 1_000_000}).text
        assert '<option value="200" selected>' in big  # capped, not refused
        dead = c.get("/jobs", params={"state": "dead", "queue": "payments", "error": "TimeoutError"}).text
        assert dead.count('class="badge s-dead"') == 2 and "refund:r-0" in dead and "charge:bad-0" not in dead
        recent = c.get("/jobs", params={"since": "1h", "job": "refund"}).text
        assert "refund:r-1" in recent
        assert "No job matches" in c.get("/jobs", params={"until": "2000-01-01"}).text


BAD_PARAMS = [
    {"state": "zombie"}, {"job": "x' OR 1=1 --"}, {"queue": "a;DROP TABLE firesafe_jobs"},
    {"error": "Value Error"}, {"size": "abc"}, {"page": "0"}, {"since": "yesterday"}, {"until": "1e309"},
    {"job": "x" * 400},
]


def test_bad_query_parameters_are_a_clear_400(served: tuple[Any, Any, str]) -> None:
    app, _, url = served
    before = app.store.job_count(_all())
    with client(url) as c:
        for params in BAD_PARAMS:
            for path in ("/jobs", "/dead"):
                if path == "/dead" and "state" in params:
                    continue  # the dead letters page is always state=dead
                r = c.get(path, params=params)
                assert r.status_code == 400, (path, params)
                assert "That did not work" in r.text
        assert c.get("/job").status_code == 400
        assert c.get("/job", params={"key": "\x00"}).status_code in (400, 404)
        assert c.get("/job", params={"key": "k" * 300}).status_code == 400
    assert app.store.job_count(_all()) == before


def _all() -> Any:
    from firesafe.store.base import JobFilter

    return JobFilter()


def test_payloads_are_escaped_in_the_html(served: tuple[Any, Any, str]) -> None:
    _, _, url = served
    with client(url) as c:
        for path in ("/dead", "/jobs", "/job?" + httpx.QueryParams({"key": f"render:{XSS_IMG}"}).__str__()):
            html = c.get(path).text
            assert XSS_SCRIPT not in html and XSS_IMG not in html and "<img src=x" not in html, path
            assert "&lt;script&gt;window.__pwned" in html or "&lt;img src=x" in html, path


def test_security_headers_on_every_response(served: tuple[Any, Any, str]) -> None:
    _, _, url = served
    with client(url) as c:
        for path in [*PAGES, "/static/htmx.min.js", "/static/dashboard.css", "/job?key=nope", "/jobs?state=x",
                     "/no-such-page"]:
            r = c.get(path)
            csp = r.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp, path
            assert "frame-ancestors 'none'" in csp
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["x-frame-options"] == "DENY"
        html = c.get("/").text
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "an inline script"
        assert " style=" not in html and " on" + "click=" not in html


def test_replay_one_dead_job_with_a_confirmation_recorded_with_its_actor(served: tuple[Any, Any, str]) -> None:
    app, fix, url = served
    with client(url) as c:
        token = csrf_of(c.get("/dead").text)
        preview = c.post("/dead/preview", data={"csrf": token, "action": "replay", "scope": "keys",
                                                "key": "refund:r-0"})
        assert preview.status_code == 200
        assert "Replay 1 job?" in preview.text and "Dry run: nothing has changed yet" in preview.text
        assert app.get("refund:r-0").state == State.DEAD  # a preview changes nothing
        done = c.post("/dead/apply", data=form_of(preview.text))
        assert done.status_code == 200 and "Replayed 1 job" in done.text
    job = app.get("refund:r-0")
    assert job.state == State.QUEUED
    assert ("replayed", "dashboard@127.0.0.1") in events(app, "refund:r-0")
    fix["refunds"] = True
    app.work(burst=True)
    assert app.get("refund:r-0").state == State.SUCCEEDED
    assert app.get("refund:r-1").state == State.DEAD  # only the one asked for


def test_bulk_discard_by_filter_asks_again_when_the_set_changed(served: tuple[Any, Any, str]) -> None:
    app, _, url = served
    form = {"action": "discard", "scope": "filter", "job": "charge", "error": "RuntimeError"}
    with client(url) as c:
        token = csrf_of(c.get("/dead").text)
        preview = c.post("/dead/preview", data={"csrf": token, **form})
        assert "Discard 3 jobs?" in preview.text and 'name="expect" value="3"' in preview.text
        confirm = form_of(preview.text)
        stale = c.post("/dead/apply", data={**confirm, "digest": "0" * 64})  # a preview of other jobs
        assert "changed since the preview" in stale.text
        unconfirmed = c.post("/dead/apply", data={"csrf": token, **form, "expect": "3"})  # no preview at all
        assert "changed since the preview" in unconfirmed.text
        assert app.dlq.count(job="charge") == 3  # nothing changed
        done = c.post("/dead/apply", data=confirm)
        assert "Discarded 3 jobs" in done.text
    assert app.dlq.count(job="charge") == 0
    for i in range(3):
        job = app.get(f"charge:bad-{i}")
        assert job.state == State.CANCELLED and job.reason == "discarded"
        assert ("discarded", "dashboard@127.0.0.1") in events(app, f"charge:bad-{i}")
    assert app.dlq.count() == 4  # the other groups stay


def test_a_selection_of_keys(served: tuple[Any, Any, str]) -> None:
    app, _, url = served
    with client(url) as c:
        token = csrf_of(c.get("/dead").text)
        keys = ["charge:bad-0", "charge:bad-1", "charge:o-1"]  # the last one is not dead
        preview = c.post("/dead/preview", data={"csrf": token, "action": "replay", "scope": "keys", "key": keys})
        assert "Replay 2 jobs?" in preview.text and "charge:o-1" in preview.text  # listed as left out
        done = c.post("/dead/apply", data=form_of(preview.text))
        assert "Replayed 2 jobs" in done.text
        missing = c.post("/dead/preview", data={"csrf": token, "action": "replay", "scope": "keys",
                                                "key": "no-such-key"})
        assert missing.status_code == 400 and "no job with key" in missing.text
        none = c.post("/dead/preview", data={"csrf": token, "action": "replay", "scope": "keys"})
        assert none.status_code == 400
    assert [app.get(k).state for k in keys] == [State.QUEUED, State.QUEUED, State.SUCCEEDED]


def test_state_changes_need_post_same_origin_and_the_csrf_token(served: tuple[Any, Any, str]) -> None:
    app, _, url = served
    key = "charge:bad-0"
    form = {"action": "replay", "scope": "keys", "key": key, "expect": "1"}
    with client(url) as c:
        token = csrf_of(c.get("/dead").text)
        attempts = [
            c.post("/dead/apply", data=form),  # no token
            c.post("/dead/apply", data={**form, "csrf": "0" * 64}),  # a forged one
            c.post("/dead/apply", data={**form, "csrf": token}, headers={"origin": "http://evil.example"}),
            c.post("/dead/apply", data={**form, "csrf": token}, headers={"sec-fetch-site": "cross-site"}),
            c.post("/dead/apply", data={**form, "csrf": token}, headers={"sec-fetch-site": "same-site"}),
            c.post("/dead/apply", json={**form, "csrf": token}),
        ]
        assert [r.status_code for r in attempts] == [403] * len(attempts)
        assert all("nothing changed" in r.text for r in attempts)
        assert c.get("/dead/apply").status_code == 405
        with client(url) as other:  # another browser: its own cookie, so this page's token is not valid
            other.get("/")
            assert other.post("/dead/apply", data={**form, "csrf": token}).status_code == 403
    assert app.get(key).state == State.DEAD and events(app, key) == []


def test_a_token_guards_every_path_and_names_the_actor(story: tuple[Any, Any]) -> None:
    app, _ = story
    with BackgroundServer(create_app(app, token=TOKEN)) as server:
        secret = TOKEN.split(":", 1)[1]
        with client(server.url) as c:
            for path in [*PAGES, "/static/htmx.min.js", "/no-such-page"]:
                r = c.get(path)
                assert r.status_code == 401, path
                assert r.headers["www-authenticate"].startswith("Basic")
            assert c.post("/dead/apply", data={"action": "replay"}).status_code == 401
            assert c.get("/", headers={"authorization": "Bearer wrong-wrong-wrong-wrong"}).status_code == 401
        basic = "Basic " + base64.b64encode(f"anyone:{secret}".encode()).decode()
        with client(server.url, headers={"authorization": basic}) as c:
            assert all(c.get(p).status_code == 200 for p in PAGES)
            token = csrf_of(c.get("/dead").text)
            preview = c.post("/dead/preview", data={"csrf": token, "action": "replay", "scope": "keys",
                                                    "key": "render:" + XSS_IMG})
            done = c.post("/dead/apply", data=form_of(preview.text))
            assert done.status_code == 200 and "Replayed 1 job" in done.text
        with client(server.url, headers={"authorization": f"Bearer {secret}"}) as c:
            assert c.get("/metrics").status_code == 200
    assert ("replayed", "ops (dashboard@127.0.0.1)") in events(app, "render:" + XSS_IMG)


def test_without_a_token_only_loopback_host_names_are_served(served: tuple[Any, Any, str]) -> None:
    _, _, url = served
    port = url.rsplit(":", 1)[1]
    with client(url) as c:
        assert c.get("/", headers={"host": f"localhost:{port}"}).status_code == 200
        r = c.get("/", headers={"host": f"attacker.example:{port}"})  # DNS rebinding
        assert r.status_code == 403 and "loopback" in r.text


def test_metrics_in_prometheus_format(served: tuple[Any, Any, str]) -> None:
    _, _, url = served
    with client(url) as c:
        r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(r.text) for s in fam.samples}

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("firesafe_store_up") == 1
    assert value("firesafe_jobs", queue="payments", state="succeeded") == 6
    assert value("firesafe_jobs", queue="payments", state="dead") == 5
    assert value("firesafe_jobs", queue="default", state="dead") == 2
    assert value("firesafe_jobs", queue="payments", state="queued") == 0
    assert value("firesafe_dead_letters", job="charge", error_type="RuntimeError") == 3
    assert value("firesafe_dead_letters", job="refund", error_type="TimeoutError") == 2
    assert value("firesafe_dead_letters_size") == 7
    assert value("firesafe_attempts", job="charge", outcome="succeeded") == 6
    assert value("firesafe_attempts", job="charge", outcome="failed") == 6  # 3 poison jobs x 2 attempts
    assert value("firesafe_attempt_failures", job="refund") == 6
    assert value("firesafe_queue_lag_seconds", queue="payments") == 0
    assert ("firesafe_workers", ()) in samples


def test_healthz(served: tuple[Any, Any, str]) -> None:
    app, _, url = served
    with client(url) as c:
        body = c.get("/healthz").json()
    assert body["status"] == "ok" and body["store"] == app.store.dialect and body["schema_version"] >= 1


def test_apply_acts_only_on_the_jobs_the_preview_showed(served: tuple[Any, Any, str]) -> None:
    """Given a preview of 3 dead jobs, when a colleague discards one and another job dies (still 3
    matching, but not the same 3), then confirming acts on nothing and shows the new set."""
    app, _, url = served
    form = {"action": "discard", "scope": "filter", "job": "charge", "error": "RuntimeError"}
    with client(url) as c:
        token = csrf_of(c.get("/dead").text)
        preview = c.post("/dead/preview", data={"csrf": token, **form})
        assert "Discard 3 jobs?" in preview.text and "charge:bad-9" not in preview.text
        app.dlq.discard(keys=["charge:bad-0"], actor="colleague")
        app.jobs["charge"].enqueue("bad-9", 5, "sk_live_secret", key="charge:bad-9")
        app.work(burst=True, wait_scheduled=True)
        assert sorted(app.dlq.replay(job="charge", dry_run=True).keys) == ["charge:bad-1", "charge:bad-2",
                                                                          "charge:bad-9"]
        again = c.post("/dead/apply", data=form_of(preview.text))
        assert again.status_code == 200
        assert "changed since the preview" in again.text and "not the same jobs" in again.text
        assert "Discard 3 jobs?" in again.text and "charge:bad-9" in again.text  # the new set, shown
        assert app.get("charge:bad-9").state == State.DEAD and app.dlq.count(job="charge") == 3  # untouched
        done = c.post("/dead/apply", data=form_of(again.text))  # confirmed, having seen it
        assert "Discarded 3 jobs" in done.text
    assert app.dlq.count(job="charge") == 0
    assert ("discarded", "dashboard@127.0.0.1") in events(app, "charge:bad-9")
    assert ("discarded", "colleague") in events(app, "charge:bad-0")


def _sql(store_url: str, *statements: str) -> None:
    """Run statements on the store behind the app's back (as another tool or a DBA would)."""
    if store_url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(store_url[len("sqlite:///"):])
        try:
            for statement in statements:
                conn.execute(statement)
            conn.commit()
        finally:
            conn.close()
        return
    import psycopg

    base, _, query = store_url.partition("?")
    schema = dict(p.split("=", 1) for p in query.split("&"))["schema"]
    with psycopg.connect(base, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.replace("{schema}", schema))


def test_healthz_is_503_without_the_firesafe_tables(store_url: str) -> None:
    from firesafe import App

    app = App(store_url, auto_migrate=False)  # a store nobody migrated
    try:
        with BackgroundServer(create_app(app)) as server, client(server.url) as c:
            r = c.get("/healthz")
            assert r.status_code == 503, r.text
            body = r.json()
            assert body["status"] != "ok" and body["schema_version"] == 0
            assert "no firesafe tables" in body["error"] and "firesafe migrate" in body["error"]
            assert c.get("/dead").status_code == 503  # as the pages say
    finally:
        app.close()


def test_healthz_is_503_when_the_schema_is_older_or_gone_mid_run(served: tuple[Any, Any, str],
                                                                  store_url: str) -> None:
    _, _, url = served
    with client(url) as c:
        ok = c.get("/healthz")
        assert ok.status_code == 200 and ok.json()["status"] == "ok"
        newest = ok.json()["schema_version"]
        table = "firesafe_migrations" if store_url.startswith("sqlite") else '"{schema}".firesafe_migrations'
        _sql(store_url, f"DELETE FROM {table} WHERE version = {newest}")  # as if an older firesafe made it
        older = c.get("/healthz")
        assert older.status_code == 503, older.text
        from firesafe.store.queries import migrations

        before = max(v for v, _ in migrations("sqlite" if store_url.startswith("sqlite") else "postgres")
                     if v < newest)  # the numbers may have gaps (a number reserved for another change)
        assert older.json()["status"] != "ok" and older.json()["schema_version"] == before
        assert f"older than this firesafe needs (version {newest})" in older.json()["error"]
        if store_url.startswith("sqlite"):
            _sql(store_url, "DROP TABLE firesafe_migrations")
        else:
            _sql(store_url, 'DROP SCHEMA "{schema}" CASCADE')  # dropped under a running dashboard
        gone = c.get("/healthz")
        assert gone.status_code == 503 and gone.json()["status"] != "ok", gone.text
        assert "no firesafe tables" in gone.json()["error"]
