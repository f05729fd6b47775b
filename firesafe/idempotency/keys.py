"""Job identity (invariant 1): a key, and a fingerprint of what the key was enqueued with."""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import uuid
from collections.abc import Callable
from typing import Any

from firesafe.errors import InvalidInput

MAX_KEY_LENGTH = 255
#: Largest accepted payload (the canonical JSON of a job's arguments), in bytes.
MAX_PAYLOAD_BYTES = 256 * 1024
#: How deep JSON values firesafe stores may nest (lists and dicts within lists and dicts, the outermost
#: counting one): each argument of a job, a result, a step's result. Far below what Python's JSON
#: encoder and decoder reach (about 1,000 levels, less on a deep stack), so what is stored decodes.
MAX_DEPTH = 256


def nested_deeper(value: Any, levels: int) -> bool:
    """Whether ``value`` nests lists and dicts more than ``levels`` deep (without recursion, so a
    value of any depth is measured).

    >>> nested_deeper([[1]], 2), nested_deeper([[[1]]], 2), nested_deeper({"a": [1]}, 2)
    (False, True, False)
    """
    level = [value] if isinstance(value, (list, dict)) else []
    for _ in range(levels):
        level = [v for c in level for v in (c.values() if isinstance(c, dict) else c) if isinstance(v, (list, dict))]
        if not level:
            return False
    return bool(level)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]{0,127}$")


def check_name(name: object, what: str = "name") -> str:
    """Return ``name`` if it is a valid job, queue, limiter or schedule name.

    >>> check_name("payments")
    'payments'
    >>> check_name("bad name")
    Traceback (most recent call last):
    ...
    firesafe.errors.InvalidInput: invalid name 'bad name': ...
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(
            f"invalid {what} {name!r}: use letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or '_', at most 128 characters"
        )
    return name


def check_key(key: object) -> str:
    """Return ``key`` if it is a valid job key: 1 to 255 printable characters."""
    if not isinstance(key, str):
        raise InvalidInput(f"a job key must be a string, not {type(key).__name__}")
    if not key:
        raise InvalidInput("a job key must not be empty")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(f"a job key must be at most {MAX_KEY_LENGTH} characters (got {len(key)})")
    if not key.isprintable():
        raise InvalidInput(f"a job key must be printable characters only: {key!r}")
    return key


#: Step names escape ``%`` first, then ``/``, so the last ``/`` of a step key is its separator.
_STEP_ESCAPES = (("%", "%25"), ("/", "%2F"))
#: Where a shortened step key puts its ``#``: what is left of 255 characters after ``#`` and a SHA-256.
_CUT = MAX_KEY_LENGTH - 65
#: The shape of a shortened step key. A key that merely looks like one is shortened too, so a step
#: name that copies another key's digest cannot borrow that key.
_SHORTENED = re.compile(rf".{{{_CUT}}}#[0-9a-f]{{64}}", re.DOTALL)


def step_key(job_key: str, step: str) -> str:
    """A key for the provider, one per (job key, step name): the same on every attempt, at most 255
    characters, and never the key of another (job key, step name) pair.

    The format is ``JOB_KEY/STEP`` with ``%`` and then ``/`` in the step name written ``%25`` and
    ``%2F`` (the job key is kept as it is): the step part holds no ``/``, so the last ``/`` splits
    the two parts one way only. A key longer than 255 characters, or one that has the shape of a
    shortened key, is shortened: its first 190 characters, ``#``, and the SHA-256 (hex) of the whole
    key, 255 characters in all.

    >>> step_key("refund:o-1", "charge")
    'refund:o-1/charge'
    >>> step_key("a", "b/c"), step_key("a/b", "c")
    ('a/b%2Fc', 'a/b/c')
    >>> len(step_key("k" * 250, "charge"))
    255
    """
    return joined_key(job_key, escaped(step, _STEP_ESCAPES), "/")


def escaped(text: str, escapes: tuple[tuple[str, str], ...]) -> str:
    """``text`` with each ``(char, escape)`` replaced in turn (the escape character's own first)."""
    for char, escape in escapes:
        text = text.replace(char, escape)
    return text


def joined_key(left: str, right: str, sep: str) -> str:
    """``left + sep + right``, shortened when over 255 characters or shaped like a shortened key
    (its first 190 characters, ``#`` and the SHA-256 of the whole): the one rule of derived keys
    (step keys, event keys), so two different joins never give one key.

    >>> joined_key("a", "b", "/"), len(joined_key("k" * 300, "b", ":"))
    ('a/b', 255)
    """
    key = f"{left}{sep}{right}"
    if len(key) <= MAX_KEY_LENGTH and not _SHORTENED.fullmatch(key):
        return key
    return f"{key[:_CUT]}#{hashlib.sha256(key.encode()).hexdigest()}"


def new_key(name: str) -> str:
    """A fresh unique key for a job enqueued without one."""
    return f"{name}:{uuid.uuid4().hex}"


#: Types whose values JSON carries as they are (floats are checked for finiteness by the encoder).
_FLAT = frozenset({str, int, float, bool, type(None)})


def _flat(value: Any) -> bool:
    """True when ``value`` is a list of plain scalars or a str-keyed dict of them: the common payload,
    which needs no walk (the encoder's ``allow_nan=False`` still refuses NaN and infinities)."""
    kind = type(value)
    if kind is list or kind is tuple:
        return all(type(v) in _FLAT for v in value)
    if kind is dict:
        return all(type(k) is str and type(v) in _FLAT for k, v in value.items())
    return kind in _FLAT


class _TooDeep(Exception):
    """Raised by :func:`_walk` past the nesting it allows; :func:`_encode` says what was too deep."""


def _walk(value: Any, path: str, room: int) -> None:
    """Check that ``value`` is JSON (a non-string key, a set or a NaN raises InvalidInput naming
    where) nesting at most ``room`` levels of lists and dicts (else :class:`_TooDeep`)."""
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"argument {path} is {value!r}, which JSON cannot carry")
        return
    if isinstance(value, (list, tuple)):
        if room <= 0:
            raise _TooDeep
        for i, item in enumerate(value):
            _walk(item, f"{path}[{i}]", room - 1)
        return
    if isinstance(value, dict):
        if room <= 0:
            raise _TooDeep
        for k, item in value.items():
            if not isinstance(k, str):
                raise InvalidInput(f"argument {path} has a non-string key {k!r}; JSON keys are strings")
            _walk(item, f"{path}[{k!r}]", room - 1)
        return
    raise InvalidInput(
        f"argument {path} is a {type(value).__name__}, which is not JSON-serialisable "
        "(payloads are JSON: pass str, int, float, bool, None, lists and dicts)"
    )


