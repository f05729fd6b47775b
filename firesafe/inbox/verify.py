"""How a webhook source proves a request is its own: an HMAC signature or a bearer token.

Each verifier is a pure function of the secret, the headers and the raw body (and, for signatures
with a timestamp, the current time), so it is tested without a server or a clock.

What each one proves, exactly (``signs_body`` says whether the body is covered):

- :class:`Hmac`: the raw body bytes, nothing else. Headers (an event id or type sent in them) and
  the time are not covered: a captured request can be sent again, under any id, at any time.
- :class:`StripeSignature`: the raw body bytes and the ``t=`` timestamp (``t + "." + body``),
  accepted within ``tolerance`` seconds of now. Other headers are not covered.
- :class:`Bearer`: nothing of the request: the token proves who sent it, and whoever holds the
  token can send anything.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar


class Unverified(Exception):
    """The request did not prove where it came from."""


def _bytes(text: str) -> bytes:
    """A header value as bytes to compare (``hmac.compare_digest`` takes str of ASCII only)."""
    return text.encode("utf-8", "replace")


def _get(headers: Mapping[str, str], name: str) -> str | None:
    lowered = name.lower()
    for k, v in headers.items():
        if k.lower() == lowered:
            return v
    return None


@dataclass(frozen=True)
class Hmac:
    """An HMAC of the raw body in a header, GitHub style: ``X-Hub-Signature-256: sha256=<hex>``.

    >>> v = Hmac("s3cret")
    >>> body = b'{"id": "1"}'
    >>> sig = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    >>> v.verify({"X-Hub-Signature-256": sig}, body, now=0.0)
    >>> v.verify({"X-Hub-Signature-256": sig}, body + b" ", now=0.0)
    Traceback (most recent call last):
    ...
    firesafe.inbox.verify.Unverified: the signature does not match the body
    """

    secret: str
    header: str = "X-Hub-Signature-256"
    prefix: str = "sha256="
    signs_body: ClassVar[bool] = True

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> None:
        given = _get(headers, self.header)
        if not given:
            raise Unverified(f"missing signature header {self.header}")
        if self.prefix and not given.startswith(self.prefix):
            raise Unverified(f"signature header {self.header} must start with {self.prefix!r}")
        expected = self.prefix + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected.encode(), _bytes(given.strip())):
            raise Unverified("the signature does not match the body")


@dataclass(frozen=True)
class StripeSignature:
    """Stripe style: ``Stripe-Signature: t=<unix time>,v1=<hex HMAC of "t.body">``, within a tolerance.

    >>> body = b'{"id": "evt_1"}'
    >>> mac = hmac.new(b"whsec", b"100." + body, hashlib.sha256).hexdigest()
    >>> StripeSignature("whsec").verify({"Stripe-Signature": f"t=100,v1={mac}"}, body, now=150.0)
    >>> StripeSignature("whsec").verify({"Stripe-Signature": f"t=100,v1={mac}"}, body, now=1000.0)
    Traceback (most recent call last):
    ...
    firesafe.inbox.verify.Unverified: the signature's timestamp is 900s away from now (tolerance 300s)
    """

    secret: str
    header: str = "Stripe-Signature"
    tolerance: float = 300.0
    signs_body: ClassVar[bool] = True

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> None:
        given = _get(headers, self.header)
        if not given:
            raise Unverified(f"missing signature header {self.header}")
        parts: dict[str, list[str]] = {}
        for item in given.split(","):
            k, _, v = item.strip().partition("=")
            parts.setdefault(k, []).append(v)
        t = parts.get("t", [""])[0]
        if not (t.isascii() and t.isdigit() and len(t) <= 12):  # unix seconds, in ASCII digits
            raise Unverified("the signature header has no valid t= timestamp")
        stamp = int(t)
        if abs(now - stamp) > self.tolerance:
            raise Unverified(f"the signature's timestamp is {abs(now - stamp):.0f}s away from now "
                             f"(tolerance {self.tolerance:.0f}s)")
        expected = hmac.new(self.secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
        if not any(hmac.compare_digest(expected.encode(), _bytes(v)) for v in parts.get("v1", [])):
            raise Unverified("the signature does not match the body")


@dataclass(frozen=True)
class Bearer:
    """``Authorization: Bearer <token>``.

    >>> Bearer("t0k").verify({"authorization": "Bearer t0k"}, b"", now=0.0)
    """

    token: str
    signs_body: ClassVar[bool] = False

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> None:
        given = _get(headers, "Authorization") or ""
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(_bytes(value.strip()), self.token.encode()):
            raise Unverified("missing or wrong bearer token")
