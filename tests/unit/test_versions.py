"""The pure decisions of deploys that change running work (firesafe/steps/versions.py), without a
store: a version marker keeps every recorded run lined up with its recorded steps, and a divergence
names exactly what a rerun forgets.

``Replay`` below composes the decisions the way :class:`firesafe.steps.Steps` does (it records each
step the run meets where nothing was recorded), so a deploy can be played through many times.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from firesafe.steps.versions import (
    Divergence,
    decide_patch,
    divergence,
    is_marker,
    marker_name,
    removed_markers,
)

CHANGE = "v2"


@dataclass
class Replay:
    """One run of some code over a recorded run (position -> name)."""

    recorded: dict[int, str]
    seen: list[str] = field(default_factory=list)
    diverged: list[Divergence] = field(default_factory=list)

    def step(self, name: str) -> None:
        self.seen.extend(removed_markers(self.recorded, len(self.seen), name))
        position = len(self.seen)
        self.seen.append(name)
        if (d := divergence(self.recorded, position, name)) is not None:
            self.diverged.append(d)
        self.recorded.setdefault(position, name)

    def patched(self, change_id: str) -> bool:
        marker = marker_name(change_id)
        if marker in self.seen:
            return True
        position = len(self.seen) + len(removed_markers(self.recorded, len(self.seen), marker))
        if decide_patch(self.recorded, position, marker) == "old":
            return False
        self.step(marker)
        return True

    def steps(self) -> list[str]:
        """The steps the run met, markers left out."""
        return [n for n in self.seen if not is_marker(n)]


@dataclass(frozen=True)
class Deploy:
    """Version 1 runs ``before + old + after``; version 2 puts ``new`` in place of ``old`` behind the
    marker; version 3 (the marker removed) runs ``before + new + after``."""

    before: list[str]
    old: list[str]
    new: list[str]
    after: list[str]

    def v1(self, run: Replay) -> None:
        for n in self.before + self.old + self.after:
            run.step(n)

    def v2(self, run: Replay) -> bool:
        for n in self.before:
            run.step(n)
        answer = run.patched(CHANGE)
        for n in (self.new if answer else self.old) + self.after:
            run.step(n)
        return answer

    def v3(self, run: Replay) -> None:
        for n in self.before + self.new + self.after:
            run.step(n)


@st.composite
def deploys(draw: st.DrawFn) -> Deploy:
    names = draw(st.permutations([f"s{i}" for i in range(12)]))
    sizes = [draw(st.integers(0, 3)) for _ in range(4)]
    parts, at = [], 0
    for size in sizes:
        parts.append(list(names[at:at + size]))
        at += size
    return Deploy(*parts)


def recorded_prefix(code: list[str], kill: int, gaps: set[int]) -> dict[int, str]:
    """What a run of ``code`` recorded before it was killed at ``kill``, less the steps that failed
    (a marker cannot fail: it is recorded where it is met, or the attempt ends there)."""
    return {p: n for p, n in enumerate(code[:kill]) if p not in gaps or is_marker(n)}


@given(deploys(), st.integers(0, 12), st.sets(st.integers(0, 11)))
def test_a_run_recorded_under_version_1_lines_up_under_version_2(d: Deploy, kill: int, gaps: set[int]) -> None:
    # Given a run of version 1 killed after `kill` steps (some of them failed: no record)
    recorded = recorded_prefix(d.before + d.old + d.after, kill, gaps)
    # When version 2 resumes it
    run = Replay(dict(recorded))
    answer = d.v2(run)
    # Then it never diverges, and keeps the old path exactly when it had a record at or past the marker
    assert run.diverged == []
    assert answer is not any(p >= len(d.before) for p in recorded)
    assert run.steps() == d.before + (d.new if answer else d.old) + d.after


@given(deploys(), st.integers(0, 20), st.sets(st.integers(0, 11)))
def test_runs_of_version_2_resume_under_version_2_and_3(d: Deploy, kill: int, gaps: set[int]) -> None:
    # Given a run of version 2 (recorded with its marker) killed after `kill` records
    first = Replay({})
    assert d.v2(first) is True
    recorded = recorded_prefix(first.seen, kill, gaps)
    # When version 2 resumes it: the new path, no divergence
    again = Replay(dict(recorded))
    assert d.v2(again) is True and again.diverged == [] and again.steps() == d.before + d.new + d.after
    # When version 3 (the marker removed) resumes it: the same, the marker passed over
    later = Replay(dict(recorded))
    d.v3(later)
    assert later.diverged == [] and later.steps() == d.before + d.new + d.after


@given(deploys(), st.integers(1, 12))
def test_a_change_without_a_marker_diverges_where_a_recorded_step_differs(d: Deploy, kill: int) -> None:
    old_code, new_code = d.before + d.old + d.after, d.before + d.new + d.after
    recorded = recorded_prefix(old_code, kill, set())
    run = Replay(dict(recorded))
    d.v3(run)
    # The first difference is the first place where both have a step and they differ, or where a
    # recorded step is met at another place
    expected = next((p for p, n in enumerate(new_code)
                     if (p in recorded and recorded[p] != n) or (p not in recorded and n in recorded.values())),
                    None)
    first = run.diverged[0].position if run.diverged else None
    assert first == expected


@given(st.dictionaries(st.integers(0, 10), st.sampled_from("abcdefghijk"), max_size=8).filter(
    lambda r: len(set(r.values())) == len(r)), st.integers(0, 10), st.sampled_from("abcdefghijkz"))
def test_a_divergence_forgets_exactly_the_records_from_its_place_on(recorded: dict[int, str], position: int,
                                                                    name: str) -> None:
    d = divergence(recorded, position, name)
    here = recorded.get(position)
    if here == name or (here is None and name not in recorded.values()):
        assert d is None
        return
    assert d is not None and d.forget_from <= position and d.step == name and d.recorded_there == here
    assert list(d.forgotten) == [recorded[p] for p in sorted(recorded) if p >= d.forget_from]
    assert name not in {recorded[p] for p in recorded if p < d.forget_from}  # the step met is forgotten too
    assert d.describe().startswith(f"step {position + 1} is {name!r} in this run but ")


def test_marker_names_are_reserved_and_decided_by_the_recorded_run() -> None:
    assert marker_name("v2-refund") == "patch:v2-refund" and is_marker("patch:v2-refund") and not is_marker("pay")
    assert decide_patch({}, 0, "patch:x") == "new"
    assert decide_patch({0: "a", 3: "b"}, 2, "patch:x") == "old"  # a gap at 2, a record past it
    assert decide_patch({0: "a", 1: "b"}, 2, "patch:x") == "new"
    assert decide_patch({0: "patch:x", 1: "b"}, 5, "patch:x") == "recorded"  # its place is checked by the step
    assert removed_markers({1: "patch:x", 2: "patch:y", 3: "b"}, 1, "b") == ["patch:x", "patch:y"]
    assert removed_markers({1: "patch:x", 2: "patch:y"}, 1, "patch:y") == ["patch:x"]