#: json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False), built once.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _fast_encoder() -> Callable[[Any], str]:
    """The C encoder behind ``_ENCODER``, made once (``JSONEncoder.encode`` makes one per call, which
    is half the cost of encoding a small payload). Without circular-reference markers: plain values
    cannot hold a cycle. Falls back to ``_ENCODER.encode`` where the C module is absent or differs.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    try:  # make is None where the C module is absent: the TypeError below
        c_encode = make(None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",",  # type: ignore[misc]
                        True, False, False)
        sample = {"b": [1.5, "é", None, True], "a": {}}
        if "".join(c_encode(sample, 0)) != _ENCODER.encode(sample):
            raise ValueError("a different encoding")
    except (TypeError, ValueError):
        return _ENCODER.encode
    return lambda value: "".join(c_encode(value, 0))


_encode_plain = _fast_encoder()


def _plain(value: Any) -> bool:
    """True for a str-keyed dict of :func:`_flat` values, e.g. ``{"args": [...], "kwargs": {...}}`` of
    plain scalars: nothing to walk, and its JSON decodes back to an equal value."""
    return type(value) is dict and all(type(k) is str and _flat(v) for k, v in value.items())


def _encode(value: Any, what: str, limit: int | None, depth: int = MAX_DEPTH,
            wrap: int = 0) -> tuple[str, bool]:
    """``value``'s canonical JSON, checked; ``wrap`` levels of it are firesafe's own (a payload's
    object and its list of arguments), beyond which it may nest ``depth`` levels."""
    plain = _plain(value)
    try:
        if not plain:
            _walk(value, what, depth + wrap)
        text = _encode_plain(value) if plain else _ENCODER.encode(value)
    except _TooDeep:
        raise InvalidInput(f"{what} are nested more than {depth} levels deep") from None
    except RecursionError:
        raise InvalidInput(f"{what} are nested too deeply to be written as JSON") from None
    except ValueError as exc:
        if isinstance(exc, InvalidInput):
            raise
        if plain:  # NaN or an infinity among plain values: say where (other values were walked above)
            _walk(value, what, depth + wrap)
        if "integer string conversion" in str(exc):  # past Python's limit (sys.set_int_max_str_digits)
            raise InvalidInput(f"{what} hold an integer of more than {sys.get_int_max_str_digits()} digits, "
                               "which cannot be written as JSON") from None
        raise InvalidInput(f"{what} cannot be written as JSON: {exc}") from None
    try:
        size = len(text.encode())
    except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 (and no store) can carry it
        raise InvalidInput(f"{what} hold text that is not valid Unicode ({exc.object[exc.start:exc.end]!r}); "
                           "JSON text must be UTF-8") from None
    if limit is not None and size > limit:
        raise InvalidInput(f"{what} are {size} bytes of JSON; the cap is {limit} bytes")
    return text, plain


def canonical_json(value: Any, what: str = "arguments", limit: int | None = MAX_PAYLOAD_BYTES,
                   depth: int = MAX_DEPTH) -> str:
    """The one JSON text of ``value``: sorted keys, no spaces, UTF-8, size-capped, nesting at most
    ``depth`` levels (so that every store holds it and it decodes again).

    >>> canonical_json({"b": 1, "a": [1.5, None]})
    '{"a":[1.5,null],"b":1}'
    >>> canonical_json([[["deep"]]], "the result", depth=2)
    Traceback (most recent call last):
    ...
    firesafe.errors.InvalidInput: the result are nested more than 2 levels deep
    """
    return _encode(value, what, limit, depth)[0]


def payload_json(args: list[Any], kwargs: dict[str, Any], limit: int | None = MAX_PAYLOAD_BYTES) -> tuple[str, bool]:
    """A job's payload, the canonical JSON of ``{"args": args, "kwargs": kwargs}``, and whether the
    arguments are plain scalars (str, int, float, bool, None, exactly), which decode back equal.
    Each argument nests at most :data:`MAX_DEPTH` levels.

    >>> payload_json(["o-1", 100], {}), payload_json([[1, 2]], {})[1]
    (('{"args":["o-1",100],"kwargs":{}}', True), False)
    """
    return _encode({"args": args, "kwargs": kwargs}, "arguments", limit, wrap=2)


def fingerprint(name: str, payload_json: str) -> str:
    """A hash of the job name and the canonical JSON of its arguments (``enqueue`` first places them
    by the job function's signature, so one call has one fingerprint however it is written).

    >>> fingerprint("refund", '{"args":["o-1",100],"kwargs":{}}')[:12]
    '98d8c01a8525'
    """
    return hashlib.sha256(f"{name}\n{payload_json}".encode()).hexdigest()
