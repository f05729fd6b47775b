"""The store's one sanitizer (``for_store``, ``safe_str``) and the pure code that uses it: how an
attempt's error is read (executor), how JSON is bounded (canonical JSON's depth), how a stored row
that does not decode is read (models). No store, no clock."""

from __future__ import annotations

import traceback
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given

from firesafe.errors import InvalidInput
from firesafe.idempotency.keys import MAX_DEPTH, canonical_json, payload_json
from firesafe.models import CLAIMED_COLUMNS, Job
from firesafe.retries.backoff import Backoff
from firesafe.sanitize import for_store, safe_str
from firesafe.states import Outcome, State
from firesafe.store.base import Claimed, FinishParams
from firesafe.worker import executor

#: Characters no store may be given as they are (besides lone surrogates): C0 and C1 controls, DEL.
UNSAFE = {chr(c) for c in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0)]}
PIECES = st.sampled_from(["\x00", "\udce9", "\ud800", "\x1b", "\r\n", "\t", "\u202e", "é", "a", "\\"])
ANY_TEXT = st.text(alphabet=st.characters(codec=None), max_size=200) | st.lists(PIECES, max_size=30).map("".join)


# -- for_store ---------------------------------------------------------------------------------------
@given(ANY_TEXT)
def test_what_for_store_gives_every_store_can_hold(text: str) -> None:
    stored = for_store(text)
    stored.encode("utf-8")  # no lone surrogate
    assert not UNSAFE & set(stored)  # no NUL, no control character but tab, newline, carriage return


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="".join(UNSAFE))))
def test_text_a_store_holds_already_is_kept_as_it_is(text: str) -> None:
    assert for_store(text) is text or for_store(text) == text


@pytest.mark.parametrize(("text", "stored"), [
    ("acme\x00corp", "acme\\x00corp"), ("caf\udce9", "caf\\udce9"), ("\x1b]0;x\x07", "\\x1b]0;x\\x07"),
    ("del\x7f c1\x85", "del\\x7f c1\\x85"), ("tab\tline\nCR\r", "tab\tline\nCR\r"), ("é 😀 \u202e", "é 😀 \u202e"),
    ("\ud83d\ude00", "\\ud83d\\ude00"),  # two lone surrogates are not a character
])
def test_for_store_writes_what_it_replaces_as_a_visible_escape(text: str, stored: str) -> None:
    assert for_store(text) == stored


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")

    def __repr__(self) -> Any:
        return 42


def test_safe_str_never_raises() -> None:
    class NotText(Exception):
        def __str__(self) -> Any:
            return b"bytes"

    assert safe_str(ValueError("x")) == "x" and safe_str(NotText("y")) == "NotText('y')"
    assert safe_str(Unprintable()) == "<unprintable Unprintable>"


# -- the executor's reading of an error ----------------------------------------------------------------
def test_a_huge_message_is_cut_before_it_is_masked_or_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    monkeypatch.setattr(executor, "mask_text", lambda text: seen.append(len(text)) or text)
    kind, message = executor.error_fields(ValueError("\x00" * 5_000_000))
    assert kind == "ValueError" and message == "\x00" * executor.MAX_MESSAGE and seen == [executor.MAX_MESSAGE]
    long_name = type("E" * 10_000, (Exception,), {})
    assert executor.error_fields(long_name("m"))[0] == "E" * executor.MAX_TYPE


def test_a_traceback_that_cannot_be_formatted_is_still_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(exc: BaseException) -> list[str]:
        raise RuntimeError("formatting failed")

    monkeypatch.setattr(traceback, "format_exception", fails)
    try:
        raise Unprintable()
    except Unprintable as exc:
        text = executor._format_tb(exc)
    assert text.startswith("Traceback (most recent call last):\n") and "in test_a_traceback" in text
    assert "Unprintable: <unprintable Unprintable>" in text and "could not be formatted: RuntimeError" in text


class _JobDef:
    name = "j"
    max_deferrals = 0
    backoff = Backoff(base=1.0, jitter="none")
    give_up_on: tuple[type[BaseException], ...] = ()


def claimed(args: list[Any] | None = None, attempt: int = 1) -> Claimed:
    values = [7, "k", "j", "default", "running", '{"args":[],"kwargs":{}}', None, attempt, 3, attempt, 0, 0, None,
              0.0, 0.0, False, None, 0, None]
    job = Job.from_claim_values(values, "w")
    job.args = args or []
    return Claimed(job, "token")


def test_conclude_escapes_the_error_for_the_store_once_masked() -> None:
    res = executor._failed(ValueError("refused sk-live-42 \x00 caf\udce9"), 0.0)
    fin = executor.conclude(claimed(["sk-live-42"]), _JobDef(), res, 0.5)  # type: ignore[arg-type]
    assert fin.state == State.SCHEDULED and fin.error_type == "ValueError"
    assert fin.message is not None and fin.message.endswith(" \\x00 caf\\udce9")
    assert fin.traceback is not None and "\\x00 caf\\udce9" in fin.traceback
    for text in (fin.message, fin.traceback):
        text.encode()


