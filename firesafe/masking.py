"""The one place that hides secrets (invariant 9): CLI, dashboard, alerts, traces and logs all call it.

Three functions cover every output: :func:`mask` for values (arguments, results, log fields),
:func:`mask_text` for free text (error messages, tracebacks, log lines), :func:`redact_url` for
store and broker URLs. What they hide, and the rule that keeps prose as it is, is listed in
docs/operations.md ("Masking secrets"); users add names and value patterns with :class:`Mask`
(``App(mask=Mask(...))``, or ``$FIRESAFE_MASK_NAMES`` and ``$FIRESAFE_MASK_PATTERNS``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from firesafe.errors import ConfigError

MASK = "********"

#: Parts of a name that make it secret, matched anywhere in the name, ignoring case. ``pass`` counts
#: when no letter follows (``db_pass``, ``PGPASSWORD``; not ``passed``), ``token`` not in ``tokens`` or
#: ``tokenizer``, ``auth`` not in ``author``, ``authority`` or ``authorized`` (``authorization`` counts),
#: ``secret`` not in ``secretary``, ``session`` not in libpq's ``target_session_attrs``.
NAMES = (
    r"pass(?:word|wd|phrase|code)?(?![a-z])", "pwd", r"secret(?!ar)", r"token(?!i[sz]|s(?![a-z]))",
    r"api[_-]?key", r"access[_-]?key", r"private[_-]?key", r"auth(?!or(?!i[sz]ation))", "credential",
    "dsn", "cookie", r"session(?![_-]attrs)", "jwt",
)
#: What every secret name holds, ignoring case: text without any of them has no pair to read.
NAME_HINTS = ("pass", "pwd", "secret", "token", "key", "auth", "credential", "dsn", "cookie", "session", "jwt")

#: Values masked wherever they appear in text, whatever names them (case-sensitive); the group ``vN`` is
#: what is masked (the well-known prefix stays, to tell what it was). Each starts with a character that is
#: rare in prose, so text without secrets is skipped fast: the prefix is checked behind it.
PATTERNS = (
    r"J(?<=\beyJ)(?P<v1>[\w-]{5,}\.eyJ[\w-]{5,}\.[\w-]*)",  # a JWT: header and payload are base64url JSON
    r"-----BEGIN[A-Z ]* PRIVATE KEY-----(?P<v2>[\s\S]+?)(?:-----END[A-Z ]* PRIVATE KEY-----|\Z)",
    r"A(?<!\w.)(?:KIA|SIA)(?P<v3>[0-9A-Z]{16})(?![0-9A-Za-z])",  # an AWS access key id
    r"_(?<=\bgh[pousr]_)(?P<v4>[A-Za-z0-9]{30,})",  # a GitHub token
    r"_(?<=\bgithub_pat_)(?P<v5>\w{30,})",  # a GitHub fine-grained token
    r"x(?<!\w.)ox[abeprs]-(?P<v6>[\w-]{10,})",  # a Slack token
    r"_(?<=\b[rs]k_live_|\b[rs]k_test_)(?P<v7>\w{8,})",  # a Stripe key
)

# A value without quotes ends at white space, a quote or , ; ) } ] & < > (so ``password=x)`` keeps its ``)``).
_VAL = r"""[^\s"',;)}\]&<>]"""
# A quoted value runs to its closing quote, or to the end of the line if it has none; ``\"...\"`` is a
# quoted value inside a JSON string.
_VALUE = re.compile(r"""\\(["'])(?:(?!\\\1)[^\n])*(?:\\\1)?|"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?|""" + _VAL + "+")
# An unquoted value after ``name: `` looks like a secret: it holds a digit, a symbol between two of its
# characters, or a lower-case letter followed by an upper-case one. Plain words (``anyone``) are prose.
_SECRETISH = rf"(?={_VAL}{{0,256}}?(?:[0-9]|[._~+/=!@#$%^*:-]{_VAL}|[a-z][A-Z]))"
_SCHEME = r"(?i:bearer|basic|digest|negotiate|token)[ \t]{1,8}"
_QUOTE = r"""\\?["']"""
# Behind a separator: a name of three characters or more (the shortest is ``pwd``), a quote or a space.
_AFTER_NAME = r"""(?:(?<=[\w-]{3}.)|(?<=["' \t].))"""

# One regular expression finds every candidate, in one pass. Each alternative starts with a fixed
# character, so the engine skips the text between candidates at C speed, and looks only a bounded way
# ahead (hostile text stays linear). A pair matches only its separator: the name before it is read by
# :func:`_key_before`, the value after it by ``_VALUE``, and only when the name is secret; the text of
# a pair whose name is not secret is searched like any other. Text that holds no name hint (most log
# lines: ``attempt=1 outcome=succeeded``) is searched without the pairs (``_VALUES``).
_URL = r"""://[^\s/?#@:'"<>]*:(?P<url>[^\s/?#'"<>]+)(?=@)"""  # scheme://user:PASSWORD@host
_PAIR_ALTERNATIVES = (
    # name:value, name: "value", name: Basic value, name: value-that-looks-secret
    rf""":{_AFTER_NAME}(?=(?:{_SCHEME})?(?P<c>{_QUOTE}|{_VAL})"""
    rf"""|[ \t]{{1,8}}(?:{_SCHEME}|{_SECRETISH}|(?={_QUOTE}))(?P<c2>{_QUOTE}|{_VAL}))""",
    rf"""={_AFTER_NAME}(?!=)(?=[ \t]{{0,8}}(?:{_SCHEME})?(?P<e>{_QUOTE}|{_VAL}))""",  # name=value, name = "value"
)
_VALUE_ALTERNATIVES = (
    rf"B(?<!\w.)(?i:earer|asic)[ \t]{{1,8}}{_SECRETISH}(?P<b>{_VAL}+)",  # Bearer x.y in prose
    rf"b(?<!\w.)(?i:earer|asic)[ \t]{{1,8}}{_SECRETISH}(?P<b2>{_VAL}+)",
    *PATTERNS,
)
_TEXT = re.compile("|".join((_URL, *_PAIR_ALTERNATIVES, *_VALUE_ALTERNATIVES)))
_VALUES = re.compile("|".join((_URL, *_VALUE_ALTERNATIVES)))


@dataclass(frozen=True)
class Mask:
    """Names and value patterns to mask on top of firesafe's own (:data:`NAMES`, :data:`PATTERNS`).

    ``names`` are matched like the built-in ones: anywhere in an argument, field or key name,
    ignoring case (``"iban"`` masks ``iban``, ``payer_IBAN`` and ``iban: "DE89 3704"`` in text).
    ``patterns`` are regular expressions; every match is masked wherever text is printed (write
    ``(?i:...)`` to ignore case). Rules only add up: :func:`extend` never unmasks anything.

    >>> Mask(names=["iban"], patterns=["EMP-[0-9]{6}"])
    Mask(names=('iban',), patterns=('EMP-[0-9]{6}',))
    """

    names: Sequence[str] = ()
    patterns: Sequence[str] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(_check_names(self.names)))
        object.__setattr__(self, "patterns", tuple(_check_patterns(self.patterns)))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Mask:
        """``$FIRESAFE_MASK_NAMES`` (comma-separated) and ``$FIRESAFE_MASK_PATTERNS`` (one per line)."""
        env = os.environ if environ is None else environ
        names = [n.strip() for n in env.get("FIRESAFE_MASK_NAMES", "").split(",") if n.strip()]
        patterns = [p for p in env.get("FIRESAFE_MASK_PATTERNS", "").splitlines() if p.strip()]
        try:
            return cls(names=names, patterns=patterns)
        except ConfigError as exc:
            raise ConfigError(f"$FIRESAFE_MASK_NAMES / $FIRESAFE_MASK_PATTERNS: {exc}") from None


