"""`firesafe dashboard` as users run it: a real process, real HTTP on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.dashboard.conftest import TOKEN
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
