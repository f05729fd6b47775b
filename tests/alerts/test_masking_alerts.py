"""Secrets never leave in an alert, whatever the sink (invariant 9).

Given a dead job whose error quotes an Authorization header, a URL with its password and a quoted
password, and whose arguments are a DSN and a cookie; when its dead-letter alert is delivered to a
real local HTTP receiver (webhook, Slack), a real SMTP server and the log; then what arrives holds
none of them, and says where each one was.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from email import message_from_bytes, policy
from typing import Any

import pytest

from firesafe import App, Backoff
from firesafe.alerts import Email, Log, Slack, Webhook
from tests.alerts.receiver import Receiver
from tests.alerts.test_sinks import _free_port, _Mailbox

SECRETS = ["abc.def", "pw-sekrit", "two words", "dsn-sekrit", "cookie-sekrit"]
MESSAGE = ('refused: Authorization: Bearer abc.def via postgresql://app:pw-sekrit@db.internal/x; '
           'password: "two words"')


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().up()
    yield r
    r.close()


def dead_letter(url: str, sinks: list[Any]) -> App:
    app = App(url, alerts=sinks)
    app.alert_rules(dispatch=False)  # the test dispatches by hand

    @app.job(max_attempts=2, backoff=Backoff(base=0.0, cap=0.0, jitter="none"))
    def sync(ctx: Any, dsn: str, cookie: str) -> None:
        raise ConnectionError(MESSAGE)

    sync.enqueue("postgresql://svc:dsn-sekrit@db/y", cookie="sid=cookie-sekrit", key="sync:1")
    app.work(burst=True, wait_scheduled=True)
    return app


def no_secret(text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{leaked} sent in:\n{text}"
    assert "Bearer ********" in text and "postgresql://app:********@db.internal/x" in text


def test_a_webhook_alert_carries_no_secret(store_url: str, receiver: Receiver) -> None:
    app = dead_letter(store_url, [Webhook(receiver.url, secret="test-secret", allow_private=True)])
    try:
        assert [e for _, _, e in app.alerts.flush()] == [None]
    finally:
        app.close()
    [req] = receiver.got
    no_secret(req.body.decode())
    [job] = req.json["jobs"]
    assert job["arguments"] == {"dsn": "********", "cookie": "********"}
    assert [a["message"] for a in job["attempts"]] == [
        'refused: Authorization: Bearer ******** via postgresql://app:********@db.internal/x; '
        'password: "********"'] * 2


def test_a_slack_alert_carries_no_secret(sqlite_url: str, receiver: Receiver) -> None:
    app = dead_letter(sqlite_url, [Slack(receiver.url, allow_private=True)])
    try:
        assert [e for _, _, e in app.alerts.flush()] == [None]
    finally:
        app.close()
    [req] = receiver.got
    no_secret(req.body.decode())


def test_an_email_alert_carries_no_secret(sqlite_url: str) -> None:
    from aiosmtpd.controller import Controller

    mailbox = _Mailbox()
    port = _free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        app = dead_letter(sqlite_url, [Email(smtp=f"smtp://127.0.0.1:{port}", to=["oncall@example.com"],
                                             sender="firesafe@example.com")])
        try:
            assert [e for _, _, e in app.alerts.flush()] == [None]
        finally:
            app.close()
        assert mailbox.arrived.wait(5)
    finally:
        controller.stop()
    [envelope] = mailbox.messages
    no_secret(message_from_bytes(envelope.content, policy=policy.default).get_content())


def test_a_log_alert_carries_no_secret(sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    app = dead_letter(sqlite_url, [Log()])
    try:
        with caplog.at_level(logging.INFO, logger="firesafe.alerts"):
            assert [e for _, _, e in app.alerts.flush()] == [None]
    finally:
        app.close()
    [record] = [r for r in caplog.records if r.name == "firesafe.alerts"]
    no_secret(record.getMessage())
