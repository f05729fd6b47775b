"""Where alerts go: a webhook (HMAC-signed JSON), Slack, email (SMTP) and the log.

A sink's ``deliver`` sends one alert document or raises :class:`DeliveryError`; the dispatcher
retries with backoff and records each outcome. HTTP sinks follow no redirects, time out, and
refuse URLs whose host resolves to an address of a special-purpose range (loopback, private,
link-local, reserved, ...: the table of :mod:`firesafe.alerts.addresses`) unless
``allow_private=True``; the address checked is the address connected to (no second lookup).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import smtplib
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from email.message import EmailMessage
from email.utils import formataddr, make_msgid
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from firesafe.alerts.addresses import special_range
from firesafe.alerts.policy import check_routing, route_severity
from firesafe.alerts.render import subject, to_slack, to_text
from firesafe.errors import ConfigError
from firesafe.masking import redact_url
from firesafe.sanitize import for_log, for_store

log = logging.getLogger("firesafe.alerts")

SIGNATURE_HEADER = "X-Firesafe-Signature"
TIMESTAMP_HEADER = "X-Firesafe-Timestamp"
ALERT_ID_HEADER = "X-Firesafe-Alert-Id"
#: How old a signed request a receiver should accept, in seconds (see :func:`verify_signature`).
SIGNATURE_TOLERANCE = 300


class DeliveryError(Exception):
    """A sink could not deliver an alert; the message says why (it is shown by ``firesafe alerts ls``)."""


class Sink:
    """Base class of the places alerts go. ``name`` identifies the sink in the delivery history.

    Routing: a sink takes alerts of every severity, or those of ``severities=(...)``, or those of
    ``min_severity`` and above (``Slack(url, min_severity="warning")``, a pager
    ``Webhook(url, secret, severities=("critical",))``). A resolution goes where what it resolves
    went; a test alert goes to every sink.
    """

    kind = "sink"

    def __init__(self, name: str | None = None, *, timeout: float = 10.0, severities: Sequence[str] | None = None,
                 min_severity: str | None = None) -> None:
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigError(f"{type(self).__name__}: timeout must be > 0 seconds")
        self.name = name or self.default_name()
        if not self.name or len(self.name) > 200:
            raise ConfigError(f"{type(self).__name__}: name must be 1 to 200 characters")
        self.timeout = float(timeout)
        self.severities = check_routing(severities, min_severity, type(self).__name__)

    def default_name(self) -> str:
        return self.kind

    def accepts(self, kind: str, severity: str) -> bool:
        """Whether an alert of ``kind`` and ``severity`` goes to this sink."""
        taken = getattr(self, "severities", None)  # a subclass that skipped Sink.__init__ takes every one
        return kind == "test" or taken is None or route_severity(kind, severity) in taken

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
                 tracebacks: bool = True, severities: Sequence[str] | None = None,
                 min_severity: str | None = None) -> None:
        super().__init__(name, severities=severities, min_severity=min_severity)
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


_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


def _refusal(ip: str) -> str | None:
    """What an error says of an address the sinks may not call (None: it is public), for example
    ``a link-local address (169.254.0.0/16: Link Local, RFC 3927)``."""
    row = special_range(ip)
    return None if row is None else f"{_a(row.kind)} address ({row})"


def literal_address(host: str) -> str | None:
    """The address a host names by itself, as the resolver reads it (None for a name): IPv6 in
    brackets or not, and IPv4 in every form ``inet_aton`` takes (``127.1``, ``2130706433``,
    ``0x7f000001``, ``0``), so that no private address passes for a name.

    >>> [literal_address(h) for h in ("127.1", "2130706433", "0x7f000001", "0", "[::1]", "example.com")]
    ['127.0.0.1', '127.0.0.1', '127.0.0.1', '0.0.0.0', '::1', None]
    """
    h = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return str(ipaddress.ip_address(h))
    except ValueError:
        pass
    if not h or any(c not in "0123456789abcdefxABCDEFX." for c in h):
        return None
    try:
        return socket.inet_ntoa(socket.inet_aton(h))
    except OSError:
        return None


def check_host(host: str | None, owner: str) -> str:
    """A URL's host, checked: an IP address, or a DNS name (IDNA-encoded), never whitespace,
    percent signs or empty labels. Returns the host to connect to and to send as ``Host``.

    >>> check_host("Example.com", "Webhook"), check_host("bücher.example", "Webhook")
    ('example.com', 'xn--bcher-kva.example')
    >>> check_host("exa mple.com", "Webhook")
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: Webhook: 'exa mple.com' is not a valid host name
    """
    if not host:
        raise ConfigError(f"{owner}: the URL has no host")
    if literal_address(host) is not None:
        return host
    try:
        ascii_host = host.encode("idna").decode("ascii").lower()
    except (UnicodeError, ValueError):
        raise ConfigError(f"{owner}: {host!r} is not a valid host name") from None
    name = ascii_host[:-1] if ascii_host.endswith(".") else ascii_host
    if len(name) > 253 or not all(_HOST_LABEL.match(label) for label in name.split(".")):
        raise ConfigError(f"{owner}: {host!r} is not a valid host name")
    return ascii_host


def split_url(url: str, schemes: tuple[str, ...], owner: str, example: str) -> tuple[Any, int | None]:
    """``urlsplit`` and the port, or a :class:`ConfigError` that says what is wrong (never a bare
    ValueError). Whitespace and control characters are refused anywhere in the URL; so is port 0.

    >>> split_url("http://[::1", ("http",), "Webhook", "http://host/path")
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: Webhook: invalid URL 'http://[::1' (Invalid IPv6 URL); use http://host/path
    """
    if not isinstance(url, str):
        raise ConfigError(f"{owner}: the URL must be a string")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ConfigError(f"{owner}: the URL contains whitespace or control characters; use {example}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{owner}: invalid URL {_shown(url)} ({exc}); use {example}") from None
    if parts.scheme not in schemes:
        raise ConfigError(f"{owner}: {parts.scheme or 'no'} scheme in the URL; use {example}")
    if port == 0:
        raise ConfigError(f"{owner}: port 0 in the URL; give the port the server listens on")
    return parts, port


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def _shown(url: str) -> str:
    """A URL for an error message, its credentials masked."""
    head, sep, tail = url.partition("://")
    authority = tail.split("/", 1)[0]
    if sep and "@" in authority:
        tail = "***@" + tail.split("@", 1)[1]
    return repr(redact_url(head + sep + tail))


def _check_http_url(url: str, owner: str) -> tuple[str, str, int]:
    parts, port = split_url(url, ("http", "https"), owner, "https:// (or http://)")
    if parts.username or parts.password:
        raise ConfigError(f"{owner}: put no credentials in the URL (the webhook is authenticated by its signature)")
    host = check_host(parts.hostname, owner)
    return parts.scheme, host, port or (443 if parts.scheme == "https" else 80)


class HTTPSink(Sink):
    """What the webhook and Slack sinks share: a POST of JSON with the address rules above."""

    def __init__(self, url: str, *, name: str | None = None, timeout: float = 10.0,
                 allow_private: bool = False, severities: Sequence[str] | None = None,
                 min_severity: str | None = None) -> None:
        self.scheme, self.host, self.port = _check_http_url(url, type(self).__name__)
        self.url = url
        self.allow_private = bool(allow_private)
        self._client: Any = None
        self._client_pid = 0
        self._client_lock = threading.Lock()
        literal = literal_address(self.host)  # None for a name: checked where it resolves, at each delivery
        if not self.allow_private and literal is not None:
            problem = _refusal(literal)
            if problem:
                shown = self.host if literal == self.host else f"{self.host} ({literal})"
                raise ConfigError(f"{type(self).__name__}: {shown} is {problem}; alerts go only to "
                                  "public addresses unless you pass allow_private=True")
        super().__init__(name, timeout=timeout, severities=severities, min_severity=min_severity)

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
                problem = _refusal(a)
                if problem:
                    raise DeliveryError(f"refused: {self.host} resolves to {a}, {problem}; "
                                        "pass allow_private=True to allow it")
        return addrs[0]

    def post(self, body: bytes, headers: Mapping[str, str]) -> int:
        """POST ``body`` to the URL, connected to the checked address; returns the status code.

        The whole request (resolving, connecting, sending, reading the answer) ends within
        ``timeout`` seconds, or it fails as timed out, however slowly the receiver answers.
        """
        from firesafe.alerts import transport

        started = time.monotonic()
        ip = self._resolve()
        left = self.timeout - (time.monotonic() - started)
        if left <= 0:
            raise DeliveryError(f"timed out after {self.timeout:g}s (resolving {self.host})")
        import httpcore

        parts = urlsplit(self.url)
        target = quote(parts.path or "/", safe=_URL_SAFE) + (f"?{quote(parts.query, safe=_URL_SAFE + '?')}"
                                                            if parts.query else "")
        url = httpcore.URL(scheme=self.scheme, host=ip, port=self.port, target=target)
        default_port = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        host_header = host if self.port == default_port else f"{host}:{self.port}"
        extensions = {"sni_hostname": self.host} if self.scheme == "https" else {}
        try:
            answer = transport.post(self._http(), url, body, {**headers, "Host": host_header,
                                                               "User-Agent": _user_agent()}, left, extensions)
        except transport.TIMEOUTS as exc:
            raise DeliveryError(f"timed out after {self.timeout:g}s ({type(exc).__name__})") from None
        except transport.FAILURES as exc:
            raise DeliveryError(f"{type(exc).__name__}: {exc}") from None
        if 300 <= answer.status < 400:
            raise DeliveryError(f"HTTP {answer.status}: redirect to {answer.headers.get('location', '?')!r} "
                                "not followed")
        if not 200 <= answer.status < 300:
            raise DeliveryError(f"HTTP {answer.status}: {answer.body[:200].decode('utf-8', 'replace')}")
        return answer.status

    def _http(self) -> Any:
        """This process's connection pool of the sink, made once: its TLS context takes a noticeable
        amount of CPU to build, which retries against a sink that is down must not spend each time."""
        from firesafe.alerts import transport

        with self._client_lock:
            if self._client is None or self._client_pid != os.getpid():
                # No proxy from the environment (it would bypass the address check), no redirects.
                self._client = transport.pool(_ssl_context())
                self._client_pid = os.getpid()
            return self._client


#: Characters left as they are in a URL's path and query (the rest is percent-encoded).
_URL_SAFE = "/%:@!$&'()*+,;=-._~"


def _ssl_context() -> ssl.SSLContext:
    """The TLS context httpx would use (certifi's roots), without settings from the environment."""
    try:
        import httpx

        return httpx.create_ssl_context(verify=True, trust_env=False)
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - another httpx
        return ssl.create_default_context()


def _user_agent() -> str:
    from firesafe.version import __version__

    return f"firesafe/{__version__}"


def encode(document: Mapping[str, Any]) -> bytes:
    """The exact bytes a webhook sends (and signs): compact JSON in UTF-8. A document holding text
    that UTF-8 cannot carry (a lone surrogate) is sent as ASCII JSON, every non-ASCII character a
    ``\\u`` escape, rather than not at all.

    >>> encode({"m": "caf\\udce9", "n": 1})
    b'{"m":"caf\\\\udce9","n":1}'
    """
    try:
        return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          default=str).encode()
    except UnicodeEncodeError:
        return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str).encode()


