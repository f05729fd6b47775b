"""The sinks against real local servers: a threaded HTTP receiver and an aiosmtpd SMTP server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from firesafe import App, Backoff, ConfigError
from firesafe.alerts import DeliveryError, Email, Log, Slack, Webhook, verify_signature
from tests.alerts.receiver import Receiver, verify

NO_WAIT = Backoff(base=0.0, cap=0.0, jitter="none")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().up()
    yield r
    r.close()


def poison_app(url: str, sinks: list[Any]) -> App:
    app = App(url, alerts=sinks)
    app.alert_rules(dispatch=False)  # the test dispatches by hand

    @app.job(max_attempts=3, backoff=NO_WAIT)
    def charge(ctx, order_id: str, api_key: str) -> None:
        raise ConnectionError(f"card network refused attempt {ctx.job.attempt} (api_key={api_key})")

    charge.enqueue("o-1", "sk_live_very_secret", key="charge:o-1")
    app.work(burst=True, wait_scheduled=True)
    return app


def test_webhook_is_signed_and_carries_every_attempt_of_the_dead_job(sqlite_url: str, receiver: Receiver) -> None:
    app = poison_app(sqlite_url, [Webhook(receiver.url, secret="test-secret", allow_private=True)])
    try:
        assert app.alerts.flush() == [(1, "webhook:127.0.0.1", None)]
        [req] = receiver.got
        assert req.valid, "the receiver's own HMAC check (the docs' snippet) accepts the signature"
        assert req.headers["X-Firesafe-Alert-Id"] == "1" and req.headers["Content-Type"] == "application/json"
        doc = req.json
        assert doc["kind"] == "dead_letter" and doc["severity"] == "critical" and doc["status"] == "firing"
        assert doc["count"] == 1 and doc["keys"] == ["charge:o-1"] and doc["job_name"] == "charge"
        [job] = doc["jobs"]
        assert job["state"] == "dead" and job["reason"] == "exhausted"
        assert job["show"] == "firesafe show charge:o-1" and "firesafe show charge:o-1" in doc["commands"]
        assert [a["attempt"] for a in job["attempts"]] == [1, 2, 3]
        assert [a["outcome"] for a in job["attempts"]] == ["failed"] * 3
        for n, a in enumerate(job["attempts"], 1):
            assert a["error_type"] == "ConnectionError"
            assert a["message"].startswith(f"card network refused attempt {n}")
            assert a["started_at"] and a["ended_at"] and a["duration"] is not None and a["worker"]
            assert "Traceback" in a["traceback"] and "ConnectionError" in a["traceback"]
        assert job["arguments"] == {"order_id": "o-1", "api_key": "********"}
        assert b"sk_live_very_secret" not in req.body, "secrets are masked everywhere in the alert"
        # Tampering with one byte of the body breaks the signature (both checks agree).
        ts, sig = req.headers["X-Firesafe-Timestamp"], req.headers["X-Firesafe-Signature"]
        tampered = req.body.replace(b'"count":1', b'"count":2')
        assert tampered != req.body
        assert not verify("test-secret", ts, tampered, sig)
        assert not verify_signature("test-secret", ts, tampered, sig)
        assert verify_signature("test-secret", ts, req.body, sig)
        assert not verify_signature("another-secret", ts, req.body, sig)
        [alert] = app.alerts.list()
        assert [(d.sink, d.state, d.attempts) for d in alert.deliveries] == [("webhook:127.0.0.1", "delivered", 1)]
    finally:
        app.close()


def test_slack_gets_the_incoming_webhook_format(sqlite_url: str, receiver: Receiver) -> None:
    app = poison_app(sqlite_url, [Slack(receiver.url, allow_private=True)])
    try:
        assert [e for _, _, e in app.alerts.flush()] == [None]
        body = receiver.got[0].json
        assert body["text"].startswith("[firesafe] CRITICAL dead_letter: 1 job(s) of charge dead-lettered")
        blocks = body["blocks"]
        assert blocks[0]["type"] == "header"
        text = str(blocks)
        assert "charge:o-1" in text and "ConnectionError" in text and "firesafe show charge:o-1" in text
        assert "sk_live_very_secret" not in text
    finally:
        app.close()


def test_private_and_loopback_addresses_are_refused_unless_allowed(sqlite_url: str, receiver: Receiver) -> None:
    for url in ("http://127.0.0.1:9/x", "http://10.0.0.7/x", "http://[::1]:9/x", "http://169.254.169.254/latest"):
        with pytest.raises(ConfigError, match="address"):
            Webhook(url, secret="s")
        with pytest.raises(ConfigError, match="address"):
            Slack(url)
    # A host name is checked where it resolves, at each delivery: localhost is loopback.
    sink = Webhook(f"http://localhost:{receiver.port}/hooks/firesafe", secret="test-secret")
    with pytest.raises(DeliveryError, match=r"refused: localhost resolves to .*loopback address"):
        sink.deliver({"kind": "test"})
    app = poison_app(sqlite_url, [sink])
    try:
        [(_, _, error)] = app.alerts.flush()
        assert "loopback" in (error or "")
        assert receiver.attempts == 0, "nothing was sent to the refused address"
        [alert] = app.alerts.list()
        [d] = alert.deliveries
        assert d.state == "pending" and d.attempts == 1 and "allow_private=True" in (d.last_error or "")
    finally:
        app.close()
    # allow_private=True lets it through.
    Webhook(f"http://localhost:{receiver.port}/x", secret="test-secret", allow_private=True).deliver({"id": 7})
    assert receiver.got[-1].valid


#: Data that would ping everyone and show a disguised link if Slack read it as mrkdwn, with backticks
#: to break out of the code span or block it is shown in.
HOSTILE_KEY = "o-1`<!channel>` <http://evil.example/a|click> & ``` <@U123>"
HOSTILE_MESSAGE = "` <!here> ``` <http://evil.example/b|docs> & <!subteam^S1>"


def _mrkdwn_texts(message: dict[str, Any]) -> list[tuple[str, str]]:
    """Every text of a Slack message that Slack parses as mrkdwn, with where it is."""
    out = [("text", message["text"])]
    for block in message["blocks"]:
        if block["type"] == "section":
            out += [("section", block["text"]["text"])] if "text" in block else []
            out += [("field", f["text"]) for f in block.get("fields", [])]
        elif block["type"] == "context":
            out += [("context", e["text"]) for e in block["elements"] if e["type"] == "mrkdwn"]
    return out


def test_slack_text_from_data_cannot_mention_link_or_leave_its_code_span(sqlite_url: str, receiver: Receiver) -> None:
    app = App(sqlite_url, alerts=[Slack(receiver.url, allow_private=True)])
    app.alert_rules(dispatch=False, dashboard_url="https://ops.example.com/firesafe")

    @app.job(max_attempts=1)
    def charge(ctx, order_id: str) -> None:
        raise ValueError(HOSTILE_MESSAGE)

    charge.enqueue("o-1", key=HOSTILE_KEY)
    app.work(burst=True)
    try:
        assert [e for _, _, e in app.alerts.flush()] == [None]
        [req] = receiver.got
        message = req.json
        texts = _mrkdwn_texts(message)
        assert any(where == "section" and "```" in t for where, t in texts) and len(texts) >= 6
        for where, text in texts:
            for raw in ("<!channel>", "<!here>", "<!subteam", "<@U123>", "<http://evil", "|click>", "|docs>"):
                assert raw not in text, (where, text)
            assert "&" not in text.replace("&amp;", "").replace("&lt;", "").replace("&gt;", ""), (where, text)
            if where == "section" and text.startswith("```"):  # the code block: data never closes it
                assert text.endswith("```") and text.count("`") == 6, text
            if where == "context" and text.startswith("`"):  # the `firesafe show` command's code span
                assert text.count("`") == 2 and text.index("`", 1) == text.index("`  <https://ops.example.com"), text
        shown = str(message)
        assert "&lt;!channel&gt;" in shown and "&lt;!here&gt;" in shown and "\u02cb" in shown  # shown, not acted on
        [link] = [t for w, t in texts if w == "context" and "open in the dashboard" in t]
        assert "<https://ops.example.com/firesafe/job?key=o-1%60%3C%21channel%3E%60" in link
    finally:
        app.close()


def test_email_headers_hold_no_data_line_breaks_and_hostile_text_still_arrives() -> None:
    """Python's email package refuses a header with CR/LF (the alert then never went out, retried for
    ever); the sink writes the line breaks as escapes, so no header is injected and the alert leaves."""
    sink = Email(smtp="smtp://127.0.0.1:25", to=["oncall@example.com"], sender="firesafe@example.com")
    doc = {"id": "7\r\nBcc: thief@example.com", "kind": "dead_letter", "severity": "critical",
           "title": "x\r\nBcc: thief@example.com\nX-Evil: 1", "keys": ["caf\udce9\x00"]}
    msg = sink.message(doc)
    raw = msg.as_bytes()
    headers = raw.split(b"\n\n", 1)[0]
    assert b"\nBcc:" not in headers and b"\nX-Evil" not in headers
    assert msg["Bcc"] is None and msg["X-Evil"] is None
    assert msg["Subject"] == "[firesafe] CRITICAL dead_letter: x\\r\\nBcc: thief@example.com\\nX-Evil: 1"
    assert msg["X-Firesafe-Alert-Id"] == "7\\r\\nBcc: thief@example.com"
    assert "caf\\udce9\\x00" in msg.get_content()


def test_a_webhook_document_with_text_utf8_cannot_carry_is_still_sent_and_signed(receiver: Receiver) -> None:
    Webhook(receiver.url, secret="test-secret", allow_private=True).deliver({"id": 3, "m": "caf\udce9 \u00e9"})
    [req] = receiver.got
    assert req.valid and req.body.isascii() and req.json == {"id": 3, "m": "caf\udce9 \u00e9"}


def test_redirects_are_not_followed_and_a_hanging_receiver_times_out() -> None:
    redirecting = Receiver(status=302).up()
    hanging = Receiver().up()
    hanging.hang = True
    try:
        with pytest.raises(DeliveryError, match="HTTP 302"):
            Webhook(redirecting.url, secret="s", allow_private=True).deliver({"id": 1})
        assert redirecting.attempts == 1
        started = time.monotonic()
        with pytest.raises(DeliveryError, match=r"timed out after 0\.3s"):
            Webhook(hanging.url, secret="s", allow_private=True, timeout=0.3).deliver({"id": 1})
        assert time.monotonic() - started < 3
    finally:
        redirecting.close()
        hanging.close()


@pytest.mark.parametrize("part", ["body", "headers"])
def test_a_receiver_that_trickles_its_answer_is_cut_off_at_the_timeout(sqlite_url: str, part: str) -> None:
    """The timeout bounds the whole request, not each read: 40 bytes at one per 0.2 s would take 8 s."""
    slow = Receiver().up()
    slow.trickle = (part, 0.2)
    sink = Webhook(slow.url, secret="s", allow_private=True, timeout=1)
    try:
        started = time.monotonic()
        with pytest.raises(DeliveryError, match=r"timed out after 1s"):
            sink.deliver({"id": 1})
        assert time.monotonic() - started < 2.5  # about 1 s; the whole answer would take 8 s
        assert slow.attempts == 1
        app = poison_app(sqlite_url, [sink])  # through the dispatcher: a failed delivery, retried later
        try:
            started = time.monotonic()
            [(_, _, error)] = app.alerts.flush()
            assert time.monotonic() - started < 3.5
            assert "timed out after 1s" in (error or "")
            [alert] = app.alerts.list()
            [d] = alert.deliveries
            assert d.state == "pending" and d.attempts == 1 and "timed out" in (d.last_error or "")
        finally:
            app.close()
    finally:
        slow.close()


def test_bad_sink_configuration_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="secret"):
        Webhook("https://ops.example.com/hook", secret="")
    with pytest.raises(ConfigError, match="scheme"):
        Webhook("ftp://ops.example.com/hook", secret="s")
    with pytest.raises(ConfigError, match="to="):
        Email(smtp="smtp://localhost:25", to=[])
    with pytest.raises(ConfigError, match="smtp://host:port"):
        Email(smtp="http://localhost", to=["a@b.c"])
    with pytest.raises(ConfigError, match="sinks"):
        App("sqlite:///unused.db", alerts=["https://ops.example.com"])
    twice = App("sqlite:///unused.db", alerts=[Log(), Log()])
    assert [s.name for s in twice.alerts.sinks] == ["log", "log#2"]
    with pytest.raises(ConfigError, match=r"unknown option.*failure_rat"):
        twice.alert_rules(failure_rat=0.2)
    with pytest.raises(ConfigError, match="between 0 and 1"):
        twice.alert_rules(failure_rate=1.5)
    with pytest.raises(ConfigError, match="positive duration"):
        twice.alert_rules(stuck_after=0)
    assert "secret" not in repr(Webhook("https://ops.example.com/hook/t0ken", secret="secret"))


def test_malformed_sink_urls_are_a_config_error() -> None:
    for url, why in [("http://[::1", "invalid URL"), ("http://example.com:0/", "port 0"),
                     ("http://exa mple.com/", "whitespace"), ("http://example.com/\nx", "control"),
                     ("http://ex%41mple.com/", "not a valid host name"), ("http://bad..example.com/", "host name"),
                     ("http://-bad.example.com/", "host name"), ("http://example.com:99999/", "invalid URL")]:
        with pytest.raises(ConfigError, match=why):
            Webhook(url, secret="s")
        with pytest.raises(ConfigError, match=why):
            Slack(url)
    for smtp, why in [("smtp://[::1", "invalid URL"), ("smtp://mail.example.com:0", "port 0"),
                      ("smtp://ma il.example.com:25", "whitespace"), ("smtp://user:hunter2@[::1", "invalid URL")]:
        with pytest.raises(ConfigError, match=why) as caught:
            Email(smtp=smtp, to=["a@b.c"])
        assert "hunter2" not in str(caught.value)
    assert Webhook("https://B\u00fccher.example/hook", secret="s").host == "xn--bcher-kva.example"
    assert Email(smtp="smtp://[::1]:2525", to=["a@b.c"]).port == 2525


def test_private_addresses_in_any_spelling_are_refused_when_declared() -> None:
    """The resolver reads 127.1, 2130706433, 0x7f000001 and 0 as addresses; NAT64 (64:ff9b::/96),
    6to4 and IPv4-compatible addresses reach the IPv4 address they embed."""
    for url in ("http://127.1/", "http://2130706433/", "http://0x7f000001/", "http://0/", "http://017700000001/",
                "http://10.1/", "http://[64:ff9b::a9fe:a9fe]/latest", "http://[64:ff9b::7f00:1]/",
                "http://[2002:a9fe:a9fe::1]/", "http://[::ffff:169.254.169.254]/", "http://[::a9fe:a9fe]/"):
        with pytest.raises(ConfigError, match=r"address \(.*, RFC \d+\); alerts go only to public addresses"):
            Webhook(url, secret="s")
        with pytest.raises(ConfigError, match="address"):
            Slack(url)
    for url in ("http://8.8.8.8/", "http://[64:ff9b::808:808]/", "http://134744072/"):  # public ones pass
        Webhook(url, secret="s")
    Webhook("http://127.1:9/", secret="s", allow_private=True)


def test_a_name_that_resolves_to_a_nat64_private_address_is_refused_at_delivery(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo

    def resolver(host: str, *args: Any, **kwargs: Any) -> Any:  # a DNS64 answer for the metadata service
        if host == "metadata.example.com":
            return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("64:ff9b::a9fe:a9fe", 80, 0, 0))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    sink = Webhook("http://metadata.example.com/latest", secret="s")
    with pytest.raises(DeliveryError, match=r"refused: metadata.example.com resolves to 64:ff9b::a9fe:a9fe, "
                                            r"a link-local address"):
        sink.deliver({"id": 1})


# -- email -----------------------------------------------------------------------------------------
class _Mailbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.arrived = threading.Event()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(envelope)
        self.arrived.set()
        return "250 OK"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_email_through_a_real_smtp_server(sqlite_url: str) -> None:
    from email import message_from_bytes, policy

    from aiosmtpd.controller import Controller

    mailbox = _Mailbox()
    port = _free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        app = poison_app(sqlite_url, [Email(smtp=f"smtp://127.0.0.1:{port}", to=["oncall@example.com"],
                                            sender="firesafe@example.com")])
        try:
            assert app.alerts.flush() == [(1, "email", None)]
        finally:
            app.close()
        assert mailbox.arrived.wait(5)
        [envelope] = mailbox.messages
        assert envelope.rcpt_tos == ["oncall@example.com"] and envelope.mail_from == "firesafe@example.com"
        msg = message_from_bytes(envelope.content, policy=policy.default)
        assert msg["Subject"] == "[firesafe] CRITICAL dead_letter: 1 job(s) of charge dead-lettered"
        assert msg["X-Firesafe-Alert-Id"] == "1"
        body = msg.get_content()
        for n in (1, 2, 3):
            assert f"card network refused attempt {n}" in body
        assert "firesafe show charge:o-1" in body and "Traceback" in body
        assert "sk_live_very_secret" not in body
    finally:
        controller.stop()
    # The server gone: a clear delivery error, not an exception out of the dispatcher.
    with pytest.raises(DeliveryError, match=f"SMTP 127.0.0.1:{port}"):
        Email(smtp=f"smtp://127.0.0.1:{port}", to=["oncall@example.com"], timeout=2).deliver({"kind": "test"})
