"""Pure decisions (invariant 6): backoff, the state machine, attempt outcomes, keys, masking."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from firesafe import Backoff, Cancelled, InvalidInput, Permanent, RetryAfter
from firesafe.idempotency.keys import canonical_json, check_key, check_name, fingerprint
from firesafe.masking import MASK, mask, mask_arguments, mask_text
from firesafe.retries.decide import Budget, decide, decide_lost
from firesafe.states import TRANSITIONS, Outcome, State, can_move

backoffs = st.builds(
    Backoff,
    base=st.floats(0.0, 100.0),
    factor=st.floats(1.0, 10.0),
    cap=st.floats(100.0, 10_000.0),
    jitter=st.sampled_from(["full", "equal", "none"]),
)


@given(backoffs, st.integers(1, 10_000), st.floats(0.0, 0.999999))
def test_backoff_is_bounded_by_cap_and_never_negative(b: Backoff, attempt: int, draw: float) -> None:
    d = b.delay(attempt, draw)
    assert 0.0 <= d <= b.cap
    if b.jitter == "none":
        assert d == b.ceiling(attempt)
    if b.jitter == "equal":
        assert d >= b.ceiling(attempt) / 2


@given(backoffs, st.integers(1, 200))
def test_backoff_ceiling_grows_monotonically(b: Backoff, attempt: int) -> None:
    assert b.ceiling(attempt) <= b.ceiling(attempt + 1)


def test_backoff_defaults_worst_case_is_documented_figure() -> None:
    assert Backoff().worst_case_total(5) == 15.0
    assert Backoff(base=1, cap=300).worst_case_total(12) == 1 + 2 + 4 + 8 + 16 + 32 + 64 + 128 + 256 + 300 + 300


@pytest.mark.parametrize("kwargs", [{"base": -1}, {"factor": 0.5}, {"cap": 0.5, "base": 1}, {"jitter": "some"}])
def test_backoff_rejects_bad_settings(kwargs: dict) -> None:
    with pytest.raises(InvalidInput):
        Backoff(**kwargs)


def test_state_machine_table() -> None:
    assert can_move("queued", "running") and can_move("dead", "queued") and can_move("cancelled", "queued")
    assert can_move("succeeded", "queued")  # only a deliberate rerun
    assert not can_move("succeeded", "running") and not can_move("queued", "succeeded")
    assert not can_move("running", "queued")  # a released attempt goes to scheduled
    assert set(TRANSITIONS) == set(State)


errors = st.sampled_from([None, OSError("x"), Permanent("p"), ValueError("v"), RetryAfter(5), Cancelled()])


@given(errors, st.integers(1, 20), st.integers(1, 20), st.integers(0, 5), st.booleans(), st.floats(0, 0.99))
def test_every_decision_is_a_legal_move_within_budget(err, attempt, max_attempts, deferrals, timed_out, draw) -> None:
    attempt = min(attempt, max_attempts)
    d = decide(err, Budget(attempt, max_attempts, deferrals, 3), Backoff(), draw, timed_out=timed_out,
               give_up_on=(ValueError,))
    assert can_move(State.RUNNING, d.state)
    if d.state == State.SCHEDULED:
        assert d.delay is not None and d.delay >= 0
        assert d.deferred or attempt < max_attempts  # never retry past the budget
    if d.deferred:
        assert isinstance(err, RetryAfter) and deferrals < 3 and not timed_out
    if timed_out:
        assert d.outcome == Outcome.TIMED_OUT


@given(st.integers(1, 10), st.integers(1, 10), st.integers(1, 5))
def test_lost_decisions(attempt: int, lost: int, max_lost: int) -> None:
    d = decide_lost(Budget(attempt, 10), lost, max_lost, Backoff(), 0.5)
    assert d.outcome == Outcome.LOST
    assert (d.reason == "worker_lost") == (lost >= max_lost)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_canonical_json_round_trips_and_is_stable(value) -> None:
    text = canonical_json(value)
    assert canonical_json(json.loads(text)) == text
    assert fingerprint("job", text) == fingerprint("job", canonical_json(json.loads(text)))


def test_fingerprint_depends_on_name_and_arguments_not_key_order() -> None:
    a = canonical_json({"x": 1, "y": [1, 2]})
    b = canonical_json({"y": [1, 2], "x": 1})
    assert a == b and fingerprint("j", a) == fingerprint("j", b)
    assert fingerprint("j", a) != fingerprint("k", a)


@pytest.mark.parametrize("value", [object(), {1: "int key"}, float("inf"), b"bytes", {1, 2}])
def test_non_json_payloads_are_refused(value) -> None:
    with pytest.raises(InvalidInput):
        canonical_json(value)


@given(st.text(min_size=1, max_size=300))
def test_key_rule(key: str) -> None:
    ok = len(key) <= 255 and key.isprintable()
    if ok:
        assert check_key(key) == key
    else:
        with pytest.raises(InvalidInput):
            check_key(key)


@given(st.text(max_size=200))
def test_names_either_match_the_pattern_or_fail_clearly(name: str) -> None:
    try:
        assert check_name(name) == name
    except InvalidInput as exc:
        assert "invalid name" in str(exc)


def test_masking() -> None:
    assert mask({"Authorization": "Bearer x", "amount": 5}) == {"Authorization": MASK, "amount": 5}
    assert mask_arguments(["u", "s3cret"], {"token": "t"}, ["user", "password"]) == {
        "user": "u", "password": MASK, "token": MASK}
    assert "s3cret" not in mask_text('failed: {"password": "s3cret", "user": "u"} api_key=abc123')
    assert "abc123" not in mask_text("api_key=abc123 rest")
