"""Text from user code or from outside, made safe for one target (invariant 11).

Exceptions and their messages, results, payloads, event bodies and headers are data: they may hold
NUL, lone surrogates, control characters, markup, or raise when printed. Each target has exactly one
function here, and every writer to that target calls it:

- :func:`for_store`: text written to a store (error messages, tracebacks, notes). Valid UTF-8
  without NUL, which both stores hold; newlines and tabs kept.
- :func:`for_terminal`: text printed by the CLI (through rich). No control sequence reaches the
  terminal and no markup in the data is interpreted.
- :func:`for_log`: text inside one log line. One line, whatever the text held.

Whatever is replaced is written as a visible escape (``\\x00``, ``\\udce9``, ``\\x1b``), so what is
shown says what was there. :func:`safe_str` turns any object into text without ever raising.
"""

from __future__ import annotations

import re

#: NUL, lone surrogates, and the C0/C1 controls and DEL other than tab, newline and carriage return.
_STORE_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
#: What a terminal must not receive: the above, carriage return (it overwrites a line), and the
#: bidirectional overrides and isolates (they reorder what is shown after them).
_TERMINAL_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069]")
#: What a log line must not hold: any control character (newline included), lone surrogates, the
#: line and paragraph separators, and the bidirectional overrides (a log is read on a terminal too).
_LOG_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: A square bracket and the backslashes before it; and what rich reads as a tag when a bracket starts it.
_BRACKET = re.compile(r"(\\*)\[")
_TAG = re.compile(r"\[[a-z#/@][^[]*?]")


def _visible(match: re.Match[str]) -> str:
    """A replaced character written as its escape: ``\\n``, ``\\x00``, ``\\udce9``."""
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_str(value: object) -> str:
    """``str(value)``, never raising: if ``__str__`` raises or returns something else, its ``repr``,
    and failing that a placeholder naming the type.

    >>> class Bad(Exception):
    ...     def __str__(self):
    ...         raise RuntimeError("no")
    >>> safe_str(Bad("x")), safe_str(3)
    ("Bad('x')", '3')
    """
    try:
        text = str(value)
        if type(text) is str:
            return text
    except BaseException:  # a user's __str__ may raise anything
        pass
    try:
        text = repr(value)
        if type(text) is str:
            return text
    except BaseException:
        pass
    try:
        name = type(value).__name__
    except BaseException:
        name = "object"
    return f"<unprintable {name}>"


def for_store(text: str) -> str:
    """``text`` as a store can hold it: NUL, lone surrogates and control characters (other than tab,
    newline and carriage return) written as visible escapes.

    >>> for_store("acme\\x00corp"), for_store("caf\\udce9"), for_store("line 1\\nline 2")
    ('acme\\\\x00corp', 'caf\\\\udce9', 'line 1\\nline 2')
    """
    if text.isascii() and text.isprintable():  # the usual message: nothing to look for
        return text
    return _STORE_UNSAFE.sub(_visible, text)


def for_terminal(text: str, *, markup: bool = True) -> str:
    """``text`` as the CLI prints it: control characters (ESC, OSC, carriage return...), lone
    surrogates and bidirectional overrides written as escapes; newlines and tabs kept; and, for
    output that rich reads as markup (``markup=True``), square brackets escaped so the data's own
    ``[bold]`` is shown, not applied, and backslashes before a bracket or at the end escaped so
    that ``f"[red]{for_terminal(text)}[/red]"`` shows ``text`` exactly. (Rich also reads emoji codes
    such as ``:100:`` in a markup string, which have no escape: data is best printed as a ``Text``,
    with ``markup=False`` here.)

    >>> for_terminal("[bold]x[/x] \\x1b]0;owned\\x07")
    '\\\\[bold]x\\\\[/x] \\\\x1b]0;owned\\\\x07'
    >>> for_terminal("[b]", markup=False), for_terminal("C:\\\\"), for_terminal("\\\\[x")
    ('[b]', 'C:\\\\\\\\', '\\\\\\\\[x')
    """
    if not (text.isascii() and text.isprintable()):
        text = _TERMINAL_UNSAFE.sub(_visible, text)
    if not markup or ("[" not in text and not text.endswith("\\")):
        return text
    body = text.rstrip("\\")

    def bracket(match: re.Match[str]) -> str:
        # Rich reads n backslashes before a tag as n // 2 of them and, if n is odd, the tag as text;
        # before any other bracket, it drops one backslash.
        n = len(match.group(1))
        if _TAG.match(body, match.end() - 1):
            return "\\" * (2 * n + 1) + "["
        return "\\" * (n + 1 if n else 0) + "["

    return _BRACKET.sub(bracket, body) + "\\" * (2 * (len(text) - len(body)))


def for_log(text: str) -> str:
    """``text`` as one log line holds it: newlines, every other control character, lone surrogates
    and bidirectional overrides written as escapes, so no text can end a line, forge another one, or
    reorder what a terminal shows of it.

    >>> for_log("failed\\nINFO all good")
    'failed\\\\nINFO all good'
    """
    if text.isascii() and text.isprintable():
        return text
    return _LOG_UNSAFE.sub(_visible, text)
