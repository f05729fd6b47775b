"""`firesafe dashboard` as users run it: a real process, real HTTP on 127.0.0.1."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.dashboard.appdef import make_app, populate
from tests.dashboard.conftest import TOKEN, form_of
from tests.dashboard.procs import dashboard, run, write_app

PATHS = ["/", "/jobs", "/dead", "/job?key=x", "/schedules", "/alerts", "/metrics", "/healthz", "/static/htmx.min.js"]


def test_binds_loopback_by_default_without_a_token(tmp_path: Path) -> None:
    target = write_app(tmp_path, f"sqlite:///{tmp_path}/jobs.db")
    with dashboard([target], tmp_path) as d:
        assert "Uvicorn running on http://127.0.0.1:" in d.log.read_text()
        assert "no token: loopback only" in d.log.read_text()
        r = httpx.get(d.url + "/healthz", timeout=10)
        assert r.status_code == 200 and r.json()["status"] == "ok"


def test_refuses_a_non_loopback_bind_without_a_token(tmp_path: Path) -> None:
    target = write_app(tmp_path, f"sqlite:///{tmp_path}/jobs.db")
    for host in ("0.0.0.0", "::", "192.0.2.1"):
        r = run(["dashboard", target, "--host", host, "--port", "0"], tmp_path)
        assert r.returncode == 1, r.stderr
        assert "refusing to serve the dashboard" in r.stderr and "without a token" in r.stderr
        assert "Traceback" not in r.stderr and "Uvicorn running" not in r.stderr + r.stdout


def test_a_weak_token_is_refused(tmp_path: Path) -> None:
    target = write_app(tmp_path, f"sqlite:///{tmp_path}/jobs.db")
    r = run(["dashboard", target, "--host", "0.0.0.0", "--token", "secret"], tmp_path)
    assert r.returncode == 1 and "too short" in r.stderr and "Traceback" not in r.stderr


def test_a_non_loopback_bind_answers_401_without_the_token(tmp_path: Path) -> None:
    target = write_app(tmp_path, f"sqlite:///{tmp_path}/jobs.db")
    with dashboard([target, "--host", "0.0.0.0"], tmp_path, FIRESAFE_DASHBOARD_TOKEN=TOKEN) as d:
        log = d.log.read_text()
        assert "token required (actor ops)" in log and TOKEN.split(":")[1] not in log
        with httpx.Client(base_url=d.url, timeout=10) as c:
            for path in PATHS:
                assert c.get(path).status_code == 401, path
            assert c.post("/dead/apply", data={"action": "replay"}).status_code == 401
        with httpx.Client(base_url=d.url, timeout=10, auth=("ops", TOKEN.split(":")[1])) as c:
            assert c.get("/healthz").status_code == 200
            assert c.get("/").status_code == 200


def test_an_unimportable_app_is_a_clear_error(tmp_path: Path) -> None:
    r = run(["dashboard", "nosuchmodule:app", "--port", "0"], tmp_path)
    assert r.returncode == 1 and "cannot import 'nosuchmodule'" in r.stderr and "Traceback" not in r.stderr


def _cookie(response: httpx.Response) -> str:
    m = re.search(r"firesafe_csrf=([\w-]+)", response.headers["set-cookie"])
    assert m, response.headers["set-cookie"]
    return m.group(1)


def _populated(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/jobs.db"
    app, _ = make_app(url)
    populate(app, xss=False)
    app.close()
    return write_app(tmp_path, url)


def test_behind_a_tls_proxy_with_the_public_url(tmp_path: Path) -> None:
    """Given `--public-url https://ops.example.com` (a TLS proxy in front, passing any Host); then
    a form from that origin acts, the CSRF cookie is Secure, and other origins are refused."""
    target = _populated(tmp_path)
    secret = TOKEN.split(":", 1)[1]
    public = "https://ops.example.com"
    with dashboard([target, "--public-url", public], tmp_path, FIRESAFE_DASHBOARD_TOKEN=TOKEN) as d:
        assert f"published at {public}" in d.log.read_text()
        with httpx.Client(base_url=d.url, timeout=10, auth=("ops", secret)) as c:
            page = c.get("/dead", headers={"host": "ops.example.com"})
            assert page.status_code == 200 and "Secure" in page.headers["set-cookie"]
            browser = {"cookie": f"firesafe_csrf={_cookie(page)}", "host": "ops.example.com",
                       "sec-fetch-site": "same-origin"}
            form = {"csrf": re.search(r'name="csrf" value="(\w+)"', page.text).group(1),  # type: ignore[union-attr]
                    "action": "replay", "scope": "keys", "key": "refund:r-0"}
            for origin in ("http://ops.example.com", "https://evil.example", f"http://{d.url.split('//')[1]}"):
                r = c.post("/dead/preview", data=form, headers={**browser, "origin": origin})
                assert r.status_code == 403 and "Origin does not match" in r.text, origin
            preview = c.post("/dead/preview", data=form, headers={**browser, "origin": public})
            assert preview.status_code == 200 and "Replay 1 job?" in preview.text
            done = c.post("/dead/apply", data=form_of(preview.text), headers={**browser, "origin": public})
            assert done.status_code == 200 and "Replayed 1 job" in done.text


def test_forwarded_headers_are_believed_only_from_the_proxies_named(tmp_path: Path) -> None:
    target = _populated(tmp_path)
    secret = TOKEN.split(":", 1)[1]
    proxied = {"host": "ops.example.com", "x-forwarded-proto": "https", "x-forwarded-for": "198.51.100.7",
               "sec-fetch-site": "same-origin", "origin": "https://ops.example.com"}

    def attempt(args: list[str]) -> tuple[httpx.Response, httpx.Response | None, str]:
        with dashboard([target, *args], tmp_path, FIRESAFE_DASHBOARD_TOKEN=TOKEN) as d, \
                httpx.Client(base_url=d.url, timeout=10, auth=("ops", secret)) as c:
            page = c.get("/dead", headers=proxied)
            headers = {**proxied, "cookie": f"firesafe_csrf={_cookie(page)}"}
            form = {"csrf": re.search(r'name="csrf" value="(\w+)"', page.text).group(1),  # type: ignore[union-attr]
                    "action": "replay", "scope": "keys", "key": "refund:r-0"}
            preview = c.post("/dead/preview", data=form, headers=headers)
            done = c.post("/dead/apply", data=form_of(preview.text), headers=headers) if preview.is_success else None
            return page, done, preview.text

    for args in ([], ["--forwarded-allow-ips", "10.9.9.9,192.0.2.0/24"]):  # not from 127.0.0.1: ignored
        page, done, text = attempt(args)
        assert "Secure" not in page.headers["set-cookie"] and done is None and "Origin does not match" in text
    page, done, _ = attempt(["--forwarded-allow-ips", "127.0.0.1, ::1"])
    assert "Secure" in page.headers["set-cookie"]
    assert done is not None and done.status_code == 200 and "Replayed 1 job" in done.text
    assert "ops (dashboard@198.51.100.7)" in done.text  # the client the proxy named is the actor


def test_proxy_options_are_checked_before_starting(tmp_path: Path) -> None:
    target = write_app(tmp_path, f"sqlite:///{tmp_path}/jobs.db")
    cases = [(["--public-url", "https://ops.example.com"], {}, "needs a token"),
             (["--public-url", "ops.example.com"], {"FIRESAFE_DASHBOARD_TOKEN": TOKEN}, "public URL must look like"),
             (["--public-url", "https://ops.example.com/?x=1"], {"FIRESAFE_DASHBOARD_TOKEN": TOKEN}, "public URL"),
             (["--forwarded-allow-ips", "*"], {}, "addresses of your proxies"),
             (["--forwarded-allow-ips", "proxy.internal"], {}, "addresses of your proxies")]
    for args, env, why in cases:
        r = run(["dashboard", target, *args, "--port", "0"], tmp_path, **env)
        assert r.returncode == 1 and why in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    with dashboard([target, "--public-url", "https://localhost:8443"], tmp_path) as d:  # loopback: no token
        assert httpx.get(d.url + "/healthz", timeout=10).status_code == 200


SERVE_APP = """
from firesafe.inbox import Bearer
from tests.dashboard.appdef import make_app

