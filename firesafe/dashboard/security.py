"""The dashboard's guards, as pure functions: tokens, loopback binds, CSRF tokens and origins.

The rules they keep: a non-loopback bind needs a token, and so does a non-loopback public URL;
without a token only loopback ``Host`` names are served (no DNS rebinding); a state-changing
request needs a CSRF token bound to the browser's cookie, and a same-origin ``Origin`` when the
browser sends one (the public URL's origin, when the operator states one).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from firesafe.errors import ConfigError

#: A token's secret must be at least this long: it is the only lock on a non-loopback bind.
MIN_SECRET = 16
_TOKEN_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})


@dataclass(frozen=True)
class Token:
    """The dashboard's access token; ``name`` (optional) is recorded as the actor of replays."""

    secret: str
    name: str | None = None

    def __repr__(self) -> str:  # never print the secret
        return f"Token(name={self.name!r}, secret='********')"


def parse_token(spec: str | None) -> Token | None:
    """A token from ``SECRET``, ``NAME:SECRET`` or ``NAME=SECRET`` (None or empty: no token).

    >>> parse_token("alice:0123456789abcdef0123")
    Token(name='alice', secret='********')
    >>> parse_token("0123456789abcdef0123").name is None
    True
    >>> parse_token("short")
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: the dashboard token is too short ...
    """
    if spec is None or not spec.strip():
        return None
    spec = spec.strip()
    name: str | None = None
    head, sep, tail = spec.partition(":")
    if not (sep and _TOKEN_NAME.match(head)):
        head, sep, tail = spec.partition("=")
    if sep and _TOKEN_NAME.match(head) and len(tail) >= MIN_SECRET:
        name, spec = head, tail
    if len(spec) < MIN_SECRET:
        raise ConfigError(
            f"the dashboard token is too short ({len(spec)} characters): use at least {MIN_SECRET}, "
            "for example: python -c 'import secrets; print(secrets.token_urlsafe(24))'")
    if not spec.isprintable() or any(c.isspace() for c in spec):
        raise ConfigError("the dashboard token must be printable characters without spaces")
    return Token(spec, name)


#: Several named tokens, one per person: ``$FIRESAFE_DASHBOARD_TOKENS`` holds them, comma-separated.
TOKENS_ENV = "FIRESAFE_DASHBOARD_TOKENS"


def parse_tokens(specs: Sequence[str]) -> list[Token]:
    """Several tokens, one per person, each ``NAME:SECRET`` or ``NAME=SECRET``: every one must have a
    name (it is recorded as the actor of that person's actions), and no two share a name or a secret.

    >>> parse_tokens(["alice=0123456789abcdef0123", "bob:abcdef0123456789abcd"])
    [Token(name='alice', secret='********'), Token(name='bob', secret='********')]
    >>> parse_tokens(["alice=0123456789abcdef0123", "0123456789abcdefXXXX"])
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: with several dashboard tokens each needs a name (NAME=SECRET) ...
    """
    tokens: list[Token] = []
    for spec in specs:
        head, sep, tail = spec.strip().partition("=")
        token = parse_token(f"{head}:{tail}" if sep and _TOKEN_NAME.match(head) else spec)
        if token is None:
            continue
        if token.name is None and len(specs) > 1:
            raise ConfigError("with several dashboard tokens each needs a name (NAME=SECRET), recorded as the "
                              "actor of that person's actions")
        if any(t.name == token.name or t.secret == token.secret for t in tokens):
            raise ConfigError(f"two dashboard tokens share the name {token.name!r} or a secret: give each person "
                              "a name and a secret of their own")
        tokens.append(token)
    return tokens


def read_tokens(text: str) -> list[str]:
    """The token specs of a tokens file or ``$FIRESAFE_DASHBOARD_TOKENS``: one per line or comma,
    blank lines and ``#`` comments skipped.

    >>> read_tokens("# ops\\nalice=0123456789abcdef0123\\n\\nbob=abcdef0123456789abcd, carol=x")
    ['alice=0123456789abcdef0123', 'bob=abcdef0123456789abcd', 'carol=x']
    """
    specs: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0] if line.lstrip().startswith("#") else line
        specs += [part.strip() for part in line.split(",") if part.strip()]
    return specs


