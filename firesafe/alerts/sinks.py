"""Where alerts go: a webhook (HMAC-signed JSON), Slack, email (SMTP) and the log.

A sink's ``deliver`` sends one alert document or raises :class:`DeliveryError`; the dispatcher
retries with backoff and records each outcome. HTTP sinks follow no redirects, time out, and
refuse URLs whose host resolves to a loopback, private, link-local or otherwise non-public address
unless ``allow_private=True``; the address checked is the address connected to (no second lookup).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import os
import smtplib
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from email.message import EmailMessage
from email.utils import formataddr, make_msgid
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from firesafe.alerts.render import subject, to_slack, to_text
from firesafe.errors import ConfigError

log = logging.getLogger("firesafe.alerts")

SIGNATURE_HEADER = "X-Firesafe-Signature"
TIMESTAMP_HEADER = "X-Firesafe-Timestamp"
ALERT_ID_HEADER = "X-Firesafe-Alert-Id"
#: How old a signed request a receiver should accept, in seconds (see :func:`verify_signature`).
SIGNATURE_TOLERANCE = 300


class DeliveryError(Exception):
    """A sink could not deliver an alert; the message says why (it is shown by ``firesafe alerts ls``)."""


class Sink:
    """Base class of the places alerts go. ``name`` identifies the sink in the delivery history."""

    kind = "sink"

    def __init__(self, name: str | None = None, *, timeout: float = 10.0) -> None:
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigError(f"{type(self).__name__}: timeout must be > 0 seconds")
        self.name = name or self.default_name()
        if not self.name or len(self.name) > 200:
            raise ConfigError(f"{type(self).__name__}: name must be 1 to 200 characters")
        self.timeout = float(timeout)

    def default_name(self) -> str:
        return self.kind

    def deliver(self, document: Mapping[str, Any], attempt: int = 1) -> None:
        """Send one alert; raise :class:`DeliveryError` if it did not arrive."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class Log(Sink):
    """Alerts as log records on ``logger`` (default ``firesafe.alerts``): ERROR for critical ones,
    WARNING for warnings, INFO otherwise."""

    kind = "log"

    def __init__(self, logger: str | logging.Logger = "firesafe.alerts", *, name: str | None = None,
                 tracebacks: bool = True) -> None:
        super().__init__(name)
        self.logger = logger if isinstance(logger, logging.Logger) else logging.getLogger(logger)
        self.tracebacks = tracebacks

    def deliver(self, document: Mapping[str, Any], attempt: int = 1) -> None:
        severity = document.get("severity")
        level = {"critical": logging.ERROR, "warning": logging.WARNING}.get(str(severity), logging.INFO)
        if document.get("status") == "resolved":
            level = logging.INFO
        self.logger.log(level, "%s", to_text(document, tracebacks=self.tracebacks),
                        extra={"alert_id": document.get("id"), "alert_kind": document.get("kind")})


# -- HTTP ---------------------------------------------------------------------------------------
def sign(secret: str | bytes, timestamp: str, body: bytes) -> str:
    """The signature header value of a webhook request: HMAC-SHA256 over ``timestamp + "." + body``.

    >>> sign("s3cret", "1700000000", b'{"kind":"test"}')
    'sha256=7b2aff8eab4012eb239d2b0b89ccb83d5c195cb2849de7f44bd0271591f2a87b'
    """
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def verify_signature(secret: str | bytes, timestamp: str, body: bytes, signature: str, *,
                     tolerance: float = SIGNATURE_TOLERANCE, now: float | None = None) -> bool:
    """Whether a webhook request is genuine: the signature matches and the timestamp is recent.

    >>> body = b'{"kind":"test"}'
    >>> verify_signature("s3cret", "1700000000", body, sign("s3cret", "1700000000", body), now=1700000010)
    True
    >>> verify_signature("s3cret", "1700000000", body + b" ", sign("s3cret", "1700000000", body), now=1700000010)
    False
    """
    try:
        age = abs((time.time() if now is None else now) - int(timestamp))
    except (TypeError, ValueError):
        return False
    return age <= tolerance and hmac.compare_digest(sign(secret, timestamp, body), signature or "")


def address_problem(ip: str) -> str | None:
    """Why an address may not be called without ``allow_private`` (None: it is public).

    >>> [address_problem(a) for a in ("127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "93.184.216.34")]
    ['loopback', 'private', 'link-local', 'loopback', None]
    >>> address_problem("::ffff:192.168.0.1")
    'private'
    """
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if addr.is_loopback:
        return "loopback"
    if addr.is_link_local:
        return "link-local"
    if addr.is_unspecified:
        return "unspecified"
    if addr.is_multicast:
        return "multicast"
    if addr.is_private:
        return "private"
    if not addr.is_global:
        return "reserved"
    return None


