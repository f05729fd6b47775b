"""The address guard of the HTTP sinks: firesafe's own table of special-purpose ranges.

Classification only: these tests build sinks and resolve names through a stubbed resolver, and the
sending function is replaced by one that fails the test, so nothing is ever sent to any address.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest

from firesafe import ConfigError
from firesafe.alerts import DeliveryError, Slack, Webhook, transport
from firesafe.alerts.addresses import (
    IPV4_SPECIAL,
    IPV6_EMBEDDING,
    IPV6_SPECIAL,
    SpecialRange,
    address_problem,
    embedded_ipv4,
    special_range,
)

#: Public addresses of both families, in every spelling that embeds an IPv4 address.
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "2a00:1450:4001::200e",
          "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", "::808:808", "::ffff:0:808:808"]


@pytest.fixture(autouse=True)
def nothing_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a classification test tried to send a request")

    monkeypatch.setattr(transport, "post", refuse)


def _url(ip: str) -> str:
    return f"http://[{ip}]/hook" if ":" in ip else f"http://{ip}/hook"


def _samples(row: SpecialRange) -> list[str]:
    """The first, a middle and the last address of a range."""
    net = row.network
    return [str(net[0]), str(net[net.num_addresses // 2]), str(net[-1])]


def _refused_when_declared(ip: str) -> str:
    with pytest.raises(ConfigError, match="alerts go only to public addresses") as caught:
        Webhook(_url(ip), secret="s")
    with pytest.raises(ConfigError, match="alerts go only to public addresses"):
        Slack(_url(ip))
    return str(caught.value)


@pytest.mark.parametrize("row", IPV4_SPECIAL + IPV6_SPECIAL, ids=lambda r: f"{r.network} {r.name}")
def test_every_special_purpose_range_is_refused_by_its_own_row(row: SpecialRange) -> None:
    for ip in _samples(row):
        found = special_range(ip)
        assert found is not None and ipaddress.ip_address(ip) in found.network, ip
        assert found.network.prefixlen >= row.network.prefixlen  # the most specific row names it
        message = _refused_when_declared(ip)
        assert f"{found.network}: {found.name}, {found.rfc}" in message and found.kind in message


@pytest.mark.parametrize("row, where", IPV6_EMBEDDING, ids=lambda r: str(getattr(r, "network", r)))
def test_ipv6_that_embeds_ipv4_is_judged_by_the_ipv4_address(row: SpecialRange, where: str) -> None:
    for inner, kind in (("169.254.169.254", "link-local"), ("10.0.0.1", "private"), ("127.0.0.1", "loopback"),
                        ("192.0.0.192", "reserved"), ("100.64.0.1", "private")):
        bits = int(ipaddress.IPv4Address(inner))
        value = int(row.network[0]) | (bits << 80 if where == "6to4" else bits)
        ip = str(ipaddress.IPv6Address(value))
        assert str(embedded_ipv4(ipaddress.IPv6Address(ip))) == inner, ip
        assert address_problem(ip) == kind, ip
        assert f"is a {kind} address" in _refused_when_declared(ip)
    bits = int(ipaddress.IPv4Address("8.8.8.8"))
    public = ipaddress.IPv6Address(int(row.network[0]) | (bits << 80 if where == "6to4" else bits))
    assert special_range(public) is None


def test_the_three_addresses_python_3_11_7_calls_public_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """192.0.0.192 (IETF protocol assignments), ::ffff:0:a9fe:a9fe (IPv4-translated 169.254.169.254,
    the cloud metadata service) and fec0::1 (deprecated site-local): refused when declared, and when
    a name resolves to them."""
    expected = {"192.0.0.192": "a reserved address (192.0.0.0/24: IETF Protocol Assignments, RFC 6890)",
                "::ffff:0:a9fe:a9fe": "a link-local address (169.254.0.0/16: Link Local, RFC 3927)",
                "fec0::1": "a private address (fec0::/10: Site-Local (deprecated), RFC 3879)"}
    for ip, words in expected.items():
        assert words in _refused_when_declared(ip)
    answers: dict[str, str] = {}

    def resolver(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        ip = answers[host]
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (ip, port, 0, 0) if ":" in ip else (ip, port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    for ip, words in expected.items():
        answers["hooks.example.com"] = ip
        for sink in (Webhook("http://hooks.example.com/x", secret="s"), Slack("http://hooks.example.com/x")):
            with pytest.raises(DeliveryError, match=rf"refused: hooks.example.com resolves to {ip}, "):
                sink.deliver({"id": 1})
            with pytest.raises(DeliveryError) as caught:
                sink.deliver({"id": 1})
            assert words in str(caught.value) and "allow_private=True" in str(caught.value)


def test_ipv6_outside_global_unicast_is_refused() -> None:
    for ip in ("4000::1", "100:0:0:2::1", "e000::1", "fe00::1", "::2:0:0:1"):
        row = special_range(ip)
        assert row is not None and row.kind == "reserved", ip
        _refused_when_declared(ip)


def test_public_addresses_pass_in_every_spelling() -> None:
    for ip in PUBLIC:
        assert special_range(ip) is None and address_problem(ip) is None, ip
        Webhook(_url(ip), secret="s")
        Slack(_url(ip))


def test_the_verdict_does_not_ask_pythons_ipaddress(monkeypatch: pytest.MonkeyPatch) -> None:
    """``is_private``, ``is_global`` and friends changed between patch releases; the guard uses none."""
    def boom(self: Any) -> bool:
        raise AssertionError("the guard asked ipaddress for its own verdict")

    for cls in (ipaddress.IPv4Address, ipaddress.IPv6Address):
        for prop in ("is_private", "is_global", "is_loopback", "is_link_local", "is_multicast", "is_reserved",
                     "is_unspecified", "is_site_local", "ipv4_mapped", "sixtofour", "teredo"):
            if hasattr(cls, prop):
                monkeypatch.setattr(cls, prop, property(boom))
    assert [address_problem(a) for a in ("192.0.0.192", "::ffff:0:a9fe:a9fe", "fec0::1", "8.8.8.8",
                                         "::ffff:10.0.0.1", "2002:7f00:1::", "64:ff9b::808:808")] == \
        ["reserved", "link-local", "private", None, "private", "loopback", None]


def test_loopback_is_allowed_when_asked() -> None:
    """The tests' own receivers run on 127.0.0.1 and ::1 with ``allow_private=True``."""
    for ip in ("127.0.0.1", "::1", "192.0.0.192", "fec0::1"):
        assert Webhook(_url(ip), secret="s", allow_private=True).host
        assert Slack(_url(ip), allow_private=True).host