app, fix = make_app({url!r})
app.event_source("crm", verify=Bearer("a-long-enough-source-token"))
"""


def test_serve_takes_the_same_proxy_options_as_the_dashboard(tmp_path: Path) -> None:
    """`firesafe serve` answers the dashboard's pages too: behind a TLS proxy it needs the same
    --public-url and --forwarded-allow-ips, checked the same way before it starts."""
    _populated(tmp_path)
    (tmp_path / "serveapp.py").write_text(SERVE_APP.format(url=f"sqlite:///{tmp_path}/jobs.db"))
    for args, env, why in [(["--public-url", "https://ops.example.com"], {}, "needs a token"),
                           (["--public-url", "https://ops.example.com", "--no-dashboard"], {}, "no use with"),
                           (["--forwarded-allow-ips", "*"], {}, "addresses of your proxies")]:
        r = run(["serve", "serveapp:app", *args, "--port", "0"], tmp_path, **env)
        assert r.returncode == 1 and why in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    secret = TOKEN.split(":", 1)[1]
    public = "https://ops.example.com"
    # The proxy passes the browser's Host on and says nothing of the scheme: only --public-url tells
    # the https origin; it names the client in X-Forwarded-For, believed from 127.0.0.1 only.
    browser = {"host": "ops.example.com", "sec-fetch-site": "same-origin", "x-forwarded-for": "198.51.100.7"}
    with dashboard(["serveapp:app", "--public-url", public, "--forwarded-allow-ips", "127.0.0.1"], tmp_path,
                   command="serve", FIRESAFE_DASHBOARD_TOKEN=TOKEN) as d:
        assert f"published at {public}; proxy headers from 127.0.0.1" in d.log.read_text()
        with httpx.Client(base_url=d.url, timeout=10, auth=("ops", secret)) as c:
            page = c.get("/dead", headers=browser)
            assert page.status_code == 200 and "Secure" in page.headers["set-cookie"]
            headers = {**browser, "cookie": f"firesafe_csrf={_cookie(page)}"}
            form = {"csrf": re.search(r'name="csrf" value="(\w+)"', page.text).group(1),  # type: ignore[union-attr]
                    "action": "replay", "scope": "keys", "key": "refund:r-0"}
            refused = c.post("/dead/preview", data=form, headers={**headers, "origin": "https://evil.example"})
            assert refused.status_code == 403 and "Origin does not match" in refused.text
            preview = c.post("/dead/preview", data=form, headers={**headers, "origin": public})
            assert preview.status_code == 200 and "Replay 1 job?" in preview.text
            done = c.post("/dead/apply", data=form_of(preview.text), headers={**headers, "origin": public})
            assert done.status_code == 200 and "ops (dashboard@198.51.100.7)" in done.text
        event = httpx.post(d.url + "/events/crm", json={"id": "e-1", "type": "contact.created"}, timeout=10,
                           headers={"authorization": "Bearer a-long-enough-source-token"})
        assert event.status_code == 200 and event.json()["stored"], event.text