def _check_names(names: Iterable[str]) -> list[str]:
    if isinstance(names, str):
        raise ConfigError("Mask(names=...) takes a list of names, not one string")
    out = []
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"Mask(names=...): {name!r} is not a name")
        out.append(name.strip())
    return out


def _check_patterns(patterns: Iterable[str]) -> list[str]:
    if isinstance(patterns, str):
        raise ConfigError("Mask(patterns=...) takes a list of regular expressions, not one string")
    out = []
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise ConfigError(f"Mask(patterns=...): {pattern!r} is not a regular expression string")
        try:
            compiled = re.compile(f"(?:{pattern})")
        except re.error as exc:
            raise ConfigError(f"Mask(patterns=...): {pattern!r} is not a regular expression ({exc}); "
                              "flags go inside it, as (?i:...)") from None
        if compiled.groupindex:
            raise ConfigError(f"Mask(patterns=...): {pattern!r} names a group; the whole match is masked, "
                              "use (?:...) groups")
        if compiled.fullmatch(""):
            raise ConfigError(f"Mask(patterns=...): {pattern!r} matches empty text")
        out.append(pattern)
    return out


_Rules = tuple[Mask, re.Pattern[str], tuple[str, ...], re.Pattern[str] | None]


def _rules(extra: Mask) -> _Rules:
    """The rules with ``extra``'s: the name regex, its hints and the regex of the user's value patterns."""
    name = re.compile("|".join((*NAMES, *(re.escape(n) for n in extra.names))), re.I)
    hints = (*NAME_HINTS, *(n.lower() for n in extra.names))
    user = re.compile("|".join(f"(?:{p})" for p in extra.patterns)) if extra.patterns else None
    return extra, name, hints, user


