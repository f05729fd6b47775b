"""Job identity (invariant 1): a key, and a fingerprint of what the key was enqueued with."""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from typing import Any

from firesafe.errors import InvalidInput

MAX_KEY_LENGTH = 255
#: Largest accepted payload (the canonical JSON of a job's arguments), in bytes.
MAX_PAYLOAD_BYTES = 256 * 1024

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


def new_key(name: str) -> str:
    """A fresh unique key for a job enqueued without one."""
    return f"{name}:{uuid.uuid4().hex}"


def _check_json(value: Any, path: str) -> None:
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"argument {path} is {value!r}, which JSON cannot carry")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_json(item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise InvalidInput(f"argument {path} has a non-string key {k!r}; JSON keys are strings")
            _check_json(item, f"{path}[{k!r}]")
        return
    raise InvalidInput(
        f"argument {path} is a {type(value).__name__}, which is not JSON-serialisable "
        "(payloads are JSON: pass str, int, float, bool, None, lists and dicts)"
    )


#: json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False), built once.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any, what: str = "arguments", limit: int | None = MAX_PAYLOAD_BYTES) -> str:
    """The one JSON text of ``value``: sorted keys, no spaces, UTF-8, size-capped.

    >>> canonical_json({"b": 1, "a": [1.5, None]})
    '{"a":[1.5,null],"b":1}'
    """
    _check_json(value, what)
    text = _ENCODER.encode(value)
    try:
        size = len(text.encode())
    except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 (and no store) can carry it
        raise InvalidInput(f"{what} hold text that is not valid Unicode ({exc.object[exc.start:exc.end]!r}); "
                           "JSON text must be UTF-8") from None
    if limit is not None and size > limit:
        raise InvalidInput(f"{what} are {size} bytes of JSON; the cap is {limit} bytes")
    return text


def fingerprint(name: str, payload_json: str) -> str:
    """A hash of the job name and the canonical JSON of its arguments.

    >>> fingerprint("refund", '{"args":["o-1",100],"kwargs":{}}')[:12]
    '98d8c01a8525'
    """
    return hashlib.sha256(f"{name}\n{payload_json}".encode()).hexdigest()
