"""The webhook endpoint over real HTTP (uvicorn on 127.0.0.1), on both stores."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import uvicorn

from firesafe import App, Retention, State
from firesafe.inbox import Bearer, Hmac, StripeSignature
from firesafe.inbox.http import create_app

SECRET = "whsec_test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(store_url: str) -> Iterator[tuple[App, str, list]]:
    app = App(store_url)
    handled: list[str] = []
    app.event_source("github", id_header="X-GitHub-Delivery", type_header="X-GitHub-Event", verify=Hmac(SECRET))
    app.event_source("stripe", verify=StripeSignature(SECRET), max_body=4096)
    app.event_source("internal", id_field="meta.id", type_field="kind", verify=Bearer("t0ken"))

    @app.on_event("github", "push")
    def on_push(ctx, event) -> None:
        handled.append(event.id)

    @app.on_event("stripe", "*")
    def on_stripe(ctx, event) -> None:
        handled.append(event.id)

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(app), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    yield app, f"http://127.0.0.1:{port}", handled
    server.should_exit = True
    thread.join(10)
    app.close()


def github_post(base: str, body: bytes, delivery: str = "d-1", secret: str = SECRET, **headers: str) -> httpx.Response:
    sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    h = {"X-GitHub-Delivery": delivery, "X-GitHub-Event": "push", "X-Hub-Signature-256": sig,
         "Content-Type": "application/json", **headers}
    return httpx.post(f"{base}/events/github", content=body, headers=h, timeout=10)


def test_the_same_event_posted_50_times_concurrently_is_one_job_and_one_run(served) -> None:
    app, base, handled = served
    body = json.dumps({"ref": "refs/heads/main"}).encode()
    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(lambda _: github_post(base, body, "delivery-77"), range(50)))
    assert [r.status_code for r in responses] == [200] * 50
    assert sum(r.json()["created"] for r in responses) == 1
    assert {r.json()["job"] for r in responses} == {"github:delivery-77"}
    app.work(burst=True)
    assert handled == ["delivery-77"]
    assert app.get("github:delivery-77").state == State.SUCCEEDED
    assert len(app.inbox.list()) == 1


def test_a_captured_github_body_replayed_under_a_fresh_delivery_id_is_a_duplicate(served) -> None:
    """GitHub's signature covers the body only: X-GitHub-Delivery and X-GitHub-Event can be changed
    by whoever captured a request. The same signed body is the same event, whatever id it carries."""
    app, base, handled = served
    body = json.dumps({"ref": "refs/heads/main", "after": "9f1c"}).encode()
    first = github_post(base, body, "delivery-1")
    assert first.status_code == 200 and first.json()["created"], first.text
    replay = github_post(base, body, "delivery-2")
    assert replay.status_code == 200, replay.text
    assert replay.json() == {"stored": True, "event_id": "delivery-2", "type": "push", "job": "github:delivery-1",
                             "created": False, "duplicate": True, "duplicate_of": "delivery-1"}
    retyped = github_post(base, body, "delivery-3", **{"X-GitHub-Event": "release"})
    assert retyped.status_code == 200 and retyped.json()["duplicate_of"] == "delivery-1"
    with ThreadPoolExecutor(8) as pool:  # fresh ids at once: each is recognised
        many = list(pool.map(lambda n: github_post(base, body, f"delivery-x{n}"), range(16)))
    assert [r.status_code for r in many] == [200] * 16
    assert {r.json().get("duplicate_of") for r in many} == {"delivery-1"}
    other = github_post(base, json.dumps({"ref": "refs/heads/dev"}).encode(), "delivery-4")
    assert other.status_code == 200 and other.json()["created"] and "duplicate_of" not in other.json()
    app.work(burst=True)
    assert sorted(handled) == ["delivery-1", "delivery-4"]
    assert sorted(e["event_id"] for e in app.inbox.list()) == ["delivery-1", "delivery-4"]
    from firesafe.store.base import JobFilter

    assert app.store.job_count(JobFilter()) == 2


def test_which_sources_key_events_by_their_body() -> None:
    from firesafe.inbox import Source

    assert Source("gh", id_header="X-GitHub-Delivery", verify=Hmac("s")).keys_bodies
    assert Source("st", id_header="X-Id", verify=StripeSignature("s")).keys_bodies
    assert not Source("st", verify=StripeSignature("s")).keys_bodies  # the id is in the signed body
    assert not Source("gh", id_field="id", verify=Hmac("s")).keys_bodies
    assert not Source("in", id_header="X-Id", verify=Bearer("t")).keys_bodies  # the token signs nothing
    assert not Source("gh", id_header="X-Id", verify=Hmac("s"), body_digest=False).keys_bodies
    assert Source("in", id_header="X-Id", verify=Bearer("t"), body_digest=True).keys_bodies


def test_a_stripe_style_signed_event(served) -> None:
    app, base, handled = served
    body = json.dumps({"id": "evt_9", "type": "charge.refunded", "data": {"amount": 3}}).encode()
    t = int(time.time())
    mac = hmac.new(SECRET.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    r = httpx.post(f"{base}/events/stripe", content=body, headers={"Stripe-Signature": f"t={t},v1={mac}"})
    assert r.status_code == 200 and r.json()["job"] == "stripe:evt_9"
    app.work(burst=True)
    assert handled == ["evt_9"]


@pytest.mark.parametrize(
    "case, status",
    [("bad signature", 401), ("tampered body", 401), ("no signature", 401), ("missing id", 400),
     ("not json", 400), ("too big", 413), ("unknown source", 404), ("wrong token", 401)],
)
def test_refused_requests_store_nothing(served, case: str, status: int) -> None:
    app, base, _ = served
    body = json.dumps({"ref": "x"}).encode()
    if case == "bad signature":
        r = github_post(base, body, secret="not-the-secret")
    elif case == "tampered body":
        sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        r = httpx.post(f"{base}/events/github", content=body + b" ",
                       headers={"X-GitHub-Delivery": "d", "X-GitHub-Event": "push", "X-Hub-Signature-256": sig})
    elif case == "no signature":
        r = httpx.post(f"{base}/events/github", content=body,
                       headers={"X-GitHub-Delivery": "d", "X-GitHub-Event": "push"})
    elif case == "missing id":
        sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        r = httpx.post(f"{base}/events/github", content=body,
                       headers={"X-GitHub-Event": "push", "X-Hub-Signature-256": sig})
    elif case == "not json":
        r = github_post(base, b"{not json")
    elif case == "too big":
        t = int(time.time())
        big = json.dumps({"id": "evt_big", "type": "x", "pad": "a" * 10_000}).encode()
        mac = hmac.new(SECRET.encode(), f"{t}.".encode() + big, hashlib.sha256).hexdigest()
        r = httpx.post(f"{base}/events/stripe", content=big, headers={"Stripe-Signature": f"t={t},v1={mac}"})
    elif case == "unknown source":
        r = httpx.post(f"{base}/events/nobody", content=body)
    else:
        r = httpx.post(f"{base}/events/internal", content=json.dumps({"meta": {"id": "i1"}, "kind": "k"}),
                       headers={"Authorization": "Bearer wrong"})
    assert r.status_code == status, r.text
    assert "error" in r.json()
    assert app.inbox.list() == []
    from firesafe.store.base import JobFilter

    assert app.store.job_count(JobFilter()) == 0


def stripe_post(base: str, body: bytes, signature: bytes | None = None) -> httpx.Response:
    t = int(time.time())
    mac = hmac.new(SECRET.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return httpx.post(f"{base}/events/stripe", content=body, timeout=10,
                      headers={"Stripe-Signature": signature or f"t={t},v1={mac}".encode()})


@pytest.mark.parametrize(
    "case, status",
    [("NUL in the type", 400), ("control character in the type", 400), ("100,000 levels deep", 400),
     ("integer of 5,000 digits", 400), ("boolean id", 400), ("float id", 400),
     ("non-ASCII v1 signature", 401), ("t of 400 digits", 401), ("non-ASCII t", 401)],
)
def test_unreadable_bodies_and_signatures_are_refused_with_4xx_and_store_nothing(
        served, case: str, status: int) -> None:
    app, base, _ = served
    t = int(time.time())
    if case == "NUL in the type":  # PostgreSQL text cannot hold NUL: refused on both stores alike
        r = stripe_post(base, b'{"id": "bad", "type": "a\\u0000b"}')
    elif case == "control character in the type":
        r = stripe_post(base, b'{"id": "bad", "type": "a\\u0007b"}')
    elif case == "100,000 levels deep":
        r = github_post(base, b"[" * 100_000 + b"]" * 100_000)
    elif case == "integer of 5,000 digits":
        r = github_post(base, b'{"n": ' + b"9" * 5000 + b"}")
    elif case == "boolean id":
        r = stripe_post(base, b'{"id": true, "type": "charge.refunded"}')
    elif case == "float id":
        r = stripe_post(base, b'{"id": 1.5, "type": "charge.refunded"}')
    elif case == "non-ASCII v1 signature":
        r = stripe_post(base, b'{"id": "e1", "type": "x"}', f"t={t},v1=".encode() + "\u00e9".encode())
    elif case == "t of 400 digits":
        r = stripe_post(base, b'{"id": "e1", "type": "x"}', b"t=" + b"9" * 400 + b",v1=00")
    else:
        r = stripe_post(base, b'{"id": "e1", "type": "x"}', "t=\u0661\u0662,v1=00".encode())
    assert r.status_code == status, r.text
    assert "error" in r.json()
    assert app.inbox.list() == []
    from firesafe.store.base import JobFilter

    assert app.store.job_count(JobFilter()) == 0


def test_a_redelivery_after_the_job_was_pruned_is_acknowledged_and_runs_nothing(served) -> None:
    app, base, handled = served
    body = json.dumps({"ref": "refs/heads/main"}).encode()
    first = github_post(base, body, "d-5")
    assert first.status_code == 200 and first.json()["created"]
    app.work(burst=True)
    app.retention = Retention(succeeded=0.0, keys=0.0)
    assert app.prune()["succeeded"] == 1
    again = github_post(base, body, "d-5")
    assert again.status_code == 200, again.text
    assert again.json() == {"stored": True, "event_id": "d-5", "type": "push", "job": None, "created": False,
                            "duplicate": True}
    app.work(burst=True)
    assert handled == ["d-5"]
    from firesafe.store.base import JobFilter

    assert app.store.job_count(JobFilter()) == 0


def test_bearer_source_with_nested_id_and_unhandled_type(served) -> None:
    app, base, _ = served
    r = httpx.post(f"{base}/events/internal", content=json.dumps({"meta": {"id": "i1"}, "kind": "user.created"}),
                   headers={"Authorization": "Bearer t0ken"})
    assert r.status_code == 200 and r.json()["job"] is None  # stored, no handler yet
    assert [e["event_id"] for e in app.inbox.list(unhandled=True)] == ["i1"]


def test_the_dashboard_and_the_event_endpoint_share_one_server(sqlite_url: str) -> None:
    from firesafe.dashboard.inbox import create_server_app
    from firesafe.dashboard.server import BackgroundServer

    app = App(sqlite_url)
    app.event_source("github", id_header="X-GitHub-Delivery", type_header="X-GitHub-Event", verify=Hmac(SECRET))
    with BackgroundServer(create_server_app(app, token="ops:a-very-long-dashboard-token")) as server:
        body = b'{"ref": "main"}'
        r = github_post(server.url, body, "d-9")
        assert r.status_code == 200 and r.json()["stored"]  # no dashboard token needed: signed instead
        assert httpx.get(f"{server.url}/jobs").status_code == 401  # the dashboard still wants its token
        ok = httpx.get(f"{server.url}/healthz", headers={"Authorization": "Bearer a-very-long-dashboard-token"})
        assert ok.status_code == 200
    assert [e["event_id"] for e in app.inbox.list()] == ["d-9"]
    app.close()