def _rules_from_env() -> tuple[_Rules, ConfigError | None]:
    try:
        return _rules(Mask.from_env()), None
    except ConfigError as exc:  # raised by check() and extend() (App()), not here: a mistake is no traceback
        return _rules(Mask()), exc


(_EXTRA, _NAME, _HINTS, _USER), _ENV_ERROR = _rules_from_env()


def check() -> None:
    """Raise :class:`~firesafe.errors.ConfigError` if ``$FIRESAFE_MASK_NAMES`` or
    ``$FIRESAFE_MASK_PATTERNS`` is invalid (``App()`` and every CLI command call it before any output;
    meanwhile the masking functions apply firesafe's own rules)."""
    if _ENV_ERROR is not None:
        raise _ENV_ERROR


def extend(extra: Mask) -> None:
    """Mask ``extra``'s names and patterns too, from now on, in this process (every output); first
    :func:`check` the environment's."""
    global _EXTRA, _NAME, _HINTS, _USER
    check()
    merged = Mask(names=[*_EXTRA.names, *(n for n in extra.names if n not in _EXTRA.names)],
                  patterns=[*_EXTRA.patterns, *(p for p in extra.patterns if p not in _EXTRA.patterns)])
    if merged != _EXTRA:
        _EXTRA, _NAME, _HINTS, _USER = _rules(merged)


def is_secret_name(name: str) -> bool:
    """Whether an argument, field or key called ``name`` holds a secret.

    >>> [is_secret_name(n) for n in ("api_key", "DATABASE_DSN", "sessionid", "amount", "author", "max_tokens")]
    [True, True, True, False, False, False]
    >>> is_secret_name("target_session_attrs")  # libpq's: which server of a multi-host URL to keep
    False
    """
    return bool(_NAME.search(name))


def mask(value: Any) -> Any:
    """A copy of ``value`` with the entries of secret-named keys replaced by ``MASK`` and every
    string in it passed through :func:`mask_text`.

    >>> mask({"user": "ann", "password": "hunter2", "nested": [{"Token": "x"}, "Bearer abc.def"]})
    {'user': 'ann', 'password': '********', 'nested': [{'Token': '********'}, 'Bearer ********']}
    """
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and is_secret_name(k) else mask(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask(v) for v in value]
    return value


def mask_arguments(args: Sequence[Any], kwargs: dict[str, Any], arg_names: Sequence[str] = ()) -> dict[str, Any]:
    """Arguments as one masked mapping; positional ones are named by ``arg_names`` when known."""
    out: dict[str, Any] = {}
    for i, value in enumerate(args):
        name = arg_names[i] if i < len(arg_names) else f"arg{i}"
        out[name] = MASK if is_secret_name(name) else mask(value)
    out.update(mask(kwargs))
    return out


#: Shorter secret values are not searched for in free text (they would mask common words and numbers).
MIN_SECRET_TEXT = 4