class Webhook(HTTPSink):
    """POST each alert as JSON, signed with HMAC-SHA256.

    Headers: ``X-Firesafe-Timestamp`` (seconds since the epoch), ``X-Firesafe-Signature``
    (``sha256=`` + hex HMAC of ``timestamp + "." + body`` with ``secret``) and
    ``X-Firesafe-Alert-Id`` (the same for every retry: receivers deduplicate on it). Any 2xx is
    success; a redirect is a failure and is not followed.
    """

    kind = "webhook"

    def __init__(self, url: str, secret: str, *, name: str | None = None, timeout: float = 10.0,
                 allow_private: bool = False, headers: Mapping[str, str] | None = None,
                 severities: Sequence[str] | None = None, min_severity: str | None = None) -> None:
        if not isinstance(secret, (str, bytes)) or not secret:
            raise ConfigError("Webhook: give a non-empty secret; receivers check the signature with it")
        self.secret = secret
        self.headers = dict(headers or {})
        super().__init__(url, name=name, timeout=timeout, allow_private=allow_private, severities=severities,
                         min_severity=min_severity)

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
                 sender: str | None = None, name: str | None = None, timeout: float = 10.0,
                 severities: Sequence[str] | None = None, min_severity: str | None = None) -> None:
        example = "smtp://host:port or smtps://host:port"
        parts, port = split_url(smtp, ("smtp", "smtps"), "Email", example)
        if not parts.hostname:
            raise ConfigError(f"Email: smtp must look like {example}, not {_shown(smtp)}")
        self.port = port or (465 if parts.scheme == "smtps" else 25)
        self.tls = parts.scheme == "smtps"
        self.host = check_host(parts.hostname, "Email")
        options = dict(parse_qsl(parts.query))
        self.starttls = options.get("starttls", "").lower() in ("1", "true", "yes")
        self.username = unquote(parts.username) if parts.username else None
        self.password = unquote(parts.password) if parts.password else None
        recipients = [to] if isinstance(to, str) else list(to)
        if not recipients or not all(isinstance(r, str) and "@" in r for r in recipients):
            raise ConfigError("Email: give to=[...] with at least one address like oncall@example.com")
        self.to = recipients
        self.sender = sender or f"firesafe@{socket.gethostname() or 'localhost'}"
        super().__init__(name, timeout=timeout, severities=severities, min_severity=min_severity)

    def __repr__(self) -> str:
        return f"<Email {self.name} via {self.host}:{self.port}>"

    def message(self, document: Mapping[str, Any]) -> EmailMessage:
        """The email of one alert. What comes from the alert is data: in a header it is one line
        (a CR or LF is written ``\\r`` / ``\\n``, so it cannot start another header), and in the
        body any text UTF-8 cannot carry, NUL and control characters are written as escapes."""
        msg = EmailMessage()
        msg["Subject"] = for_log(subject(document))
        msg["From"] = formataddr(("firesafe", self.sender))
        msg["To"] = ", ".join(self.to)
        msg["Message-ID"] = make_msgid(domain=self.sender.rsplit("@", 1)[-1])
        if document.get("id") is not None:
            msg["X-Firesafe-Alert-Id"] = for_log(str(document["id"]))
        msg.set_content(for_store(to_text(document)))
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
