"""Deploys that change running work: how a run's steps line up with the run recorded before a deploy.

Pure decisions, no store and no clock: :class:`Steps` asks them and does the writing.

A version marker (``ctx.patched("change-id")``) is recorded like a step, under the reserved name
``patch:change-id`` that no step of a user's may take. Where the code meets a marker, a run recorded
with it takes the new path, a run recorded past that point without it keeps the old one, and a run
that had not got that far (or a new one) records the marker and takes the new path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

#: What every version marker's record name starts with; a step's name may not.
MARKER_PREFIX = "patch:"
#: The policies of ``@app.job(on_divergence=...)``: what a run does where its steps differ from the
#: recorded run's. ``dead``: fail with NonDeterminism (the default); ``rerun``: forget the recorded
#: steps from the first difference on and run the new code from there.
DIVERGENCE_POLICIES = ("dead", "rerun")

#: How a marker met in a run is answered: ``recorded`` (the run has it: new path, restored),
#: ``old`` (the run went past this point without it: old path, the marker takes no place),
#: ``new`` (the run has nothing here or later: record it, new path).
PatchAnswer = Literal["recorded", "old", "new"]


def marker_name(change_id: str) -> str:
    """The record name of the version marker ``change_id``.

    >>> marker_name("v2-refund")
    'patch:v2-refund'
    """
    return MARKER_PREFIX + change_id


def is_marker(name: str) -> bool:
    """Whether ``name`` is a version marker's record name (a step's name never is).

    >>> is_marker("patch:v2-refund"), is_marker("charge")
    (True, False)
    """
    return name.startswith(MARKER_PREFIX)


def decide_patch(recorded: Mapping[int, str], position: int, marker: str) -> PatchAnswer:
    """How the marker ``marker``, met at ``position``, is answered for a run whose recorded steps
    are ``recorded`` (position -> name).

    >>> decide_patch({0: "fetch", 1: "patch:v2"}, 1, "patch:v2")      # recorded under the new code
    'recorded'
    >>> decide_patch({0: "fetch", 1: "charge-v1"}, 1, "patch:v2")     # went past here under the old code
    'old'
    >>> decide_patch({0: "fetch"}, 1, "patch:v2")                     # had not got this far: new code
    'new'
    """
    if marker in recorded.values():
        return "recorded"
    if any(p >= position for p in recorded):
        return "old"
    return "new"


def removed_markers(recorded: Mapping[int, str], position: int, name: str) -> list[str]:
    """The recorded markers at ``position`` and on (in a row) that the code, meeting ``name`` there,
    no longer has: the run took their new path, which is now the only one, so they are passed over.

    >>> removed_markers({0: "a", 1: "patch:v2", 2: "b"}, 1, "b")
    ['patch:v2']
    >>> removed_markers({0: "a", 1: "patch:v2"}, 1, "patch:v2")
    []
    """
    out: list[str] = []
    while (rec := recorded.get(position + len(out))) is not None and is_marker(rec) and rec != name:
        out.append(rec)
    return out


@dataclass(frozen=True)
class Divergence:
    """Where a run's steps first differ from the recorded run's, and what a rerun there forgets."""

    position: int  # 0-based place of the step met
    step: str  # the step met there in this run
    recorded_there: str | None  # the recorded step at that place (None: a gap)
    recorded_at: int | None  # where ``step`` was recorded instead (None: nowhere)
    forget_from: int  # the first place whose record a rerun forgets
    forgotten: tuple[str, ...]  # the recorded steps a rerun forgets, in order

    def describe(self) -> str:
        """One line: ``step 3 is 'audit' in this run but 'ship' in the recorded run``."""
        if self.recorded_there is not None:
            where = f"{self.recorded_there!r} in the recorded run"
        else:
            where = f"step {(self.recorded_at or 0) + 1} in the recorded run"
        return f"step {self.position + 1} is {self.step!r} in this run but {where}"


def divergence(recorded: Mapping[int, str], position: int, name: str) -> Divergence | None:
    """Whether step ``name``, met at ``position``, differs from the recorded run (None: it does not).

    A recorded step at another place, or another recorded step at this one, is a divergence; a gap
    (a step that failed leaves no record) or the end of the recorded run is not.

    >>> divergence({0: "a", 1: "b"}, 1, "b") is None, divergence({0: "a"}, 1, "c") is None
    (True, True)
    >>> d = divergence({0: "a", 1: "b", 2: "c"}, 1, "c")
    >>> d.describe(), d.forget_from, d.forgotten
    ("step 2 is 'c' in this run but 'b' in the recorded run", 1, ('b', 'c'))
    """
    here = recorded.get(position)
    if here == name:
        return None
    at = next((p for p, n in recorded.items() if n == name), None)
    if here is None and at is None:
        return None
    start = position if at is None else min(position, at)
    forgotten = tuple(n for _, n in sorted((p, n) for p, n in recorded.items() if p >= start))
    return Divergence(position, name, here, at, start, forgotten)


__all__ = ["DIVERGENCE_POLICIES", "MARKER_PREFIX", "Divergence", "PatchAnswer", "decide_patch", "divergence",
           "is_marker", "marker_name", "removed_markers"]