def resolve_tokens(given: Sequence[str], file_text: str | None, single_env: str | None,
                   several_env: str | None) -> Token | list[Token] | None:
    """The dashboard's tokens: ``--token`` (repeated: one per person), else a tokens file, else
    ``$FIRESAFE_DASHBOARD_TOKENS`` (several), else ``$FIRESAFE_DASHBOARD_TOKEN`` (one); None if none.

    >>> resolve_tokens(["alice=0123456789abcdef0123"], None, None, None)
    Token(name='alice', secret='********')
    >>> len(resolve_tokens([], None, None, "a=0123456789abcdef0123,b=abcdef0123456789abcd"))
    2
    """
    specs = [g for g in given if g and g.strip()]
    if not specs and file_text is not None:
        specs = read_tokens(file_text)
        if not specs:
            raise ConfigError("the tokens file holds no token (one NAME=SECRET per line)")
    if not specs and several_env and several_env.strip():
        specs = read_tokens(several_env)
    if not specs:
        return parse_token(single_env)
    tokens = parse_tokens(specs)
    return tokens[0] if len(tokens) == 1 else tokens or None


def match_token(authorization: str | None, tokens: Token | Sequence[Token] | None) -> Token | None:
    """The token an ``Authorization`` header carries (see :func:`check_credentials`), among several;
    None if none does. Every token is compared, in constant time each, whichever matches.

    >>> a, b = Token("0123456789abcdef0123", "alice"), Token("abcdef0123456789abcd", "bob")
    >>> match_token("Bearer abcdef0123456789abcd", [a, b]).name, match_token("Bearer nope", [a, b])
    ('bob', None)
    """
    found: Token | None = None
    for token in _as_list(tokens):
        if check_credentials(authorization, token) and found is None:
            found = token
    return found


def _as_list(tokens: Token | Sequence[Token] | None) -> list[Token]:
    if tokens is None:
        return []
    return [tokens] if isinstance(tokens, Token) else list(tokens)


@dataclass(frozen=True)
class UserHeader:
    """A header that names the user (``X-Forwarded-User``), set by a reverse proxy that did the
    login, believed only on requests whose client address is one of ``trusted`` (the proxy's
    addresses or networks); from anyone else it is ignored."""

    name: str
    trusted: tuple[str, ...]

    def user(self, value: str | None, client: str | None) -> str | None:
        """The user a request names, if it came from a trusted proxy and names one.

        >>> h = UserHeader("X-Forwarded-User", ("127.0.0.1",))
        >>> h.user("alice", "127.0.0.1"), h.user("alice", "10.0.0.9"), h.user("", "127.0.0.1")
        ('alice', None, None)
        """
        if not value or not value.strip() or client is None:
            return None
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return None
        if not any(address in ipaddress.ip_network(net, strict=False) for net in self.trusted):
            return None
        return value.strip()[:MAX_USER]


#: The longest user name a proxy's header may give (longer ones are cut).
MAX_USER = 128


def parse_user_header(name: str | None, trusted: str | None) -> UserHeader | None:
    """``--user-header NAME`` with ``--user-header-from IPS``: both or neither (off by default).

    >>> parse_user_header("X-Forwarded-User", "127.0.0.1, 10.0.0.0/8")
    UserHeader(name='X-Forwarded-User', trusted=('127.0.0.1', '10.0.0.0/8'))
    >>> parse_user_header(None, None) is None
    True
    >>> parse_user_header("X-Forwarded-User", None)
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: --user-header needs --user-header-from: ...
    """
    if not (name and name.strip()) and not (trusted and trusted.strip()):
        return None
    if not (name and name.strip()):
        raise ConfigError("--user-header-from needs --user-header NAME (like X-Forwarded-User)")
    if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", name.strip()):
        raise ConfigError(f"--user-header takes a header name like X-Forwarded-User, not {name!r}")
    if not (trusted and trusted.strip()):
        raise ConfigError("--user-header needs --user-header-from: the addresses of the reverse proxy that sets "
                          "it (anyone else could name any user)")
    items = [i.strip() for i in trusted.split(",") if i.strip()]
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ConfigError(f"--user-header-from takes the addresses of your proxies (like 127.0.0.1 or "
                              f"10.0.0.0/8), comma-separated, not {item!r}") from None
    return UserHeader(name.strip(), tuple(items))