def test_conclude_never_raises_and_retries_per_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(text: str) -> str:
        raise RuntimeError("a masking bug")

    monkeypatch.setattr(executor, "mask_text", broken)
    res = executor._failed(ValueError("boom"), 0.0)
    assert res.traceback == "(this traceback could not be masked (RuntimeError), so it is not kept)\n"
    fin = executor.conclude(claimed(), _JobDef(), res, 0.5)  # type: ignore[arg-type]
    assert fin.state == State.SCHEDULED and fin.outcome == Outcome.FAILED and fin.delay == 1.0
    assert fin.error_type == "ValueError" and "could not be recorded (RuntimeError" in (fin.message or "")
    fin = executor.conclude(claimed(attempt=3), _JobDef(), res, 0.5)  # type: ignore[arg-type]
    assert fin.state == State.DEAD and fin.reason == "exhausted"


def test_an_outcome_refused_for_its_data_is_written_in_ascii_then_as_unstorable() -> None:
    fin = FinishParams(1, "t", 1, State.SUCCEEDED, Outcome.SUCCEEDED, result='{"a":"é\\u0000"}', detail='{"x":"é"}')
    ascii_fin = executor.escaped_ascii(fin)
    assert ascii_fin.result == '{"a":"\\u00e9\\u0000"}' and ascii_fin.detail == '{"x":"\\u00e9"}'
    fin = FinishParams(1, "t", 1, State.DEAD, Outcome.FAILED, error_type="E\x00", message="é\udce9", traceback="\x1b")
    ascii_fin = executor.escaped_ascii(fin)
    assert (ascii_fin.error_type, ascii_fin.message, ascii_fin.traceback) == ("E\\x00", "\\xe9\\udce9", "\\x1b")
    gone = executor.unstorable(fin, InvalidInput("refused"))
    assert (gone.state, gone.reason, gone.error_type, gone.traceback) == (State.DEAD, "unstorable_outcome",
                                                                         "UnstorableOutcome", None)
    assert "InvalidInput" in (gone.message or "")


# -- depth -------------------------------------------------------------------------------------------
def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_each_argument_may_nest_up_to_the_cap() -> None:
    assert payload_json([nested(MAX_DEPTH)], {"k": nested(MAX_DEPTH)})[0].count("[") == 2 * MAX_DEPTH + 1
    for args, kwargs in (([nested(MAX_DEPTH + 1)], {}), ([], {"k": nested(MAX_DEPTH + 1)}),
                         ([{"a": nested(MAX_DEPTH)}], {})):
        with pytest.raises(InvalidInput, match=f"^arguments are nested more than {MAX_DEPTH} levels deep$"):
            payload_json(args, kwargs)


def test_a_value_holding_itself_is_refused_as_too_deep() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(InvalidInput, match="nested more than"):
        canonical_json(loop, "the job's result")


# -- rows that do not decode -------------------------------------------------------------------------
@pytest.mark.parametrize("payload", ['{"args": [1', "[" * 100_000 + "]" * 100_000, "[1]", '"text"',
                                     '{"args":[' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "]}"])
def test_a_claimed_row_whose_payload_does_not_decode_is_a_job_that_says_so(payload: str) -> None:
    row = dict(zip(CLAIMED_COLUMNS, [7, "k", "j", "default", "running", payload, '["x"]', 1, 3, 1, 0, 0, None,
                                     0.0, 0.0, False, None, 0, None], strict=True))
    job = Job.from_claim_row(row, "w")
    assert (job.args, job.kwargs, job.arg_names) == ([], {}, [])
    assert job.unreadable is not None and job.unreadable.startswith("arguments: ")
    fin = executor.undecodable(Claimed(job, "t"))
    assert (fin.state, fin.reason, fin.error_type) == (State.DEAD, "undecodable_payload", "UndecodablePayload")
    (fin.message or "").encode()


def test_a_row_nested_up_to_the_cap_reads_and_one_past_it_reads_as_unreadable() -> None:
    def row(payload: str) -> dict[str, Any]:
        return dict(zip(CLAIMED_COLUMNS, [7, "k", "j", "default", "running", payload, None, 1, 3, 1, 0, 0, None,
                                          0.0, 0.0, False, None, 0, None], strict=True))

    at_cap = Job.from_claim_row(row('{"args":[' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "]}"), "w")
    assert at_cap.unreadable is None and at_cap.args == [nested(MAX_DEPTH)]
    wide = Job.from_claim_row(row('{"args":[' + ",".join(["[[1]]"] * 5000) + "]}"), "w")  # many brackets, not deep
    assert wide.unreadable is None and len(wide.args) == 5000
    past = Job.from_claim_row(row('{"args":[' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "]}"), "w")
    assert past.args == [] and past.unreadable == f"arguments: ValueError: nested more than {MAX_DEPTH} levels deep"
