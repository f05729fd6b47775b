"""The terminal and log-line sanitizers, and the CLI and log formatters built on them (invariant 11).

Given hostile text (markup, ESC/OSC/CSI sequences, carriage returns, NUL, lone surrogates, bidi
overrides) or values whose ``__str__`` raises; when it is made ready for a terminal, a JSON output or
a log line; then nothing in it is interpreted, nothing raises, and whatever was replaced shows as a
visible escape.
"""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from firesafe.cli._common import data, dumps, plain
from firesafe.cli._logs import TRACEBACK_PREFIX, JSONFormatter, TextFormatter, message_of
from firesafe.sanitize import for_log, for_terminal

#: Everything a terminal must not get raw: C0 controls but newline and tab, DEL, C1 controls, lone
#: surrogates, bidi embeddings, overrides and isolates.
RAW_FOR_TERMINAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069]")
HOSTILE_CHARS = list("\x1b\x07\r\n\t\x00\x9b\x7f\u202e\u2066\u2069\u2028\udce9[]/\\:")
#: Any text, lone surrogates included, with the hostile characters drawn often (a list joined: st.text
#: would merge the two alphabets and lose some of the hostile characters).
hostile_text = st.lists(st.one_of(st.sampled_from(HOSTILE_CHARS), st.characters(exclude_categories=()))).map("".join)


