"""The one function that hides secrets (invariant 9): CLI, dashboard, alerts and logs all call it."""

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


def mask_text(text: str) -> str:
    """Mask ``name=value`` and ``"name": "value"`` pairs with secret names inside free text."""
    return _PAIR.sub(lambda m: f"{m.group(1)}{MASK}", text)


_PAIR = re.compile(
    r"""((?:pass(?:word|wd)?|token|secret|api[_-]?key|authorization)["']?\s*[:=]\s*["']?)([^\s"',}&]+)""",
    re.I,
)
