"""The dashboard names its users: several named tokens, or a user header from a trusted reverse proxy
(ignored from anyone else); each action is recorded under that name, with the reason from the form."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from firesafe import App
from firesafe.dashboard import create_app
from firesafe.dashboard.security import parse_tokens, parse_user_header, read_tokens, resolve_tokens
from firesafe.dashboard.server import BackgroundServer
from firesafe.errors import ConfigError
from tests.dashboard.conftest import form_of
from tests.dashboard.test_http import csrf_of

ALICE = "alice=0123456789abcdef-alice"
BOB = "bob=0123456789abcdef-bob-xx"


@pytest.fixture
def dead(store_url: str) -> Iterator[App]:
    app = App(store_url)

    @app.job(max_attempts=1)
    def pay(ctx, n: int) -> None:
        raise RuntimeError("down")

    for i in range(3):
        pay.enqueue(i, key=f"pay:{i}")
    app.work(burst=True)
    yield app
    app.close()


def replay(c: httpx.Client, key: str, reason: str) -> httpx.Response:
    token = csrf_of(c.get("/dead").text)
    preview = c.post("/dead/preview", data={"csrf": token, "action": "replay", "scope": "keys", "key": key})
    assert preview.status_code == 200, preview.text
    return c.post("/dead/apply", data={**form_of(preview.text), "reason": reason})


def events(app: App, key: str) -> list[tuple[str, str | None, Any]]:
    return [(e.kind, e.actor, e.detail.get("reason")) for e in app.get(key).events]


def test_each_named_token_is_recorded_as_its_user(dead: App) -> None:
    tokens = parse_tokens([ALICE, BOB])
    with BackgroundServer(create_app(dead, tokens)) as server:
        secret = {t.name: t.secret for t in tokens}
        with httpx.Client(base_url=server.url, timeout=10) as anonymous:
            assert anonymous.get("/dead").status_code == 401
        for name, key in (("alice", "pay:0"), ("bob", "pay:1")):
            auth = {"authorization": f"Bearer {secret[name]}"}
            with httpx.Client(base_url=server.url, timeout=10, headers=auth) as c:
                done = replay(c, key, f"{name} checked the provider")
                assert done.status_code == 200 and f"{name} (dashboard@127.0.0.1)" in done.text
                assert f"{name} checked the provider" in done.text
    assert events(dead, "pay:0") == [("replayed", "alice (dashboard@127.0.0.1)", "alice checked the provider")]
    assert events(dead, "pay:1") == [("replayed", "bob (dashboard@127.0.0.1)", "bob checked the provider")]


def test_a_trusted_proxys_user_header_names_the_actor(dead: App) -> None:
    header = parse_user_header("X-Forwarded-User", "127.0.0.1")
    with BackgroundServer(create_app(dead, user_header=header)) as server, \
            httpx.Client(base_url=server.url, timeout=10, headers={"X-Forwarded-User": "carol"}) as c:
        assert replay(c, "pay:2", "seen in the incident channel").status_code == 200
    assert events(dead, "pay:2") == [("replayed", "carol (dashboard@127.0.0.1)", "seen in the incident channel")]


def test_the_user_header_from_an_untrusted_address_is_ignored(dead: App) -> None:
    header = parse_user_header("X-Forwarded-User", "10.9.8.7")  # the proxy is elsewhere: this client is not it
    with BackgroundServer(create_app(dead, user_header=header)) as server, \
            httpx.Client(base_url=server.url, timeout=10, headers={"X-Forwarded-User": "mallory"}) as c:
        assert replay(c, "pay:2", "").status_code == 200
    assert events(dead, "pay:2") == [("replayed", "dashboard@127.0.0.1", None)]


def test_token_configuration_mistakes_are_clear() -> None:
    with pytest.raises(ConfigError, match="each needs a name"):
        parse_tokens([ALICE, "0123456789abcdef-nameless"])
    with pytest.raises(ConfigError, match="share the name"):
        parse_tokens([ALICE, "alice=another-secret-0123456"])
    with pytest.raises(ConfigError, match="needs --user-header-from"):
        parse_user_header("X-Forwarded-User", None)
    assert read_tokens(f"# people\n{ALICE}\n{BOB}\n") == [ALICE, BOB]
    several = resolve_tokens([], None, None, f"{ALICE},{BOB}")
    assert isinstance(several, list) and [t.name for t in several] == ["alice", "bob"]