def secret_values(args: Sequence[Any], kwargs: dict[str, Any], arg_names: Sequence[str] = ()) -> list[str]:
    """Every string value :func:`mask_arguments` hides (of at least ``MIN_SECRET_TEXT`` characters),
    longest first, so :func:`mask_values` can take them out of an error message or a traceback that
    quotes them. Numbers are left out: their digits turn up everywhere (line numbers, durations).

    >>> secret_values(["ann", "sk_live_1"], {"auth": {"user": "bobby", "pin": 12345}}, ["user", "api_key"])
    ['sk_live_1', 'bobby']
    """
    found: set[str] = set()

    def leaves(value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                leaves(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                leaves(v)
        elif isinstance(value, str) and len(value) >= MIN_SECRET_TEXT:
            found.add(value)

    def walk(name: Any, value: Any) -> None:
        if isinstance(name, str) and is_secret_name(name):
            leaves(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(k, v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(None, v)

    for i, value in enumerate(args):
        walk(arg_names[i] if i < len(arg_names) else None, value)
    for k, v in kwargs.items():
        walk(k, v)
    return sorted(found, key=len, reverse=True)


def mask_values(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every occurrence of each of ``secrets`` replaced by ``MASK``.

    >>> mask_values("refused sk_live_1 for ann", ["sk_live_1"])
    'refused ******** for ann'
    """
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


#: How far back from a ``:`` or ``=`` a name is read.
_MAX_NAME = 64


def _key_before(text: str, at: int) -> str:
    """The name that ends just before ``text[at]`` (a ``:`` or ``=``): ``pw`` in ``pw=``, ``"pw" :``."""
    end = at
    while end > 0 and text[end - 1] in " \t":
        end -= 1
    if end > 0 and text[end - 1] in "\"'":
        end -= 2 if end > 1 and text[end - 2] == "\\" else 1
    start = end
    while start > 0 and end - start < _MAX_NAME and (text[start - 1].isalnum() or text[start - 1] in "_-"):
        start -= 1
    return text[start:end]


def _value_span(text: str, start: int) -> tuple[int, int] | None:
    """The secret of the value starting at ``text[start]``: inside its quotes if it has them."""
    end = _VALUE.match(text, start).end()  # type: ignore[union-attr]  # it matches one character at least
    if text[start] in "\\\"'":  # keep the quotes; an empty value stays as it is (it hides nothing)
        quote = text[start:start + 2] if text[start] == "\\" else text[start]
        start += len(quote)
        if end - start >= len(quote) and text.startswith(quote, end - len(quote)):
            end -= len(quote)
    return (start, end) if end > start else None


_PAIRS = frozenset(("c", "c2", "e"))
#: Text up to this long is first checked for name hints (a log line's ``attempt=1 outcome=...`` pairs
#: then cost nothing); in longer text the check would cost more than the pairs it spares.
_HINTED = 512


def mask_text(text: str) -> str:
    """``text`` with the secrets in it replaced by ``MASK``; what surrounds a secret is kept.

    Masked: the password of a URL (``scheme://user:********@host``); the value of a pair whose
    name looks secret (:func:`is_secret_name`): after ``=`` or a ``:`` with no space always, after
    ``: `` when it is quoted, follows an auth scheme (``Authorization: Basic ...``) or looks like a
    secret (it holds a digit, a symbol between two characters, or a lower-case letter followed by an
    upper-case one), so ``token: anyone`` stays prose; ``Bearer``/``Basic`` credentials that look
    like secrets; the values :data:`PATTERNS` and the user's patterns (:class:`Mask`) describe.

    >>> mask_text('login failed: password=x) for postgresql://app:pw@db/jobs?sslpassword=y&a=1')
    'login failed: password=********) for postgresql://app:********@db/jobs?sslpassword=********&a=1'
    >>> mask_text('Authorization: Bearer abc.def; password: "two words"; token: anyone; {"api_key": "k1"}')
    'Authorization: Bearer ********; password: "********"; token: anyone; {"api_key": "********"}'
    """
    parts: list[str] = []
    done = 0
    secret_name = _NAME.search
    candidates = _TEXT
    if len(text) <= _HINTED:
        lowered = text.lower()
        if not any(hint in lowered for hint in _HINTS):
            candidates = _VALUES
    for m in candidates.finditer(text):
        kind = m.lastgroup
        if kind in _PAIRS:
            if m.start() < done or not secret_name(_key_before(text, m.start())):
                continue
            span = _value_span(text, m.start(kind))
        else:
            span = m.span(kind or 0)  # every alternative is a named group: kind is never None
        if span is None or span[1] <= done:
            continue
        start = max(span[0], done)
        parts += (text[done:start], MASK)
        done = span[1]
    if parts:
        parts.append(text[done:])
        text = "".join(parts)
    if _USER is not None:
        text = _USER.sub(MASK, text)
    return text


def redact_url(url: str) -> str:
    """``url`` fit to print: its password (in the user part or the query) replaced by ``MASK``.

    A password that was not %-escaped is hidden too: the user part ends at the last ``@`` before the
    first ``/`` (or, if a ``/`` comes first and is not after a port, at the first ``@`` after it).

    >>> redact_url("postgresql://app:s3cret@db.internal:5432/jobs?schema=q&password=p2")
    'postgresql://app:********@db.internal:5432/jobs?schema=q&password=********'
    >>> redact_url("postgresql://app:pa/ss@db/jobs"), redact_url("sqlite:///firesafe.db")
    ('postgresql://app:********@db/jobs', 'sqlite:///firesafe.db')
    """
    head, sep, rest = url.partition("://")
    if sep:
        slash = rest.find("/")
        end = len(rest) if slash < 0 else slash
        at = rest.rfind("@", 0, end)
        if at < 0 and (at := rest.find("@", end)) >= 0:
            # An '@' past the first '/' ends the user part only if the ':' before that '/' is no port's.
            stop = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=end)
            colon = rest.rfind(":", 0, stop)
            if colon < 0 or rest[colon + 1:stop].isdigit() or "]" in rest[colon:stop]:
                at = -1
        if at >= 0 and ":" in rest[:at]:
            user = rest[:at].split(":", 1)[0]
            rest = f"{user}:{MASK}{rest[at:]}"
        url = head + sep + rest
    return mask_text(url)


__all__ = ["MASK", "Mask", "check", "extend", "is_secret_name", "mask", "mask_arguments", "mask_text", "mask_values",
           "redact_url", "secret_values"]