def _check_http_url(url: str, owner: str) -> tuple[str, str, int]:
    if not isinstance(url, str):
        raise ConfigError(f"{owner}: the URL must be a string")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"{owner}: {parts.scheme or 'no'} scheme in the URL; use https:// (or http://)")
    if not parts.hostname:
        raise ConfigError(f"{owner}: the URL has no host")
    if parts.username or parts.password:
        raise ConfigError(f"{owner}: put no credentials in the URL (the webhook is authenticated by its signature)")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ConfigError(f"{owner}: invalid port in the URL ({exc})") from None
    return parts.scheme, parts.hostname, port


class HTTPSink(Sink):
    """What the webhook and Slack sinks share: a POST of JSON with the address rules above."""

    def __init__(self, url: str, *, name: str | None = None, timeout: float = 10.0,
                 allow_private: bool = False) -> None:
        self.scheme, self.host, self.port = _check_http_url(url, type(self).__name__)
        self.url = url
        self.allow_private = bool(allow_private)
        self._client: Any = None
        self._client_pid = 0
        self._client_lock = threading.Lock()
        if not self.allow_private:
            try:
                problem = address_problem(self.host.strip("[]"))
            except ValueError:  # a host name: checked when it is resolved, at each delivery
                problem = None
            if problem:
                raise ConfigError(f"{type(self).__name__}: {self.host} is a {problem} address; alerts go only to "
                                  "public addresses unless you pass allow_private=True")
        super().__init__(name, timeout=timeout)

    def default_name(self) -> str:
        return f"{self.kind}:{self.host}"

    def _resolve(self) -> str:
        """The address to connect to, checked against the private-address rule."""
        try:
            infos = socket.getaddrinfo(self.host.strip("[]"), self.port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise DeliveryError(f"cannot resolve {self.host}: {exc}") from None
        addrs = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if not addrs:
            raise DeliveryError(f"cannot resolve {self.host}: no address")
        if not self.allow_private:
            for a in addrs:
                problem = address_problem(a)
                if problem:
                    raise DeliveryError(f"refused: {self.host} resolves to {a}, a {problem} address "
                                        "(pass allow_private=True to allow it)")
        return addrs[0]

    def post(self, body: bytes, headers: Mapping[str, str]) -> int:
        """POST ``body`` to the URL, connected to the checked address; returns the status code."""
        import httpx

        ip = self._resolve()
        parts = urlsplit(self.url)
        literal = f"[{ip}]" if ":" in ip else ip
        target = urlunsplit((parts.scheme, f"{literal}:{self.port}", parts.path or "/", parts.query, ""))
        default_port = 443 if self.scheme == "https" else 80
        host_header = self.host if self.port == default_port else f"{self.host}:{self.port}"
        if ":" in self.host and not self.host.startswith("["):
            host_header = f"[{self.host}]" if self.port == default_port else f"[{self.host}]:{self.port}"
        extensions = {"sni_hostname": self.host} if self.scheme == "https" else {}
        try:
            response = self._http().post(target, content=body, extensions=extensions,
                                         headers={**headers, "Host": host_header, "User-Agent": _user_agent()})
        except httpx.TimeoutException as exc:
            raise DeliveryError(f"timed out after {self.timeout:g}s ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            raise DeliveryError(f"{type(exc).__name__}: {exc}") from None
        if 300 <= response.status_code < 400:
            raise DeliveryError(f"HTTP {response.status_code}: redirect to "
                                f"{response.headers.get('location', '?')!r} not followed")
        if not 200 <= response.status_code < 300:
            raise DeliveryError(f"HTTP {response.status_code}: {response.text[:200]}")
        return response.status_code


    def _http(self) -> Any:
        """This process's client of the sink, made once: a client costs ~20 ms of CPU to build (its
        TLS context), which retries against a sink that is down must not spend each time."""
        import httpx

        with self._client_lock:
            if self._client is None or self._client_pid != os.getpid():
                # trust_env=False: no proxy from the environment, which would bypass the address check.
                self._client = httpx.Client(timeout=self.timeout, follow_redirects=False, trust_env=False,
                                            limits=httpx.Limits(max_connections=4, max_keepalive_connections=1))
                self._client_pid = os.getpid()
            return self._client


def _user_agent() -> str:
    from firesafe import __version__

    return f"firesafe/{__version__}"


def encode(document: Mapping[str, Any]) -> bytes:
    """The exact bytes a webhook sends (and signs)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


class Webhook(HTTPSink):
    """POST each alert as JSON, signed with HMAC-SHA256.

    Headers: ``X-Firesafe-Timestamp`` (seconds since the epoch), ``X-Firesafe-Signature``
    (``sha256=`` + hex HMAC of ``timestamp + "." + body`` with ``secret``) and
    ``X-Firesafe-Alert-Id`` (the same for every retry: receivers deduplicate on it). Any 2xx is
    success; a redirect is a failure and is not followed.
    """

    kind = "webhook"

    def __init__(self, url: str, secret: str, *, name: str | None = None, timeout: float = 10.0,
                 allow_private: bool = False, headers: Mapping[str, str] | None = None) -> None:
        if not isinstance(secret, (str, bytes)) or not secret:
            raise ConfigError("Webhook: give a non-empty secret; receivers check the signature with it")
        self.secret = secret
        self.headers = dict(headers or {})
        super().__init__(url, name=name, timeout=timeout, allow_private=allow_private)

    def __repr__(self) -> str:  # never the secret, nor the URL's path (it may hold a token)
        return f"<Webhook {self.name}>"

    def deliver(self, document: Mapping[str, Any], attempt: int = 1) -> None:
        body = encode(document)
        timestamp = str(int(time.time()))
        self.post(body, {**self.headers, "Content-Type": "application/json",
                         TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: sign(self.secret, timestamp, body),
                         ALERT_ID_HEADER: str(document.get("id", "")), "X-Firesafe-Attempt": str(attempt)})


class Slack(HTTPSink):
    """Post each alert to a Slack incoming webhook (``text`` plus Block Kit ``blocks``)."""

    kind = "slack"

    def default_name(self) -> str:
        return "slack"  # the URL's path is a secret: it never appears in a name

    def __repr__(self) -> str:
        return f"<Slack {self.name}>"

    def deliver(self, document: Mapping[str, Any], attempt: int = 1) -> None:
        self.post(json.dumps(to_slack(document)).encode(), {"Content-Type": "application/json"})


# -- email --------------------------------------------------------------------------------------
class Email(Sink):
    """Send each alert as a plain-text email through an SMTP server.

    ``smtp``: ``smtp://host:port`` (plain, upgraded with STARTTLS if ``?starttls=true``) or
    ``smtps://host:port`` (TLS from the start); ``smtp://user:password@host:587?starttls=true``
    logs in. The server is yours, so private addresses are fine here.
    """

    kind = "email"

    def __init__(self, smtp: str = "smtp://localhost:25", to: Sequence[str] | str = (), *,
                 sender: str | None = None, name: str | None = None, timeout: float = 10.0) -> None:
        parts = urlsplit(smtp)
        if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
            raise ConfigError(f"Email: smtp must look like smtp://host:port or smtps://host:port, not {smtp!r}")
        try:
            self.port = parts.port or (465 if parts.scheme == "smtps" else 25)
        except ValueError as exc:
            raise ConfigError(f"Email: invalid port in {smtp!r} ({exc})") from None
        self.tls = parts.scheme == "smtps"
        self.host = parts.hostname
        options = dict(parse_qsl(parts.query))
        self.starttls = options.get("starttls", "").lower() in ("1", "true", "yes")
        self.username = unquote(parts.username) if parts.username else None
        self.password = unquote(parts.password) if parts.password else None
        recipients = [to] if isinstance(to, str) else list(to)
        if not recipients or not all(isinstance(r, str) and "@" in r for r in recipients):
            raise ConfigError("Email: give to=[...] with at least one address like oncall@example.com")
        self.to = recipients
        self.sender = sender or f"firesafe@{socket.gethostname() or 'localhost'}"
        super().__init__(name, timeout=timeout)

    def __repr__(self) -> str:
        return f"<Email {self.name} via {self.host}:{self.port}>"

    def message(self, document: Mapping[str, Any]) -> EmailMessage:
        msg = EmailMessage()
        msg["Subject"] = subject(document)
        msg["From"] = formataddr(("firesafe", self.sender))
        msg["To"] = ", ".join(self.to)
        msg["Message-ID"] = make_msgid(domain=self.sender.rsplit("@", 1)[-1])
        if document.get("id") is not None:
            msg["X-Firesafe-Alert-Id"] = str(document["id"])
        msg.set_content(to_text(document))
        return msg

    def deliver(self, document: Mapping[str, Any], attempt: int = 1) -> None:
        msg = self.message(document)
        try:
            if self.tls:
                server: smtplib.SMTP = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout,
                                                        context=ssl.create_default_context())
            else:
                server = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
            with server:
                if self.starttls:
                    server.starttls(context=ssl.create_default_context())
                if self.username:
                    server.login(self.username, self.password or "")
                refused = server.send_message(msg)
        except (OSError, smtplib.SMTPException) as exc:
            raise DeliveryError(f"SMTP {self.host}:{self.port}: {type(exc).__name__}: {exc}") from None
        if refused:
            raise DeliveryError(f"SMTP {self.host}:{self.port} refused {', '.join(sorted(refused))}")


def unique_names(sinks: Iterable[Sink]) -> list[Sink]:
    """Check the sinks and make their names unique (a second ``webhook:host`` becomes ``webhook:host#2``)."""
    out: list[Sink] = []
    seen: dict[str, int] = {}
    for s in sinks:
        if not isinstance(s, Sink):
            raise ConfigError(f"alerts=[...] takes sinks (Log, Webhook, Slack, Email), not {type(s).__name__}")
        n = seen.get(s.name, 0) + 1
        seen[s.name] = n
        if n > 1:
            s.name = f"{s.name}#{n}"
        out.append(s)
    return out