def is_loopback(host: str) -> bool:
    """Whether a bind address or ``Host`` name stays on this machine.

    >>> [is_loopback(h) for h in ("127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost", "0.0.0.0", "10.0.0.2")]
    [True, True, True, True, True, False, False]
    >>> is_loopback("evil.example.com")
    False
    """
    h = host.strip().lower()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if h in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str:
    """The name part of a ``Host`` header (without the port).

    >>> host_name("127.0.0.1:8642"), host_name("[::1]:8642"), host_name("localhost")
    ('127.0.0.1', '[::1]', 'localhost')
    """
    h = host_header.strip()
    if h.startswith("["):
        return h[: h.find("]") + 1] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


def check_credentials(authorization: str | None, token: Token) -> bool:
    """Whether an ``Authorization`` header carries the token (``Bearer SECRET``, or basic auth
    with the secret as the password and any user name).

    >>> t = Token("0123456789abcdef0123")
    >>> check_credentials("Bearer 0123456789abcdef0123", t), check_credentials("Bearer nope", t)
    (True, False)
    >>> basic = "Basic " + base64.b64encode(b"ann:0123456789abcdef0123").decode()
    >>> check_credentials(basic, t), check_credentials(None, t), check_credentials("Basic !!", t)
    (True, False, False)
    """
    if not authorization:
        return False
    scheme, _, value = authorization.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        given = value
    elif scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return False
        given = decoded.partition(":")[2]
    else:
        return False
    return hmac.compare_digest(given.encode(), token.secret.encode())


def csrf_token(key: bytes, session: str) -> str:
    """The CSRF token of a browser session (its cookie): an HMAC only this server can make.

    >>> csrf_token(b"k" * 32, "abc") == csrf_token(b"k" * 32, "abc") != csrf_token(b"k" * 32, "abd")
    True
    """
    return hmac.new(key, b"firesafe-csrf:" + session.encode(), hashlib.sha256).hexdigest()


def csrf_valid(key: bytes, session: str | None, given: str | None) -> bool:
    """Whether a submitted CSRF token matches the session cookie.

    >>> k = b"k" * 32
    >>> csrf_valid(k, "abc", csrf_token(k, "abc")), csrf_valid(k, None, "x"), csrf_valid(k, "abc", "")
    (True, False, False)
    """
    if not session or not given:
        return False
    return hmac.compare_digest(csrf_token(key, session), given)


def same_origin(origin: str | None, scheme: str, host_header: str, public: str | None = None) -> bool:
    """Whether a request's ``Origin`` (when the browser sent one) is the dashboard's own.

    >>> same_origin("http://127.0.0.1:8642", "http", "127.0.0.1:8642")
    True
    >>> same_origin("http://127.0.0.1:9999", "http", "127.0.0.1:8642")
    False
    >>> same_origin(None, "http", "127.0.0.1:8642"), same_origin("null", "http", "127.0.0.1:8642")
    (True, False)

    With ``public`` (see :func:`public_origin`), that origin is the dashboard's, whatever ``Host`` a
    reverse proxy passes on; the address it listens on stays its own only under a loopback name
    (an SSH tunnel, say):

    >>> p = "https://ops.example.com"
    >>> same_origin(p, "http", "127.0.0.1:8642", p), same_origin(p, "http", "ops.example.com", p)
    (True, True)
    >>> same_origin("http://ops.example.com", "http", "ops.example.com", p)
    False
    >>> same_origin("http://localhost:8642", "http", "localhost:8642", p)
    True
    """
    if origin is None:
        return True
    given = origin.strip().lower()
    if public is not None:
        if given == public:
            return True
        if not is_loopback(host_name(host_header)):
            return False
    return given == f"{scheme}://{host_header.strip().lower()}"


