"""The one place that hides secrets (invariant 9): CLI, dashboard, alerts, traces and logs all call it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

MASK = "********"
_SECRET = re.compile(r"(pass(word|wd)?|token|secret|api[_-]?key|authorization|auth|credential|private[_-]?key)", re.I)


def is_secret_name(name: str) -> bool:
    """Whether an argument called ``name`` holds a secret.

    >>> is_secret_name("api_key"), is_secret_name("amount")
    (True, False)
    """
    return bool(_SECRET.search(name))


def mask(value: Any) -> Any:
    """A copy of ``value`` whose dict entries with secret-looking names are replaced by ``MASK``.

    >>> mask({"user": "ann", "password": "hunter2", "nested": [{"Token": "x"}]})
    {'user': 'ann', 'password': '********', 'nested': [{'Token': '********'}]}
    """
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


def mask_text(text: str) -> str:
    """Mask ``name=value`` and ``"name": "value"`` pairs with secret names inside free text."""
    return _PAIR.sub(lambda m: f"{m.group(1)}{MASK}", text)


_PAIR = re.compile(
    r"""((?:pass(?:word|wd)?|token|secret|api[_-]?key|authorization)["']?\s*[:=]\s*["']?)([^\s"',}&]+)""",
    re.I,
)
