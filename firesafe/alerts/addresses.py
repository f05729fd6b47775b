"""Which addresses an alert sink may call: firesafe's own table of special-purpose ranges.

The table is data: one row per range of the IANA IPv4 and IPv6 Special-Purpose Address Registries
(as of 2025), plus multicast, the deprecated IPv6 site-local block, and the IPv6 space outside
global unicast (``2000::/3``). It does not ask :mod:`ipaddress` (``is_private`` and ``is_global``
changed between patch releases: 3.11.7 calls ``192.0.0.192``, ``fec0::1`` and the IPv4-translated
``::ffff:0:a9fe:a9fe`` public), so the same address gets the same answer on every Python.

Every range of the registries is refused, even the few IANA marks globally reachable (the PCP and
TURN anycast addresses, AS112, AMT): none of them is a place for an alert to go. An IPv6 address
that carries an IPv4 address (IPv4-mapped, IPv4-translated, IPv4-compatible, NAT64, 6to4) is judged
by that IPv4 address, since that is what a packet to it reaches.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class SpecialRange:
    """One row of the table: the range, its name in the registry, the RFC that defines it, and the
    word an error message uses for it (``loopback``, ``private``, ``link-local``, ``unspecified``,
    ``multicast`` or ``reserved``)."""

    network: IPNetwork
    name: str
    rfc: str
    kind: str

    def __str__(self) -> str:
        return f"{self.network}: {self.name}, {self.rfc}"


def _rows(*rows: tuple[str, str, str, str]) -> tuple[SpecialRange, ...]:
    return tuple(SpecialRange(ipaddress.ip_network(net), name, rfc, kind) for net, name, rfc, kind in rows)


#: The IANA IPv4 Special-Purpose Address Registry, with multicast (RFC 5771).
IPV4_SPECIAL = _rows(
    ("0.0.0.0/8", "This network", "RFC 791", "reserved"),
    ("0.0.0.0/32", "This host on this network", "RFC 1122", "unspecified"),
    ("10.0.0.0/8", "Private-Use", "RFC 1918", "private"),
    ("100.64.0.0/10", "Shared Address Space", "RFC 6598", "private"),
    ("127.0.0.0/8", "Loopback", "RFC 1122", "loopback"),
    ("169.254.0.0/16", "Link Local", "RFC 3927", "link-local"),
    ("172.16.0.0/12", "Private-Use", "RFC 1918", "private"),
    ("192.0.0.0/24", "IETF Protocol Assignments", "RFC 6890", "reserved"),
    ("192.0.0.0/29", "IPv4 Service Continuity Prefix", "RFC 7335", "reserved"),
    ("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", "reserved"),
    ("192.0.0.9/32", "Port Control Protocol Anycast", "RFC 7723", "reserved"),
    ("192.0.0.10/32", "Traversal Using Relays around NAT Anycast", "RFC 8155", "reserved"),
    ("192.0.0.170/31", "NAT64/DNS64 Discovery", "RFC 8880", "reserved"),
    ("192.0.2.0/24", "Documentation (TEST-NET-1)", "RFC 5737", "reserved"),
    ("192.31.196.0/24", "AS112-v4", "RFC 7535", "reserved"),
    ("192.52.193.0/24", "AMT", "RFC 7450", "reserved"),
    ("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", "RFC 7526", "reserved"),
    ("192.88.99.2/32", "6a44-relay anycast address", "RFC 6751", "reserved"),
    ("192.168.0.0/16", "Private-Use", "RFC 1918", "private"),
    ("192.175.48.0/24", "Direct Delegation AS112 Service", "RFC 7534", "reserved"),
    ("198.18.0.0/15", "Benchmarking", "RFC 2544", "reserved"),
    ("198.51.100.0/24", "Documentation (TEST-NET-2)", "RFC 5737", "reserved"),
    ("203.0.113.0/24", "Documentation (TEST-NET-3)", "RFC 5737", "reserved"),
    ("224.0.0.0/4", "Multicast", "RFC 5771", "multicast"),
    ("240.0.0.0/4", "Reserved", "RFC 1112", "reserved"),
    ("255.255.255.255/32", "Limited Broadcast", "RFC 919", "reserved"),
)

#: The IANA IPv6 Special-Purpose Address Registry, with multicast and the deprecated site-local
#: block. The ranges that embed an IPv4 address are in :data:`IPV6_EMBEDDING` instead.
IPV6_SPECIAL = _rows(
    ("::/128", "Unspecified Address", "RFC 4291", "unspecified"),
    ("::1/128", "Loopback Address", "RFC 4291", "loopback"),
    ("64:ff9b:1::/48", "IPv4-IPv6 Translat. (local-use)", "RFC 8215", "reserved"),
    ("100::/64", "Discard-Only Address Block", "RFC 6666", "reserved"),
    ("100:0:0:1::/64", "Dummy IPv6 Prefix", "RFC 9780", "reserved"),
    ("2001::/23", "IETF Protocol Assignments", "RFC 2928", "reserved"),
    ("2001::/32", "TEREDO", "RFC 4380", "reserved"),
    ("2001:1::1/128", "Port Control Protocol Anycast", "RFC 7723", "reserved"),
    ("2001:1::2/128", "Traversal Using Relays around NAT Anycast", "RFC 8155", "reserved"),
    ("2001:1::3/128", "DNS-SD Service Registration Protocol Anycast", "RFC 9665", "reserved"),
    ("2001:2::/48", "Benchmarking", "RFC 5180", "reserved"),
    ("2001:3::/32", "AMT", "RFC 7450", "reserved"),
    ("2001:4:112::/48", "AS112-v6", "RFC 7535", "reserved"),
    ("2001:10::/28", "Deprecated (previously ORCHID)", "RFC 4843", "reserved"),
    ("2001:20::/28", "ORCHIDv2", "RFC 7343", "reserved"),
    ("2001:30::/28", "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374", "reserved"),
    ("2001:db8::/32", "Documentation", "RFC 3849", "reserved"),
    ("2620:4f:8000::/48", "Direct Delegation AS112 Service", "RFC 7534", "reserved"),
    ("3fff::/20", "Documentation", "RFC 9637", "reserved"),
    ("5f00::/16", "Segment Routing (SRv6) SIDs", "RFC 9602", "reserved"),
    ("fc00::/7", "Unique-Local", "RFC 4193", "private"),
    ("fe80::/10", "Link-Local Unicast", "RFC 4291", "link-local"),
    ("fec0::/10", "Site-Local (deprecated)", "RFC 3879", "private"),
    ("ff00::/8", "Multicast", "RFC 4291", "multicast"),
)

#: IPv6 ranges whose addresses carry an IPv4 address, and where it sits: ``low32`` (the last 32
#: bits) or ``6to4`` (bits 16 to 47). Such an address is judged by its IPv4 address.
IPV6_EMBEDDING: tuple[tuple[SpecialRange, str], ...] = tuple(zip(_rows(
    ("::ffff:0:0/96", "IPv4-mapped Address", "RFC 4291", "reserved"),
    ("::ffff:0:0:0/96", "IPv4-translated Address", "RFC 2765", "reserved"),
    ("::/96", "IPv4-compatible Address (deprecated)", "RFC 4291", "reserved"),
    ("64:ff9b::/96", "IPv4-IPv6 Translat.", "RFC 6052", "reserved"),
    ("2002::/16", "6to4", "RFC 3056", "reserved"),
), ("low32", "low32", "low32", "low32", "6to4"), strict=True))

#: IPv6 global unicast (IANA IPv6 Address Space registry): every other IPv6 address that embeds
#: no IPv4 address is reserved or special, and refused.
GLOBAL_UNICAST = SpecialRange(ipaddress.IPv6Network("2000::/3"), "Global Unicast", "RFC 4291", "reserved")
OUTSIDE_GLOBAL_UNICAST = SpecialRange(ipaddress.IPv6Network("::/0"), "outside Global Unicast 2000::/3",
                                      "RFC 4291", "reserved")


def _most_specific(addr: IPAddress, table: tuple[SpecialRange, ...]) -> SpecialRange | None:
    best: SpecialRange | None = None
    for row in table:
        if addr in row.network and (best is None or row.network.prefixlen > best.network.prefixlen):
            best = row
    return best


def embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address reaches through mapping, translation, NAT64, 6to4 or the
    old IPv4-compatible form (None if it embeds none; ``::`` and ``::1`` embed none).

    >>> [str(embedded_ipv4(ipaddress.IPv6Address(a))) for a in ("64:ff9b::a9fe:a9fe", "::ffff:10.0.0.1",
    ...      "::ffff:0:a9fe:a9fe", "2002:7f00:1::", "::7f00:1", "::1", "2001:db8::1")]
    ['169.254.169.254', '10.0.0.1', '169.254.169.254', '127.0.0.1', '127.0.0.1', 'None', 'None']
    """
    for row, where in IPV6_EMBEDDING:
        if addr in row.network:
            if where == "6to4":
                return ipaddress.IPv4Address((int(addr) >> 80) & 0xFFFFFFFF)
            if row.network.prefixlen == 96 and int(addr) <= 1:  # :: and ::1 are not ::0.0.0.0 and ::0.0.0.1
                return None
            return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def special_range(ip: str | IPAddress) -> SpecialRange | None:
    """The most specific special-purpose range that holds ``ip`` (None: a public address).

    An IPv6 address that embeds an IPv4 address is judged by that address: a special IPv4 address
    answers for it; a public one lets mapped, translated, compatible, NAT64 and 6to4 addresses pass.

    >>> for a in ("192.0.0.192", "::ffff:0:a9fe:a9fe", "fec0::1"):
    ...     print(special_range(a))
    192.0.0.0/24: IETF Protocol Assignments, RFC 6890
    169.254.0.0/16: Link Local, RFC 3927
    fec0::/10: Site-Local (deprecated), RFC 3879
    >>> [special_range(a) for a in ("93.184.216.34", "2606:2800:220:1::1", "::ffff:8.8.8.8", "64:ff9b::808:808")]
    [None, None, None, None]
    """
    addr = ipaddress.ip_address(ip.split("%", 1)[0]) if isinstance(ip, str) else ip
    if isinstance(addr, ipaddress.IPv4Address):
        return _most_specific(addr, IPV4_SPECIAL)
    inner = embedded_ipv4(addr)
    if inner is not None:
        return _most_specific(inner, IPV4_SPECIAL)
    found = _most_specific(addr, IPV6_SPECIAL)
    if found is None and addr not in GLOBAL_UNICAST.network:
        return OUTSIDE_GLOBAL_UNICAST
    return found


def address_problem(ip: str | IPAddress) -> str | None:
    """Why an address may not be called without ``allow_private`` (None: it is public): the kind
    of its special-purpose range.

    >>> [address_problem(a) for a in ("127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "93.184.216.34")]
    ['loopback', 'private', 'link-local', 'loopback', None]
    >>> [address_problem(a) for a in ("::ffff:192.168.0.1", "64:ff9b::a9fe:a9fe", "64:ff9b::808:808")]
    ['private', 'link-local', None]
    """
    row = special_range(ip)
    return None if row is None else row.kind