def public_origin(url: str) -> str:
    """The origin browsers send from a dashboard published at ``url`` (by a reverse proxy, say):
    its scheme, host and port, in lower case, without the scheme's default port. A path is allowed
    and plays no part (origins have none).

    >>> public_origin("https://Ops.Example.com/"), public_origin("https://ops.example.com:443/firesafe/")
    ('https://ops.example.com', 'https://ops.example.com')
    >>> public_origin("https://ops.example.com:8443"), public_origin("http://[::1]:8642")
    ('https://ops.example.com:8443', 'http://[::1]:8642')
    >>> public_origin("ops.example.com")
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: the dashboard's public URL must look like https://ops.example.com ...
    """
    shown = repr(url) if isinstance(url, str) else type(url).__name__
    problem = f"the dashboard's public URL must look like https://ops.example.com (scheme, host, port), not {shown}"
    if not isinstance(url, str) or not url.strip() or any(c.isspace() or not c.isprintable() for c in url.strip()):
        raise ConfigError(problem)
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise ConfigError(problem) from None
    if (parts.scheme.lower() not in ("http", "https") or not parts.hostname or parts.username is not None
            or parts.query or parts.fragment or port == 0):
        raise ConfigError(problem)
    scheme = parts.scheme.lower()
    try:
        host = parts.hostname.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise ConfigError(problem) from None
    if ":" in host:
        host = f"[{host}]"
    default = 443 if scheme == "https" else 80
    return f"{scheme}://{host}" if port in (None, default) else f"{scheme}://{host}:{port}"


def check_public(url: str | None, token: Token | Sequence[Token] | None) -> str | None:
    """The public origin of ``url`` (None without one); a dashboard published under any name but a
    loopback one is reachable from elsewhere, so it needs a token.

    >>> check_public("https://ops.example.com", None)
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: the dashboard is published at https://ops.example.com, so it needs a token: ...
    >>> check_public("https://localhost:8443", None), check_public(None, None)
    ('https://localhost:8443', None)
    """
    if url is None:
        return None
    origin = public_origin(url)
    if token is None and not is_loopback(host_name(origin.split("://", 1)[1])):
        raise ConfigError(f"the dashboard is published at {origin}, so it needs a token: anyone who reaches "
                          "that address could replay or discard jobs. Pass --token (or set "
                          "$FIRESAFE_DASHBOARD_TOKEN)")
    return origin


def parse_forwarded_allow_ips(spec: str | None) -> list[str] | None:
    """The reverse proxies whose ``X-Forwarded-Proto`` and ``X-Forwarded-For`` are believed:
    addresses or networks, comma-separated (None or empty: none, the default).

    >>> parse_forwarded_allow_ips("127.0.0.1, 10.0.0.0/8"), parse_forwarded_allow_ips(None)
    (['127.0.0.1', '10.0.0.0/8'], None)
    >>> parse_forwarded_allow_ips("*")
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: --forwarded-allow-ips takes the addresses of your proxies ...
    """
    if spec is None or not spec.strip():
        return None
    items = [item.strip() for item in spec.split(",") if item.strip()]
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ConfigError(f"--forwarded-allow-ips takes the addresses of your proxies (like 127.0.0.1 or "
                              f"10.0.0.0/8), comma-separated, not {item!r}: whoever it trusts can claim any "
                              "scheme and client address") from None
    return items


def actor_for(token: Token | None, client: str | None, user: str | None = None) -> str:
    """Who a dashboard action is recorded as: the user a trusted proxy named, else the token's name,
    else the client's address (always with where it came from).

    >>> actor_for(None, "127.0.0.1"), actor_for(Token("x" * 16, "alice"), "10.1.2.3")
    ('dashboard@127.0.0.1', 'alice (dashboard@10.1.2.3)')
    >>> actor_for(Token("x" * 16, "ops"), "127.0.0.1", user="bob")
    'bob (dashboard@127.0.0.1)'
    """
    where = f"dashboard@{client or 'unknown'}"
    name = user or (token.name if token else None)
    return f"{name} ({where})" if name else where


def new_session() -> str:
    import secrets

    return secrets.token_urlsafe(24)