def shown(renderable: Any, markup: bool = False) -> str:
    """What a terminal receives when rich prints ``renderable``: written to a strict UTF-8 stream
    (a lone surrogate would raise), no colours, so any ESC in it came from the data."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    Console(file=stream, width=300, color_system=None, highlight=False).print(renderable, markup=markup, end="")
    return raw.getvalue().decode("utf-8")


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


# -- for_terminal ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "escaped"), [
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),  # OSC: sets the window title
    ("\x1b[2J", "\\x1b[2J"),  # CSI: clears the screen
    ("paid\rrefunded", "paid\\rrefunded"),  # CR: overwrites the line
    ("caf\udce9", "caf\\udce9"),  # a lone surrogate (os.listdir of a non-UTF-8 name)
    ("invoice\u202efdp.exe", "invoice\\u202efdp.exe"),  # RLO: reorders what follows
    ("a\u2066b\u2069", "a\\u2066b\\u2069"),
    ("acme\x00corp", "acme\\x00corp"),
    ("\x9b2J \x7f", "\\x9b2J \\x7f"),  # C1 CSI and DEL
    ("line 1\n\tline 2", "line 1\n\tline 2"),  # newlines and tabs kept
])
def test_for_terminal_writes_control_sequences_as_visible_escapes(text: str, escaped: str) -> None:
    assert for_terminal(text, markup=False) == escaped


@pytest.mark.parametrize("text", ["[bold]x[/x]", "[/]", "[red]", "a\\", "a\\\\", "\\", "\\[b]x", "x[", "[b]\\"])
def test_for_terminal_markup_shows_the_data_as_it_is_inside_a_tag(text: str) -> None:
    assert shown(f"[red]{for_terminal(text)}[/red]", markup=True) == text


@given(st.text(st.sampled_from(list("[]/\\ab#@= "))))
def test_any_brackets_and_backslashes_inside_markup_are_shown_as_they_are(text: str) -> None:
    assert shown(f"[bold]{for_terminal(text)}[/bold]", markup=True) == text


@given(hostile_text)
def test_no_text_reaches_a_terminal_raw(text: str) -> None:
    for markup in (False, True):
        out = for_terminal(text, markup=markup)
        assert not RAW_FOR_TERMINAL.search(out)
        out.encode("utf-8")  # strict: a lone surrogate would raise


# -- for_log ----------------------------------------------------------------------------------------
def test_for_log_keeps_one_line() -> None:
    assert for_log("x\nINFO forged") == "x\\nINFO forged"
    assert for_log("a\r\nb\x1b[2J\u2028c\u202e\udce9") == "a\\r\\nb\\x1b[2J\\u2028c\\u202e\\udce9"


@given(hostile_text)
def test_no_text_can_make_a_log_line_two(text: str) -> None:
    out = for_log(text)
    assert len(out.splitlines()) <= 1 and "\n" not in out and "\t" not in out
    assert not RAW_FOR_TERMINAL.search(out)
    out.encode("utf-8")


# -- the CLI's helpers ------------------------------------------------------------------------------
def test_data_is_printed_as_it_is_never_as_markup_emoji_or_control_sequences() -> None:
    hostile = "[bold]x[/x] job:100:x \x1b]0;owned\x07\x1b[2J\rcaf\udce9\u202eevil\x00"
    out = shown(data(hostile))
    assert out == "[bold]x[/x] job:100:x \\x1b]0;owned\\x07\\x1b[2J\\rcaf\\udce9\\u202eevil\\x00"
    assert plain(hostile) == out
    assert plain(Unprintable()) == "<unprintable Unprintable>" and plain(3) == "3"


@given(st.recursive(st.none() | st.booleans() | st.integers() | hostile_text,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3),
                    max_leaves=10))
def test_json_output_reads_back_as_the_value_and_holds_nothing_raw(value: Any) -> None:
    for indent in (None, 2):
        text = dumps(value, indent=indent)
        assert json.loads(text) == value
        text.encode("utf-8")  # a lone surrogate is written \udce9, not raw
        assert not RAW_FOR_TERMINAL.search(text)


def test_json_output_writes_what_json_cannot_hold_as_text() -> None:
    assert json.loads(dumps({"x": Unprintable(), "n": 1})) == {"x": "<unprintable Unprintable>", "n": 1}


# -- log lines --------------------------------------------------------------------------------------
class Logged:
    """Records written through both formatters, each to its own stream; a formatting error fails the
    test (logging would print it to stderr and drop the record). Records go to the handlers directly:
    pytest attaches its own capture handler to any logger that does not propagate."""

    def __init__(self) -> None:
        self.streams = {"text": io.StringIO(), "json": io.StringIO()}
        self.handlers = []
        for name, formatter in (("text", TextFormatter()), ("json", JSONFormatter())):
            handler = logging.StreamHandler(self.streams[name])
            handler.setFormatter(formatter)
            handler.handleError = self._failed  # type: ignore[method-assign]
            self.handlers.append(handler)

    @staticmethod
    def _failed(record: logging.LogRecord) -> None:
        raise AssertionError(f"the formatter raised on {record.msg!r}")

    def log(self, level: int, msg: object, *args: object, exc_info: Any = None) -> None:
        record = logging.LogRecord("firesafe.worker", level, __file__, 0, msg, args, exc_info)
        for handler in self.handlers:
            handler.handle(record)

    def text(self) -> str:
        return self.streams["text"].getvalue()

    def json_rows(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.streams["json"].getvalue().splitlines()]


@pytest.fixture
def logged() -> Logged:
    return Logged()


STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00 [A-Z]+ +\[\d+\] ")


def test_an_error_message_cannot_forge_a_log_line(logged: Logged) -> None:
    forged = "x\n2026-01-01T00:00:00.000+00:00 INFO    [1] firesafe.worker: forged\r\x1b[2K"
    logged.log(logging.INFO, "charge k1 outcome=failed error=%s", f"RuntimeError: {forged}")
    lines = logged.text().splitlines()
    assert len(lines) == 1 and STAMP.match(lines[0])
    assert lines[0].endswith("error=RuntimeError: x\\n2026-01-01T00:00:00.000+00:00 INFO    [1] firesafe.worker: "
                             "forged\\r\\x1b[2K")
    [record] = logged.json_rows()
    assert record["message"].endswith(forged)  # JSON escapes it and reads back the same


def test_a_traceback_follows_its_record_on_marked_lines(logged: Logged) -> None:
    try:
        raise ValueError("boom\n2026-01-01T00:00:00.000+00:00 CRITICAL [1] firesafe.worker: forged\x1b]0;t\x07")
    except ValueError:
        logged.log(logging.ERROR, "attempt of %s crashed", "k\n1", exc_info=sys.exc_info())
    first, *rest = logged.text().rstrip("\n").split("\n")
    assert STAMP.match(first) and first.endswith("attempt of k\\n1 crashed")
    assert rest and all(line.startswith(TRACEBACK_PREFIX) for line in rest)
    assert rest[0] == TRACEBACK_PREFIX + "Traceback (most recent call last):"
    assert rest[-2:] == [TRACEBACK_PREFIX + "ValueError: boom",
                         TRACEBACK_PREFIX + "2026-01-01T00:00:00.000+00:00 CRITICAL [1] firesafe.worker: forged"
                                            "\\x1b]0;t\\x07"]
    assert not any(STAMP.match(line) for line in rest)


def test_logging_never_raises_on_arguments_that_cannot_be_printed(logged: Logged) -> None:
    logged.log(logging.INFO, "job %s failed: %s", Unprintable(), "caf\udce9 acme\x00corp")
    logged.log(logging.INFO, "n=%d", "many")
    logged.log(logging.WARNING, Unprintable())
    logged.log(logging.INFO, "%(key)s is %(state)s", {"key": Unprintable(), "state": "dead\u202e"})
    text = logged.text()
    text.encode("utf-8")
    assert [line.split(": ", 1)[1] for line in text.splitlines()] == [
        "job <unprintable Unprintable> failed: caf\\udce9 acme\\x00corp",
        "n=%d (log arguments that do not fit it: many)",
        "<unprintable Unprintable>",
        "<unprintable Unprintable> is dead\\u202e",
    ]
    rows = logged.json_rows()
    logged.streams["json"].getvalue().encode("utf-8")
    assert rows[0]["message"] == "job <unprintable Unprintable> failed: caf\udce9 acme\x00corp"
    assert len(rows) == 4


def test_message_of_is_get_message_when_it_works() -> None:
    record = logging.LogRecord("x", logging.INFO, "x", 0, "%s=%d", ("n", 3), None)
    assert message_of(record) == record.getMessage() == "n=3"


class _Dsn:
    """An extra log field that is not JSON: its text holds a secret."""

    def __str__(self) -> str:
        return "postgresql://app:hunter2-secret@db.internal/shop"


def test_json_log_masks_the_text_of_extra_fields_that_are_not_json() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter())
    record = logging.LogRecord("firesafe.worker", logging.INFO, __file__, 0, "connected", None, None)
    record.target = _Dsn()
    record.peers = [_Dsn(), {"sent": ("Bearer abc.def.ghi",)}, {1: "x"}]
    handler.handle(record)
    row = json.loads(stream.getvalue())
    assert "hunter2" not in stream.getvalue()
    assert row["target"] == "postgresql://app:********@db.internal/shop"
    assert row["peers"] == ["postgresql://app:********@db.internal/shop", {"sent": ["Bearer ********"]}, {"1": "x"}]
